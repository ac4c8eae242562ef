// Package store keeps one node's items with memcached semantics on top of
// ristretto (github.com/dgraph-io/ristretto/v2): expiry, CAS uniques,
// add/replace/append/prepend/cas, incr/decr, touch, flush_all and an atomic
// read-modify-write for the meta commands, within a memory limit. It does no
// I/O.
//
// Ristretto supplies the concurrent map, the cost accounting against the
// limit and the eviction policy. The store adds what ristretto leaves out:
// per-key atomicity (256 striped mutexes; ristretto has no compare-and-swap),
// read-your-writes (ristretto applies new keys asynchronously; see Store),
// and memcached's item model: flags, expiry, CAS uniques, flush_all.
//
// Unlike memcached, eviction is not LRU. When the store is full, ristretto
// evicts the least frequently read of five sampled items, so a key written a
// moment ago and not read since is as likely to go as any other unread key;
// and its TinyLFU filter may refuse a new item outright when all five
// samples have been read more often (Stats.Rejections). Only reads count as
// accesses (Get and the commands that read before writing); the store's own
// bookkeeping lookups do not, which keeps refusals rare.
//
// Also left out, compared with memcached: slab classes and their statistics,
// item size limits (the protocol layer enforces them), the LRU crawler,
// iteration over keys, and persistence.
package store

import (
	"hash/maphash"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
)

// DefaultMaxBytes is the memory limit used when Config.MaxBytes is zero,
// memcached's default.
const DefaultMaxBytes = 64 << 20

// Config configures a Store.
type Config struct {
	// MaxBytes is the memory limit: each item is charged
	// len(Key) + len(Value) + ItemOverhead. If zero, DefaultMaxBytes is used.
	// Ristretto's TinyLFU counters come on top: 4 bytes per 256 bytes of
	// MaxBytes (1.6%), at most 64 MiB.
	MaxBytes int64
	// Now is the clock. If nil, time.Now is used. It must be safe for
	// concurrent use. With an injected clock, items are not given to
	// ristretto's TTL sweep (which runs on the real clock), so expired items
	// are reclaimed only on access or by eviction.
	Now func() time.Time
	// Valid, if set, is asked on every access whether an item is still
	// to be seen: key, and seq, the store sequence (Seq) its value was
	// written at. An item it refuses is treated like a flushed one: not
	// returned, and reclaimed. A cluster node uses it to disown items of
	// keys it lost and later owned again. It must be cheap and must not
	// call the Store.
	Valid func(key string, seq uint64) bool
	// Uniques, if set, hands out CAS uniques instead of the store
	// sequence; each call must return a value never returned before by
	// any store whose items clients can compare (a cluster: node bits and
	// a clock). It is called under a key's lock.
	Uniques func() uint64
}

// Store is a memcached-style item store. Its methods are safe for
// concurrent use by multiple goroutines, except Close.
//
// Read-your-writes: every write is visible to Get when the call returns,
// unless memory pressure evicts it. Ristretto applies a Set of a key it
// already holds in place, at once; a Set of a new key is only queued for its
// single policy goroutine, and dropped when that queue is full. So writers
// hold the key's stripe mutex, retry a dropped set after ristretto's Wait,
// and put a queued entry into the stripe's overlay map, which readers consult
// before ristretto (one atomic load while it is empty). A janitor goroutine
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
type Store struct {
	cache    *ristretto.Cache[uint64, *entry]
	seed     maphash.Seed
	now      func() int64 // Unix nanoseconds
	maxBytes int64

	seq     atomic.Uint64 // write sequence numbers, and CAS uniques without cfg.Uniques
	valid   func(key string, seq uint64) bool
	uniques func() uint64
	flush   flusher
	ctr     counters

	stripes [numStripes]stripe

	kick        chan struct{}
	stop        chan struct{}
	janitorDone chan struct{}
	closed      atomic.Bool
}

// maxCounters caps the TinyLFU sketch at 64 MiB.
const maxCounters = 1 << 24

// Items are given to ristretto without a TTL. Its TTL sweep deletes every
// key of an expired bucket whose current expiration is not in the future,
// and a key rewritten with no expiry has none: the sweep could delete a
// value just STORED. Expired items are reclaimed when read, or evicted under
// pressure, as memcached reclaims them lazily.

// New returns a Store; Close releases its goroutines.
func New(cfg Config) (*Store, error) {
	s := &Store{
		seed:        maphash.MakeSeed(),
		maxBytes:    cfg.MaxBytes,
		kick:        make(chan struct{}, 1),
		stop:        make(chan struct{}),
		janitorDone: make(chan struct{}),
		valid:       cfg.Valid,
		uniques:     cfg.Uniques,
	}
	if s.maxBytes <= 0 {
		s.maxBytes = DefaultMaxBytes
	}
	if cfg.Now != nil {
		s.now = func() int64 { return cfg.Now().UnixNano() }
	} else {
		s.now = func() int64 { return time.Now().UnixNano() }
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
		OnEvict:            s.onEvict,
		OnReject:           s.onReject,
		OnExit:             s.onExit,
	})
	if err != nil {
		return nil, err
	}
	s.cache = c
	go s.janitor()
	return s, nil
}

// Close stops the store's goroutines and drops every item. It must not be
// called concurrently with other methods; afterwards reads miss and writes
// are dropped.
func (s *Store) Close() {
	if !s.closed.CompareAndSwap(false, true) {
		return
	}
	close(s.stop)
	<-s.janitorDone
	s.cache.Close()
}

