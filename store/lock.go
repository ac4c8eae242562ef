package store

import (
	"sync"
	"sync/atomic"
)

// numStripes is the number of key stripes. Keys hash to a stripe; its mutex
// serialises writes to those keys and its overlay holds their writes that
// ristretto has not applied yet.
const numStripes = 256

// stripe is one slice of the key space, padded to a cache line so that
// neighbouring stripes' counters do not share one.
type stripe struct {
	// mu serialises every write (and read-modify-write) of the stripe's keys.
	// It may be held across ristretto calls that block (Wait, Del); the
	// callbacks ristretto runs on its own goroutine never take it.
	mu sync.Mutex

	// pmu guards pending and is held only around map operations, so that
	// readers never wait behind a writer's ristretto call.
	pmu sync.Mutex
	// pending holds new keys' entries that ristretto has buffered but not
	// yet applied (or refused), by key. At most one per key: a write first
	// settles the key's pending entry (see Store.settleKeyLocked).
	pending  map[string]*entry
	npending atomic.Int32 // len(pending), read without pmu
	// peak is the most entries pending held since it was last emptied: Go
	// maps never shrink, so a map that grew during a burst of new keys is
	// dropped once empty.
	peak int32

	hits, misses atomic.Uint64

	_ [64 - 48]byte
}

// shrinkPending is the overlay size above which an emptied overlay map is
// released rather than kept for reuse.
const shrinkPending = 64

// pendingGet returns the key's entry still on its way into ristretto, if any.
func (st *stripe) pendingGet(key string) *entry {
	if st.npending.Load() == 0 {
		return nil
	}
	st.pmu.Lock()
	e := st.pending[key]
	st.pmu.Unlock()
	return e
}

func (st *stripe) pendingPut(key string, e *entry) {
	st.pmu.Lock()
	if st.pending == nil {
		st.pending = make(map[string]*entry)
	}
	st.pending[key] = e
	n := int32(len(st.pending))
	st.npending.Store(n)
	st.peak = max(st.peak, n)
	st.pmu.Unlock()
}

// pendingDrop removes key's overlay entry if it is still e.
func (st *stripe) pendingDrop(key string, e *entry) {
	st.pmu.Lock()
	if st.pending[key] == e {
		delete(st.pending, key)
		st.npending.Store(int32(len(st.pending)))
	}
	st.pmu.Unlock()
}

func (r *ristrettoEngine) stripe(h uint64) *stripe { return &r.stripes[h>>56] }

// find returns the newest entry written for key, valid or not: the overlay
// first (it is newer than anything ristretto holds for the key), then
// ristretto. A gone overlay entry was refused or evicted: ristretto cannot
// hold an older version, since the entry went in as a new key.
func (r *ristrettoEngine) find(st *stripe, key string, h uint64) *entry {
	if e := st.pendingGet(key); e != nil && !e.gone() {
		return e
	}
	if e, ok := r.cache.Get(h); ok && e.key() == key {
		return e
	}
	return nil
}

// settled reports whether ristretto is done with the overlay entry e: it is
// in the map (counted now), or it was refused or has already left it. h is
// the hash of e's key.
func (r *ristrettoEngine) settled(e *entry, h uint64) bool {
	if e.gone() {
		return true
	}
	if r.present(h) {
		r.countLive(e)
		return true
	}
	return false
}

// present reports whether ristretto's map holds an item for h, without
// counting an access: the write path's own lookups must not feed TinyLFU,
// or every written key would look popular and new keys would lose every
// admission contest. While a key has an overlay entry, writes to it wait for
// it to settle, so only that entry can have appeared under h (barring a
// 64-bit hash collision).
func (r *ristrettoEngine) present(h uint64) bool {
	_, ok := r.cache.GetTTL(h)
	return ok
}

// settleKeyLocked makes sure key has nothing left in ristretto's buffer
// before a write or delete (st.mu held). Without it, a second new-key write
// would be refused by ristretto as a duplicate of the first, and a delete
// would run before the buffered insert it is meant to remove. Waiting costs
// one trip through ristretto's buffer, only for keys written twice within
// that time.
func (r *ristrettoEngine) settleKeyLocked(st *stripe, key string, h uint64) {
	e := st.pendingGet(key)
	if e == nil {
		return
	}
	if !r.settled(e, h) {
		r.cache.Wait()
		r.settled(e, h) // now admitted or gone; counts it if admitted
	}
	st.pendingDrop(key, e)
}

// janitor settles overlay entries in the background, so that readers stop
// looking at the overlay and Stats counts new items soon after the writes.
// Each round waits once for ristretto's buffer, which covers every entry
// added before it; entries added meanwhile kick off another round.
func (r *ristrettoEngine) janitor() {
	defer close(r.janitorDone)
	for {
		select {
		case <-r.stop:
			return
		case <-r.kick:
		}
		r.cache.Wait()
		r.settleAll()
	}
}

// settleAll drops every settled overlay entry.
func (r *ristrettoEngine) settleAll() {
	for i := range r.stripes {
		st := &r.stripes[i]
		if st.npending.Load() == 0 {
			continue
		}
		st.pmu.Lock()
		for key, e := range st.pending {
			if r.settled(e, r.s.hash(key)) {
				delete(st.pending, key)
			}
		}
		n := int32(len(st.pending))
		st.npending.Store(n)
		if n == 0 && st.peak > shrinkPending {
			st.pending, st.peak = nil, 0
		}
		st.pmu.Unlock()
	}
}

// kickJanitor wakes the janitor without blocking.
func (r *ristrettoEngine) kickJanitor() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}
