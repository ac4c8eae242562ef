package server

import (
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// hotKeys tells the keys another node owns that this node reads often
// enough to keep a copy of (router.keepHere): a hot key read at every
// entry node would otherwise cost a hop on most of its reads, the hop that
// makes a cluster dearer per request than one node. A copy kept here is
// read through from the owner, registered there and invalidated by every
// write, exactly as a spilled key's copy (fill.go), so the coherence
// contract covers it unchanged; what it costs is the owner's invalidations,
// which each write of the key waits for.
//
// The estimate is a count-min sketch: four rows of counters, each key
// counted in one counter per row and estimated by the least of its four.
// Every hotWindow counts all counters are halved, so the sketch follows
// what is hot now. Counters are updated with atomics and halved without a
// lock: a count lost to a racing halving only delays a key's promotion.
type hotKeys struct {
	threshold uint32 // estimate at which a key is hot; 0: never
	rows      [hotRows][hotWidth]atomic.Uint32
	counted   atomic.Uint64
	halving   atomic.Bool
}

const (
	hotRows   = 4
	hotWidth  = 1 << 14
	hotWindow = 16 * hotWidth // counts between two halvings
)

// add counts one read of key and reports whether key is hot.
func (h *hotKeys) add(key string) bool {
	if h.threshold == 0 {
		return false
	}
	x := xxhash.Sum64String(key)
	est := ^uint32(0)
	for i := range hotRows {
		n := h.rows[i][(x>>(14*i))&(hotWidth-1)].Add(1)
		est = min(est, n)
	}
	if h.counted.Add(1)%hotWindow == 0 && h.halving.CompareAndSwap(false, true) {
		h.halve()
		h.halving.Store(false)
	}
	return est >= h.threshold
}

func (h *hotKeys) halve() {
	for i := range h.rows {
		for j := range h.rows[i] {
			c := &h.rows[i][j]
			c.Store(c.Load() / 2)
		}
	}
}
