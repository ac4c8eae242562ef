package server

import (
	"sync"
	"sync/atomic"
	"time"
)

// holders remembers which peers may hold a copy of which key, so that a
// write can invalidate them. An entry is dropped when the write takes it or
// when it is older than a copy can be.
type holders struct {
	mu sync.Mutex
	m  map[string][]holder // guarded by mu
	n  int                 // guarded by mu: entries added since the last sweep
	// rounds holds, per key, the latest write under way at this owner,
	// closed when the write and its invalidations are over and every
	// earlier round of the key is too. While one is open, reads of the
	// key here wait for it (await): a reader here must not see the new
	// value while a holder may still serve the old one, or two reads in a
	// row could see new, then old.
	rounds map[string]chan struct{} // guarded by mu
	open   atomic.Int64             // len(rounds), read without mu
}

type holder struct {
	node uint64 // idHash of the node
	at   time.Time
}

// maxHolderKeys bounds the registry's memory; past it entries are dropped
// (a lost invalidation is bounded by the copy TTL anyway).
const maxHolderKeys = 1 << 20

// add registers node as a holder of a copy of key, from now on.
//
// It returns how many holders it forgot to stay within maxHolderKeys:
// their copies live out their TTL instead of being invalidated, which the
// caller counts as lost invalidations.
func (h *holders) add(key string, node uint64, now time.Time, ttl time.Duration) (forgot int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[string][]holder)
	}
	hs := h.m[key]
	for i := range hs {
		if hs[i].node == node {
			hs[i].at = now
			return 0
		}
	}
	h.m[key] = append(hs, holder{node: node, at: now})
	h.n++
	if h.n > 4096 || len(h.m) > maxHolderKeys {
		h.sweepLocked(now, ttl)
	}
	// Still full of live entries: forget some.
	for k, hs := range h.m {
		if len(h.m) <= maxHolderKeys {
			break
		}
		forgot += len(hs)
		delete(h.m, k)
	}
	return forgot
}

// take removes and returns the nodes that may hold a live copy of key.
func (h *holders) take(key string, now time.Time, ttl time.Duration) []uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	hs, ok := h.m[key]
	if !ok {
		return nil
	}
	delete(h.m, key)
	var out []uint64
	for _, x := range hs {
		if now.Sub(x.at) <= ttl {
			out = append(out, x.node)
		}
	}
	return out
}

// begin opens a write round of key: until end is called, reads of key
// here wait (await). prev is the round before it, still open, or nil; end
// must not be called before prev is closed (or given up on).
func (h *holders) begin(key string) (prev <-chan struct{}, end func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rounds == nil {
		h.rounds = make(map[string]chan struct{})
	}
	if ch, ok := h.rounds[key]; ok {
		prev = ch
	}
	ch := make(chan struct{})
	h.rounds[key] = ch
	h.open.Store(int64(len(h.rounds)))
	return prev, func() {
		h.mu.Lock()
		if h.rounds[key] == ch {
			delete(h.rounds, key)
			h.open.Store(int64(len(h.rounds)))
		}
		h.mu.Unlock()
		close(ch)
	}
}

// await waits until no write round of key is open, or timeout passed. It
// costs one atomic load while no round is open anywhere.
func (h *holders) await(key string, timeout time.Duration) {
	if h.open.Load() == 0 {
		return
	}
	h.mu.Lock()
	ch := h.rounds[key]
	h.mu.Unlock()
	if ch == nil {
		return
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

func (h *holders) sweepLocked(now time.Time, ttl time.Duration) {
	h.n = 0
	for k, hs := range h.m {
		live := hs[:0]
		for _, x := range hs {
			if now.Sub(x.at) <= ttl {
				live = append(live, x)
			}
		}
		if len(live) == 0 {
			delete(h.m, k)
		} else {
			h.m[k] = live
		}
	}
}

func (h *holders) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}
