package store

import (
	"sync/atomic"

	"github.com/dgraph-io/ristretto/v2"
)

// Stats is a snapshot of the store's counters, named after memcached's
// "stats" fields where one exists.
type Stats struct {
	CurrItems  int64  // curr_items: items held, including expired or flushed ones not yet reclaimed (as memcached)
	TotalItems uint64 // total_items: successful stores (set, add, replace, append, prepend, cas, incr/decr, Put, Update)
	Bytes      int64  // bytes: what the current items are charged: key + value + ItemOverhead each

	Evictions  uint64 // evictions: items removed to make room for others
	Rejections uint64 // new items ristretto's admission policy (TinyLFU) refused when full; memcached has none
	Reclaimed  uint64 // expired or flushed items removed when read

	Hits       uint64 // get_hits: Get found a live item
	Misses     uint64 // get_misses: Get found nothing, or an expired or flushed item
	GetExpired uint64 // get_expired: misses on an expired item
	GetFlushed uint64 // get_flushed: misses on a flushed item

	LimitMaxBytes int64 // limit_maxbytes: Config.MaxBytes
}

// counters are the store-wide statistics. Hits and misses live on the
// stripes instead, to spread the contention of the hottest path.
type counters struct {
	items, bytes atomic.Int64
	total        atomic.Uint64
	evictions    atomic.Uint64
	rejections   atomic.Uint64
	reclaimed    atomic.Uint64
	getExpired   atomic.Uint64
	getFlushed   atomic.Uint64
}

// Stats returns the counters. It first waits for ristretto to apply the
// writes already made, so that CurrItems and Bytes include them.
func (s *Store) Stats() Stats {
	if !s.closed.Load() {
		s.cache.Wait()
		s.settleAll()
	}
	st := Stats{
		CurrItems:     s.ctr.items.Load(),
		TotalItems:    s.ctr.total.Load(),
		Bytes:         s.ctr.bytes.Load(),
		Evictions:     s.ctr.evictions.Load(),
		Rejections:    s.ctr.rejections.Load(),
		Reclaimed:     s.ctr.reclaimed.Load(),
		GetExpired:    s.ctr.getExpired.Load(),
		GetFlushed:    s.ctr.getFlushed.Load(),
		LimitMaxBytes: s.maxBytes,
	}
	for i := range s.stripes {
		st.Hits += s.stripes[i].hits.Load()
		st.Misses += s.stripes[i].misses.Load()
	}
	return st
}

// countLive counts e once it is known to be in ristretto's map.
func (s *Store) countLive(e *entry) {
	if e.markLive() {
		s.ctr.items.Add(1)
		s.ctr.bytes.Add(e.cost())
	}
}

// onExit is ristretto's OnExit: e left the map, whichever way (replaced by
// an update, deleted, evicted, expired, refused). It runs on ristretto's
// goroutine or inside ristretto calls, so it only touches atomics.
func (s *Store) onExit(e *entry) {
	if e != nil && e.markGone() {
		s.ctr.items.Add(-1)
		s.ctr.bytes.Add(-e.cost())
	}
}

// onEvict is ristretto's OnEvict, for victims of the policy and for items
// its TTL sweep removed. A nil value means the key had already been deleted.
func (s *Store) onEvict(it *ristretto.Item[*entry]) {
	e := it.Value
	if e == nil || s.closed.Load() {
		return
	}
	if e.exp != 0 && e.exp <= s.now() {
		s.ctr.reclaimed.Add(1)
		return
	}
	s.ctr.evictions.Add(1)
}

// onReject is ristretto's OnReject: a new item was refused.
func (s *Store) onReject(it *ristretto.Item[*entry]) {
	if it.Value != nil && !s.closed.Load() {
		s.ctr.rejections.Add(1)
	}
}
