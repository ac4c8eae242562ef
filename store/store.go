// Package store keeps one node's items with memcached semantics: expiry,
// CAS uniques, add/replace/append/prepend/cas, incr/decr, touch, flush_all
// and an atomic read-modify-write for the meta commands, within a memory
// limit. It does no I/O.
//
// A Store keeps the semantics once (commands.go) over one of two engines,
// which keep the bytes:
//
//   - Segments (segments.go and the files it names): items live off the Go
//     heap, header, key and value together, appended to memory-mapped
//     segments and found through an index that holds no pointers. Whole
//     segments are evicted (evict.go). The engine for the items a node
//     owns: about 30 bytes per item on top of key and value, and nothing
//     for the garbage collector to scan (README "Memory" has the figures).
//   - Ristretto (ristretto.go, github.com/dgraph-io/ristretto/v2): items are
//     Go objects in ristretto's map; its TinyLFU admission keeps one-off keys
//     out, which is what the store of copies (the spilled keys a node reads
//     through from their owner) wants.
//
// Left out, compared with memcached: slab classes and their statistics,
// item size limits (the protocol layer enforces them), the LRU crawler's
// commands, iteration over keys, and persistence.
package store

import (
	"hash/maphash"
	"sync/atomic"
	"time"
)

// DefaultMaxBytes is the memory limit used when Config.MaxBytes is zero,
// memcached's default.
const DefaultMaxBytes = 64 << 20

// Engine says where a Store keeps its items.
type Engine uint8

const (
	// Ristretto keeps items as Go objects in ristretto, whose TinyLFU
	// admission refuses new keys that look colder than what they would
	// evict: the engine for copies. Its zero value makes it the default.
	Ristretto Engine = iota
	// Segments keeps items off the Go heap in memory-mapped segments,
	// evicting whole segments (S3-FIFO): the engine for owned items, about
	// 30 bytes of overhead per item, nothing for the collector to scan.
	Segments
)

func (e Engine) String() string {
	if e == Segments {
		return "segments"
	}
	return "ristretto"
}

// Config configures a Store.
type Config struct {
	// MaxBytes is the memory limit. If zero, DefaultMaxBytes is used.
	// With Ristretto, each item is charged len(Key) + len(Value), rounded
	// up as the Go allocator rounds them, + ItemOverhead, and ristretto's
	// TinyLFU counters come on top: 4 bytes per 256 bytes of MaxBytes
	// (1.6%), at most 64 MiB. With Segments it
	// bounds every byte the engine maps: segments (items with their
	// headers, and the space of dead ones not yet reused) and the index.
	MaxBytes int64
	// Engine picks where items live; the zero value is Ristretto.
	Engine Engine
	// Now is the clock. If nil, time.Now is used. It must be safe for
	// concurrent use. With an injected clock, Ristretto items are not
	// given to ristretto's TTL sweep (which runs on the real clock), so
	// expired items are reclaimed only on access or by eviction; the
	// Segments sweeper reads this clock.
	Now func() time.Time
	// Valid, if set, is asked on every access whether an item is still
	// to be seen: key, and seq, the store sequence (Seq) its value was
	// written at. An item it refuses is treated like a flushed one: not
	// returned, and reclaimed. A cluster node uses it to disown items of
	// keys it lost and later owned again. It must be cheap and must not
	// call the Store.
	Valid func(key string, seq uint64) bool
	// Uniques, if set, hands out CAS uniques instead of the store's own
	// counter; each call must return a value never returned before by
	// any store whose items clients can compare (a cluster: node bits and
	// a clock). It is called under a key's lock.
	Uniques func() uint64

	// policy is the Segments eviction policy; tests compare them.
	policy policy
}

// Store is a memcached-style item store. Its methods are safe for
// concurrent use by multiple goroutines, except Close.
//
// Every write is visible to Get when the call returns, unless memory
// pressure evicts it (see the engines for how each keeps that promise).
type Store struct {
	eng      engine
	seed     maphash.Seed
	now      func() int64 // Unix nanoseconds
	maxBytes int64

	// seq orders writes against flushes and view changes: a write takes
	// its current value, Seq (flush_all, a node's view change) moves it.
	// So it changes only on those rare events, and a segment's item
	// header keeps it in 4 bytes.
	seq     atomic.Uint64
	cas     atomic.Uint64 // CAS uniques without cfg.Uniques
	valid   func(key string, seq uint64) bool
	uniques func() uint64
	flush   flusher
	ctr     counters
}

// engine keeps a Store's items; the Store keeps their semantics. Every
// method takes the key's hash (Store.hash). An engine calls back into its
// Store for the clock, visibility and sequence numbers, and to apply a
// write's semantics (Store.apply) under the key's lock.
type engine interface {
	// get returns key's item if Store.visible says it is, marking it
	// fetched if fetch is set, and reclaims it if not. A value the engine
	// copies out is appended to dst if dst is not nil.
	get(key string, h uint64, fetch bool, dst []byte) (Item, bool)
	// write runs op under key's lock: it hands the key's live record to
	// Store.apply and stores, or removes, what apply says.
	write(key string, h uint64, op writeOp) outcome
	// stats fills in what the engine counts: CurrItems, Bytes, Evictions,
	// EvictedUnfetched, Rejections, Hits, Misses.
	stats(st *Stats)
	// flushed is told of a flush_all, which the engine may reclaim.
	flushed()
	close()
}

