package server

import (
	"sync"
	"time"
)

// holders remembers which peers may hold a copy of which key, so that a
// write can invalidate them. An entry is dropped when the write takes it or
// when it is older than a copy can be.
type holders struct {
	mu sync.Mutex
	m  map[string][]holder // guarded by mu
	n  int                 // guarded by mu: entries added since the last sweep
}

type holder struct {
	node uint64 // idHash of the node
	at   time.Time
}

// maxHolderKeys bounds the registry's memory; past it entries are dropped
// (a lost invalidation is bounded by the copy TTL anyway).
const maxHolderKeys = 1 << 20

func (h *holders) add(key string, node uint64, now time.Time, ttl time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[string][]holder)
	}
	hs := h.m[key]
	for i := range hs {
		if hs[i].node == node {
			hs[i].at = now
			return
		}
	}
	h.m[key] = append(hs, holder{node: node, at: now})
	h.n++
	if h.n > 4096 || len(h.m) > maxHolderKeys {
		h.sweepLocked(now, ttl)
	}
	// Still full of live entries: forget some. Their copies then live
	// out their TTL instead of being invalidated.
	for k := range h.m {
		if len(h.m) <= maxHolderKeys {
			break
		}
		delete(h.m, k)
	}
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
