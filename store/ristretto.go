package store

import (
	"sync/atomic"

	"github.com/dgraph-io/ristretto/v2"
)

// ristrettoEngine keeps items in ristretto (the Ristretto engine).
//
// Ristretto supplies the concurrent map, the cost accounting against the
// limit and the eviction policy. The engine adds what ristretto leaves out:
// per-key atomicity (256 striped mutexes; ristretto has no
// compare-and-swap) and read-your-writes (ristretto applies new keys
// asynchronously).
//
// Unlike memcached, eviction is not LRU. When the store is full, ristretto
// evicts the least frequently read of five sampled items, so a key written a
// moment ago and not read since is as likely to go as any other unread key;
// and its TinyLFU filter may refuse a new item outright when all five
// samples have been read more often (Stats.Rejections). Only reads count as
// accesses (Get and the commands that read before writing); the engine's
// own bookkeeping lookups do not, which keeps refusals rare.
//
// Read-your-writes: ristretto applies a Set of a key it already holds in
// place, at once; a Set of a new key is only queued for its single policy
// goroutine, and dropped when that queue is full. So writers hold the key's
// stripe mutex, retry a dropped set after ristretto's Wait, and put a queued
// entry into the stripe's overlay map, which readers consult before
// ristretto (one atomic load while it is empty). A janitor goroutine
// empties the overlay after one Wait per batch of writes. A write to a key
// that is still in the overlay first waits for it, so that ristretto never
// holds two queued inserts of one key (it would keep the first) nor sees a
// delete overtake the insert it should remove.
//
// Chosen by measurement (BenchmarkSetNew: a new key's Set, then its Get; 2
// cores shared with other work, so CPU time is the steadier figure): 2.1 µs
// of CPU per pair with the overlay, against 2.8 µs with a ristretto Wait
// after each new-key Set instead (the simpler design), which also blocks the
// writer, and other writers of its stripe, for the round trip: 2.2 µs wall
// per pair against 3.7 to 5.6 µs. Writes to existing keys need neither.
// Ristretto v2 has no way to switch admission off for new items.
//
// Items are given to ristretto without a TTL. Its TTL sweep deletes every
// key of an expired bucket whose current expiration is not in the future,
// and a key rewritten with no expiry has none: the sweep could delete a
// value just STORED. Expired items are reclaimed when read, or evicted under
// pressure, as memcached reclaims them lazily.
type ristrettoEngine struct {
	s     *Store
	cache *ristretto.Cache[uint64, *entry]

	stripes [numStripes]stripe

	// items and bytes count what ristretto holds (see entry.markLive).
	items, bytes     atomic.Int64
	evictions        atomic.Uint64
	evictedUnfetched atomic.Uint64
	rejections       atomic.Uint64

	kick        chan struct{}
	stop        chan struct{}
	janitorDone chan struct{}
	closed      atomic.Bool
}

// maxCounters caps the TinyLFU sketch at 64 MiB.
const maxCounters = 1 << 24

func newRistretto(s *Store) (*ristrettoEngine, error) {
	r := &ristrettoEngine{
		s:           s,
		kick:        make(chan struct{}, 1),
		stop:        make(chan struct{}),
		janitorDone: make(chan struct{}),
	}
	// About one TinyLFU counter (4 bytes) per item the limit can hold,
	// counting items as 256 bytes; ristretto suggests ten, which would cost
	// more memory than admission accuracy is worth here. Capped so that a
	// huge limit does not allocate a huge sketch up front.
	counters := min(max(s.maxBytes/256, 1024), maxCounters)
	c, err := ristretto.NewCache(&ristretto.Config[uint64, *entry]{
		NumCounters:        counters,
		MaxCost:            s.maxBytes,
		BufferItems:        64,
		IgnoreInternalCost: true, // ItemOverhead already charges it
		KeyToHash:          func(h uint64) (uint64, uint64) { return h, 0 },
		OnEvict:            r.onEvict,
		OnReject:           r.onReject,
		OnExit:             r.onExit,
	})
	if err != nil {
		return nil, err
	}
	r.cache = c
	go r.janitor()
	return r, nil
}

func (r *ristrettoEngine) close() {
	if !r.closed.CompareAndSwap(false, true) {
		return
	}
	close(r.stop)
	<-r.janitorDone
	r.cache.Close()
}

func (r *ristrettoEngine) flushed() {}

func (r *ristrettoEngine) get(key string, h uint64, fetch bool, _ []byte) (Item, bool) {
	st := r.stripe(h)
	e := r.find(st, key, h)
	if e != nil {
		ok, expired := r.s.visible(key, e.seq, e.exp)
		if ok {
			it := e.item()
			if fetch {
				e.fetch()
				st.hits.Add(1)
			}
			return it, true
		}
		r.reclaim(st, key, h, e, expired)
	}
	if fetch {
		st.misses.Add(1)
	}
	return Item{}, false
}

// reclaim deletes e, found expired or flushed, unless the key has been
// written since; memcached likewise unlinks such items when it meets them.
func (r *ristrettoEngine) reclaim(st *stripe, key string, h uint64, e *entry, expired bool) {
	st.mu.Lock()
	if r.find(st, key, h) == e && r.deleteLocked(st, key, h) {
		r.s.reclaimed(expired, e.bits()&stateFetched != 0)
	}
	st.mu.Unlock()
}