// New returns a Store; Close releases its goroutines and memory.
func New(cfg Config) (*Store, error) {
	s := &Store{
		seed:     maphash.MakeSeed(),
		maxBytes: cfg.MaxBytes,
		valid:    cfg.Valid,
		uniques:  cfg.Uniques,
	}
	if s.maxBytes <= 0 {
		s.maxBytes = DefaultMaxBytes
	}
	s.seq.Store(1) // above the flush watermark's zero
	s.flush.seq = &s.seq
	if cfg.Now != nil {
		s.now = func() int64 { return cfg.Now().UnixNano() }
	} else {
		s.now = func() int64 { return time.Now().UnixNano() }
	}
	var err error
	switch cfg.Engine {
	case Segments:
		s.eng, err = newSegments(s, cfg.policy)
	default:
		s.eng, err = newRistretto(s)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Close stops the store's goroutines and releases every item. It must not
// be called concurrently with other methods; afterwards reads miss and
// writes are dropped.
func (s *Store) Close() { s.eng.close() }

func (s *Store) hash(key string) uint64 { return maphash.String(s.seed, key) }

// Get returns the key's item if it is present and neither expired nor
// flushed, and marks it fetched. The item's Value must not be modified.
func (s *Store) Get(key string) (Item, bool) {
	return s.eng.get(key, s.hash(key), true, nil)
}

// GetAppend is Get with the value copied into dst's array, if it fits,
// when the store copies values out (the Segments engine, whose memory is
// reused): a caller that reuses dst reads without allocating. The value
// then aliases dst's array; one that does not fit gets memory of its own,
// as from Get. The Ristretto engine's values are immutable and returned
// as they are.
func (s *Store) GetAppend(key string, dst []byte) (Item, bool) {
	return s.eng.get(key, s.hash(key), true, dst[:0])
}

// Peek is Get without its side effects on the item: it does not mark it
// fetched (mg with u, me) and is not counted in Stats.Hits or Misses.
func (s *Store) Peek(key string) (Item, bool) {
	return s.eng.get(key, s.hash(key), false, nil)
}

// write runs op on key (see engine.write) and counts what it stored.
func (s *Store) write(key string, op writeOp) outcome {
	o := s.eng.write(key, s.hash(key), op)
	// A touch (touch, gat, mg T: o.same) stores the item again with a
	// new expiry, but it is no new item: total_items counted every touch
	// (TestTotalItemsNotCountingTouches). Nor is an incr rewritten in
	// place (TestTotalItemsIncrInPlace).
	if o.err == nil && o.store && !o.same {
		s.ctr.total.Add(1)
	}
	return o
}

// clock reads the clock for a write and applies a delayed flush that is
// due.
func (s *Store) clock() int64 {
	now := s.now()
	s.flush.advance(now, s.seq.Load)
	return now
}

// begin starts a write, under its key's lock: it reads the clock (clock)
// and the store sequence the write's record will take, before the write
// looks at the key's item.
//
// The sequence is read first: a read-modify-write (append, incr, Update)
// that read it when it made its record, after checking the item, stored
// with a sequence above the mark of a flush_all that ran in between, and
// the item it had found live, set before the flush, came back after it,
// modified (TestFlushDuringReadModifyWrite). Read first, either the
// sequence is not above the flush's mark, and the new record is flushed
// with the old, or it was read after the flush raised its seq past the
// mark, which it does after raising the watermark (flusher.raise), and the
// check finds the old item flushed.
func (s *Store) begin(op *writeOp) int64 {
	now := s.clock()
	op.seq = s.seq.Load()
	return now
}

// Seq returns the store sequence: every write after the call is given a
// greater one (see Config.Valid), every write before it one not greater.
func (s *Store) Seq() uint64 { return s.seq.Add(1) - 1 }

// unique is the CAS unique of a new write.
func (s *Store) unique() uint64 {
	if s.uniques != nil {
		return s.uniques()
	}
	return s.cas.Add(1)
}

// stale reports why an item written at seq that expires at exp is not
// visible at now: expired, or flushed. It does not ask Config.Valid: the
// engines' sweeps use it, and only reads and writes of the key ask.
func (s *Store) stale(seq uint64, exp, now int64) (expired, flushed bool) {
	if seq <= s.flush.watermark.Load() {
		return false, true
	}
	return exp != 0 && exp <= now, false
}

// invalid is stale, and Config.Valid's verdict on key, for reads and
// writes; an item Valid refuses counts as flushed.
func (s *Store) invalid(key string, seq uint64, exp, now int64) (expired, flushed bool) {
	expired, flushed = s.stale(seq, exp, now)
	if !expired && !flushed && s.valid != nil && !s.valid(key, seq) {
		return false, true
	}
	return expired, flushed
}

// visible is invalid for a read, which reads the clock only when the item
// can expire or a flush is pending, and counts a miss on an item that is
// no longer visible.
func (s *Store) visible(key string, seq uint64, exp int64) (ok, expired bool) {
	expired, flushed := s.readable(key, seq, exp)
	switch {
	case expired:
		s.ctr.getExpired.Add(1)
	case flushed:
		s.ctr.getFlushed.Add(1)
	}
	return !expired && !flushed, expired
}

// readable is invalid for a read, which reads the clock only when the
// item can expire or a flush is pending; it counts nothing.
func (s *Store) readable(key string, seq uint64, exp int64) (expired, flushed bool) {
	var now int64
	if exp != 0 || s.flush.pending() {
		now = s.clock()
	}
	return s.invalid(key, seq, exp, now)
}

// reclaimed counts an expired or flushed item an engine removed; an
// expired one that was never read also counts as expired_unfetched.
func (s *Store) reclaimed(expired, fetched bool) {
	s.ctr.reclaimed.Add(1)
	if expired && !fetched {
		s.ctr.expiredUnfetched.Add(1)
	}
}
