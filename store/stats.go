package store

import "sync/atomic"

// Stats is a snapshot of the store's counters, named after memcached's
// "stats" fields where one exists.
type Stats struct {
	CurrItems  int64  // curr_items: items held, including expired or flushed ones not yet reclaimed (as memcached)
	TotalItems uint64 // total_items: successful stores (set, add, replace, append, prepend, cas, Put, Update, incr/decr that lengthen the value); not Touch, an Update with KeepCAS, nor incr/decr rewriting the value in place, which store no new item
	// Bytes is bytes: what the current items are charged. Ristretto: key
	// and value as the Go allocator rounds them, + ItemOverhead each. Segments: key, value and item header,
	// as stored.
	Bytes int64

	Evictions        uint64 // evictions: items removed to make room for others
	EvictedUnfetched uint64 // evicted_unfetched: evicted items that were never read
	Rejections       uint64 // new items refused: by ristretto's admission policy (TinyLFU) when full, or too large for Segments' memory; memcached has none
	Reclaimed        uint64 // reclaimed: expired or flushed items removed (when read, or by the Segments sweeper)
	ExpiredUnfetched uint64 // expired_unfetched: reclaimed expired items that were never read

	Hits       uint64 // get_hits: Get found a live item
	Misses     uint64 // get_misses: Get found nothing, or an expired or flushed item
	GetExpired uint64 // get_expired: misses on an expired item
	GetFlushed uint64 // get_flushed: misses on a flushed item

	LimitMaxBytes int64 // limit_maxbytes: Config.MaxBytes
}

// counters are the statistics the Store keeps itself; the engines count
// the rest (engine.stats).
type counters struct {
	total            atomic.Uint64
	reclaimed        atomic.Uint64
	expiredUnfetched atomic.Uint64
	getExpired       atomic.Uint64
	getFlushed       atomic.Uint64
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	var st Stats
	s.eng.stats(&st)
	st.TotalItems = s.ctr.total.Load()
	st.Reclaimed = s.ctr.reclaimed.Load()
	st.ExpiredUnfetched = s.ctr.expiredUnfetched.Load()
	st.GetExpired = s.ctr.getExpired.Load()
	st.GetFlushed = s.ctr.getFlushed.Load()
	st.LimitMaxBytes = s.maxBytes
	return st
}