func (r *ristrettoEngine) write(key string, h uint64, op writeOp) outcome {
	st := r.stripe(h)
	st.mu.Lock()
	defer st.mu.Unlock()
	now := r.s.begin(&op)
	var cur *entry
	if op.lookup() {
		cur = r.find(st, key, h)
	}
	var cr rec
	var curp *rec
	var stale, expired bool
	if cur != nil {
		var flushed bool
		if expired, flushed = r.s.invalid(key, cur.seq, cur.exp, now); expired || flushed {
			stale = true
		} else {
			cr = cur.rec()
			curp = &cr
		}
	}
	o := r.s.apply(&op, key, curp)
	if o.remove {
		if !r.deleteLocked(st, key, h) {
			o.err = ErrNotFound // refused by ristretto meanwhile
		}
		return o
	}
	if !o.store {
		if stale && r.deleteLocked(st, key, h) {
			r.s.reclaimed(expired, cur.bits()&stateFetched != 0)
		}
		if op.returnsItem() && curp != nil {
			o.item = cur.item()
		}
		return o
	}
	n := &o.next
	var e *entry
	if curp != nil && sameBytes(n.value, curp.value) {
		// Only metadata changed: share the key and value bytes.
		e = newEntryKV(cur.kv, cur.klen(), n.flags, n.exp, n.cas, n.seq, n.bits)
	} else {
		e = newEntry(key, n.value, n.flags, n.exp, n.cas, n.seq, n.bits)
	}
	r.storeLocked(st, key, h, e, now)
	if op.returnsItem() {
		o.item = e.item()
	}
	return o
}

// storeLocked makes e the key's current entry (st.mu held). An entry that
// is already expired deletes the key instead: memcached answers STORED and
// the item is gone.
func (r *ristrettoEngine) storeLocked(st *stripe, key string, h uint64, e *entry, now int64) {
	if e.exp != 0 && e.exp <= now {
		r.deleteLocked(st, key, h)
		return
	}
	r.settleKeyLocked(st, key, h)
	// An existing key is replaced synchronously (and ristretto's OnExit
	// uncounts the old entry); a new key is queued, or dropped if the
	// buffer is full, in which case we drain it and try again.
	for !r.cache.Set(h, e, e.cost()) {
		if r.closed.Load() {
			return
		}
		r.cache.Wait()
	}
	if r.present(h) {
		r.countLive(e)
		return
	}
	st.pendingPut(key, e)
	r.kickJanitor()
}

// deleteLocked removes key (st.mu held) and reports whether ristretto held
// it. Callers have found the key's entry already, except a blind write of an
// expired item, where a (64-bit) hash collision could remove another key:
// harmless in a cache.
func (r *ristrettoEngine) deleteLocked(st *stripe, key string, h uint64) bool {
	r.settleKeyLocked(st, key, h)
	if r.present(h) {
		r.cache.Del(h) // OnExit uncounts it
		return true
	}
	return false
}

// stats first waits for ristretto to apply the writes already made, so
// that CurrItems and Bytes include them.
func (r *ristrettoEngine) stats(st *Stats) {
	if !r.closed.Load() {
		r.cache.Wait()
		r.settleAll()
	}
	st.CurrItems = r.items.Load()
	st.Bytes = r.bytes.Load()
	st.Evictions = r.evictions.Load()
	st.EvictedUnfetched = r.evictedUnfetched.Load()
	st.Rejections = r.rejections.Load()
	for i := range r.stripes {
		st.Hits += r.stripes[i].hits.Load()
		st.Misses += r.stripes[i].misses.Load()
	}
}

// countLive counts e once it is known to be in ristretto's map.
func (r *ristrettoEngine) countLive(e *entry) {
	if e.markLive() {
		r.items.Add(1)
		r.bytes.Add(e.cost())
	}
}

// onExit is ristretto's OnExit: e left the map, whichever way (replaced by
// an update, deleted, evicted, expired, refused). It runs on ristretto's
// goroutine or inside ristretto calls, so it only touches atomics.
func (r *ristrettoEngine) onExit(e *entry) {
	if e != nil && e.markGone() {
		r.items.Add(-1)
		r.bytes.Add(-e.cost())
	}
}

// onEvict is ristretto's OnEvict, for victims of the policy and for items
// its TTL sweep removed. A nil value means the key had already been deleted.
func (r *ristrettoEngine) onEvict(it *ristretto.Item[*entry]) {
	e := it.Value
	if e == nil || r.closed.Load() {
		return
	}
	fetched := e.bits()&stateFetched != 0
	if e.exp != 0 && e.exp <= r.s.now() {
		r.s.reclaimed(true, fetched)
		return
	}
	r.evictions.Add(1)
	if !fetched {
		r.evictedUnfetched.Add(1)
	}
}

// onReject is ristretto's OnReject: a new item was refused.
func (r *ristrettoEngine) onReject(it *ristretto.Item[*entry]) {
	if it.Value != nil && !r.closed.Load() {
		r.rejections.Add(1)
	}
}