func (s *Store) hash(key string) uint64 { return maphash.String(s.seed, key) }

// Get returns the key's item if it is present and neither expired nor
// flushed, and marks it fetched. The item's Value aliases the store's
// memory.
func (s *Store) Get(key string) (Item, bool) {
	it, ok := s.get(key, true)
	return it, ok
}

// Peek is Get without its side effects on the item: it does not mark it
// fetched (mg with u, me) and is not counted in Stats.Hits or Misses.
func (s *Store) Peek(key string) (Item, bool) {
	return s.get(key, false)
}

func (s *Store) get(key string, fetch bool) (Item, bool) {
	h := s.hash(key)
	st := s.stripe(h)
	e := s.find(st, key, h)
	if e != nil {
		var now int64
		if e.exp != 0 || s.flush.pending() {
			now = s.now()
			s.flush.advance(now, s.seq.Load)
		}
		expired, flushed := s.invalid(e, now)
		if !expired && !flushed {
			it := e.item()
			if fetch {
				e.fetch()
				st.hits.Add(1)
			}
			return it, true
		}
		if expired {
			s.ctr.getExpired.Add(1)
		} else {
			s.ctr.getFlushed.Add(1)
		}
		s.reclaim(st, key, h, e)
	}
	if fetch {
		st.misses.Add(1)
	}
	return Item{}, false
}

// reclaim deletes e, found expired or flushed, unless the key has been
// written since; memcached likewise unlinks such items when it meets them.
func (s *Store) reclaim(st *stripe, key string, h uint64, e *entry) {
	st.mu.Lock()
	if s.find(st, key, h) == e && s.deleteLocked(st, key, h) {
		s.ctr.reclaimed.Add(1)
	}
	st.mu.Unlock()
}

// modify runs fn under the key's lock with the key's live entry (nil if
// absent, expired or flushed) and the clock reading, and stores the entry fn
// returns, if any. A new entry takes its seq, and normally its CAS unique,
// from s.nextSeq.
func (s *Store) modify(key string, fn func(cur *entry, now int64) (*entry, error)) (*entry, error) {
	return s.write(key, true, fn)
}

// overwrite is modify for writes that do not depend on the current item
// (Set, Put): it skips the lookup, which would count as an access.
func (s *Store) overwrite(key string, fn func(cur *entry, now int64) (*entry, error)) *entry {
	e, _ := s.write(key, false, fn)
	return e
}

func (s *Store) write(key string, lookup bool, fn func(cur *entry, now int64) (*entry, error)) (*entry, error) {
	h := s.hash(key)
	st := s.stripe(h)
	st.mu.Lock()
	defer st.mu.Unlock()
	now := s.now()
	s.flush.advance(now, s.seq.Load)
	var cur *entry
	if lookup {
		cur = s.find(st, key, h)
	}
	stale := false
	if cur != nil {
		if expired, flushed := s.invalid(cur, now); expired || flushed {
			cur, stale = nil, true
		}
	}
	next, err := fn(cur, now)
	if err != nil || next == nil {
		if stale && s.deleteLocked(st, key, h) {
			s.ctr.reclaimed.Add(1)
		}
		return cur, err
	}
	s.storeLocked(st, key, h, next, now)
	return next, nil
}

func (s *Store) nextSeq() uint64 { return s.seq.Add(1) }

// casFor is the CAS unique of the write with sequence seq.
func (s *Store) casFor(seq uint64) uint64 {
	if s.uniques != nil {
		return s.uniques()
	}
	return seq
}

// Seq returns the store sequence: every write after the call is given a
// greater one (see Config.Valid).
func (s *Store) Seq() uint64 { return s.seq.Load() }

// invalid reports why e is not visible at now: expired, or flushed (which
// includes an item Config.Valid refuses).
func (s *Store) invalid(e *entry, now int64) (expired, flushed bool) {
	expired, flushed = s.flush.invalid(e, now)
	if !expired && !flushed && s.valid != nil && !s.valid(e.key(), e.seq) {
		return false, true
	}
	return expired, flushed
}

// storeLocked makes e the key's current entry (st.mu held). An entry that
// is already expired deletes the key instead: memcached answers STORED and
// the item is gone.
func (s *Store) storeLocked(st *stripe, key string, h uint64, e *entry, now int64) {
	s.ctr.total.Add(1)
	if e.exp != 0 && e.exp <= now {
		s.deleteLocked(st, key, h)
		return
	}
	s.settleKeyLocked(st, key, h)
	// An existing key is replaced synchronously (and ristretto's OnExit
	// uncounts the old entry); a new key is queued, or dropped if the
	// buffer is full, in which case we drain it and try again.
	for !s.cache.Set(h, e, e.cost()) {
		if s.closed.Load() {
			return
		}
		s.cache.Wait()
	}
	if s.present(h) {
		s.countLive(e)
		return
	}
	st.pendingPut(key, e)
	s.kickJanitor()
}

// deleteLocked removes key (st.mu held) and reports whether ristretto held
// it. Callers have found the key's entry already, except a blind write of an
// expired item, where a (64-bit) hash collision could remove another key:
// harmless in a cache.
func (s *Store) deleteLocked(st *stripe, key string, h uint64) bool {
	s.settleKeyLocked(st, key, h)
	if s.present(h) {
		s.cache.Del(h) // OnExit uncounts it
		return true
	}
	return false
}
