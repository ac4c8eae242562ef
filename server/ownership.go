package server

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"spillway/ring"
)

// Ownership (ARCHITECTURE.md, "Coherence"). A node serves an item from its
// owned store, and accepts a write, only for a key it owns in its current
// view; this file holds what makes that check sound when views change
// under running requests:
//
//   - keyLocks: a write (or a fill) checks ownership and stores under a
//     read lock of the key's stripe; installing a view takes every stripe's
//     write lock. So no write that checked the old view is still storing
//     once a new view is in place, and a hand-off acknowledged after an
//     install cannot be overtaken by a write of the old owner.
//   - history: the views this node has had, each with the owned store's
//     sequence number at its install. An item written under one view and
//     read under a later one is valid only if the node owned the key in
//     every view since (Store's Valid hook): a node that lost a key and got
//     it back never serves what it held before, since the key's writes went
//     elsewhere meanwhile. An item of a key the node lost (and has not got
//     back) stays for the new owner's warm reads until the owner grace
//     ends, then goes.
//   - fillGens: every write, delete, touch, invalidation and flush of a key
//     moves the key's generation before it touches the store; a fill (from
//     the origin, a previous owner or a read-through) remembers the
//     generation it started at and keeps its result only if it is
//     unchanged, as memcached's leases do.
//   - uniques: CAS uniques of a cluster node are a clock with the node's
//     bits, so no two nodes, and no two incarnations of one, hand out the
//     same unique.

// keyLockStripes is the number of ownership lock stripes.
const keyLockStripes = 64

// keyLocks is the ownership lock, striped by key so that writes to
// different keys do not share a cache line.
type keyLocks struct {
	stripes [keyLockStripes]struct {
		sync.RWMutex
		_ [40]byte
	}
}

// rlock read-locks key's stripe and returns it, for the caller to RUnlock.
func (l *keyLocks) rlock(key string) *sync.RWMutex {
	m := &l.stripes[xxhash.Sum64String(key)%keyLockStripes].RWMutex
	m.RLock()
	return m
}

// lockAll waits for every write under way to finish and holds new ones
// back, until unlockAll.
func (l *keyLocks) lockAll() {
	for i := range l.stripes {
		l.stripes[i].Lock()
	}
}

func (l *keyLocks) unlockAll() {
	for i := range l.stripes {
		l.stripes[i].Unlock()
	}
}

// maxEpochs bounds the view history. An item older than the oldest view
// kept is no longer served (it would take a scan of the views to know
// whether its key moved meanwhile): after 64 membership changes, items
// written before them are misses.
const maxEpochs = 64

// epoch is one view in the history.
type epoch struct {
	seq  uint64     // owned store's sequence when the view was installed
	ring *ring.Ring // the view's ring; nil: this node owned nothing (leaving)
	at   time.Time  // when it was installed
}

// viewHistory is an immutable list of epochs, oldest first.
type viewHistory struct {
	epochs []epoch
}

// push returns h with e appended, dropping the oldest past maxEpochs.
func (h *viewHistory) push(e epoch) *viewHistory {
	var es []epoch
	if h != nil {
		es = h.epochs
	}
	if len(es) >= maxEpochs {
		es = es[len(es)-maxEpochs+1:]
	}
	return &viewHistory{epochs: append(es[:len(es):len(es)], e)}
}

// valid reports whether an item of key written at store sequence seq may
// still be seen by this node (self): owned in every view since it was
// written, or owned and then lost less than grace ago (for the new owner's
// warm reads only; serving clients also needs ownership now, which the
// caller checks). now is read only for an item of a lost key: valid runs
// on every read of the owned store, and most items were written in the
// current view.
func (h *viewHistory) valid(key string, seq uint64, self string, now func() time.Time, grace time.Duration) bool {
	es := h.epochs
	last := len(es) - 1
	if seq > es[last].seq {
		// Written in the current view, which only an owner can do.
		return true
	}
	j := last
	for j >= 0 && es[j].seq >= seq {
		j--
	}
	if j < 0 {
		return false // older than the history
	}
	var lostAt time.Time
	for i := j; i <= last; i++ {
		own := es[i].ring != nil && es[i].ring.Owner(key) == self
		switch {
		case own && !lostAt.IsZero():
			return false // lost and got back: writes went elsewhere meanwhile
		case !own && i == j:
			return false
		case !own && lostAt.IsZero():
			lostAt = es[i].at
		}
	}
	return lostAt.IsZero() || now().Before(lostAt.Add(grace))
}

// fillGens counts, per stripe of keys, the writes, deletes, touches,
// invalidations and flushes this node has seen, so that a fill that
// started before one of them does not keep (or hand to a later reader)
// what it fetched. Keys share a stripe: a write to one only makes a fill
// of another in the same stripe give up keeping its result, once.
//
// The copy drops of a change of ownership (dropCopies) are counted apart:
// they fence copy fills, not owned ones, which their view fences.
type fillGens struct {
	stripes [256]fillGen
}

type fillGen struct {
	mu     sync.Mutex
	writes uint64 // guarded by mu
	copies uint64 // guarded by mu; the copy drops
	_      [40]byte
}

// generation is a key's generation, read when a fill starts.
type generation struct {
	writes uint64 // the stripe's writes, invalidations and flushes
	copies uint64 // the copy drops
}

// before reports whether a fill that started at g started before
// something that a fill starting at o would have been fenced by: a reader
// that joins a fill started before a write, or a copy drop, it may have
// seen takes a miss.
func (g generation) before(o generation) bool {
	return g.writes < o.writes || g.copies < o.copies
}

func (g *fillGens) stripe(key string) *fillGen {
	return &g.stripes[xxhash.Sum64String(key)&255]
}

// current returns key's generation.
func (g *fillGens) current(key string) generation {
	st := g.stripe(key)
	st.mu.Lock()
	defer st.mu.Unlock()
	return generation{writes: st.writes, copies: st.copies}
}

// bump moves key's generation on: fills under way do not keep their result.
func (g *fillGens) bump(key string) {
	st := g.stripe(key)
	st.mu.Lock()
	st.writes++
	st.mu.Unlock()
}

// bumpAll moves every generation on, for a flush (flush_all, or this node
// declared dead): no fill under way keeps its result.
func (g *fillGens) bumpAll() {
	for i := range g.stripes {
		st := &g.stripes[i]
		st.mu.Lock()
		st.writes++
		st.mu.Unlock()
	}
}

// bumpCopies counts a drop of every copy: copy fills under way do not
// keep their result; owned fills do.
func (g *fillGens) bumpCopies() {
	for i := range g.stripes {
		st := &g.stripes[i]
		st.mu.Lock()
		st.copies++
		st.mu.Unlock()
	}
}

// keep runs store, for an owned fill, under key's stripe lock if no
// write, invalidation or flush of key came in since gen, and reports
// whether it ran.
func (g *fillGens) keep(key string, gen generation, store func()) bool {
	st := g.stripe(key)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.writes != gen.writes {
		return false
	}
	store()
	return true
}

// keepCopy is keep for a copy fill: a copy drop since gen fences it too.
func (g *fillGens) keepCopy(key string, gen generation, store func()) bool {
	st := g.stripe(key)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.writes != gen.writes || st.copies != gen.copies {
		return false
	}
	store()
	return true
}

// CAS uniques of a cluster node: the top 52 bits are a clock in
// microseconds since uniqueEpoch (enough for 142 years), which runs ahead
// of the wall clock when a node hands out more than one unique per
// microsecond; the low 12 bits are the node's, a hash of its name. Two
// nodes hand out equal uniques only if their names hash to the same 12
// bits (the node logs a warning when it sees such a member) and their
// clocks meet; a restarted node starts from the wall clock, past what its
// previous incarnation handed out unless that one ran ahead of it.
const (
	uniqueNodeBits = 12
	uniqueEpoch    = 1735689600 // 2025-01-01T00:00:00Z
)

type uniques struct {
	last atomic.Uint64 // clock part of the last unique
	node uint64
	now  func() time.Time
}

func newUniques(name string, now func() time.Time) *uniques {
	return &uniques{node: uniqueNode(name), now: now}
}

// uniqueNode is the node part of name's CAS uniques.
func uniqueNode(name string) uint64 {
	return xxhash.Sum64String(name) & (1<<uniqueNodeBits - 1)
}

func (u *uniques) next() uint64 {
	for {
		old := u.last.Load()
		t := max(old+1, uint64(u.now().UnixMicro()-uniqueEpoch*1e6))
		if u.last.CompareAndSwap(old, t) {
			return t<<uniqueNodeBits | u.node
		}
	}
}
