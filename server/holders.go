package server

import (
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// holders remembers which peers may hold a copy of which key, so that a
// write can invalidate them, and the write rounds under way at this owner.
//
// It is sharded by key, and every operation is O(1) amortised: entries
// expire in the order they were made (every copy lives CopyTTL at most),
// so each shard keeps them in a FIFO and drops expired ones from its head
// as it adds. Its memory is bounded by a byte budget; when full it
// forgets the oldest entries, whose copies then live out their TTL
// instead of being invalidated (counted as lost invalidations).
type holders struct {
	shards [holderShards]holderShard
	seed   maphash.Seed
	ttl    time.Duration
	// maxBytes is each shard's share of the budget.
	maxBytes int
	// open counts the write rounds open in every shard, read without a
	// lock.
	open atomic.Int64
}

const holderShards = 64

// holderEntryCost is what one key's entry costs beyond its key and its
// holders: the entry (96 bytes), its map slot and its FIFO record.
const holderEntryCost = 160

// holderCost is what one holder of a key costs (unsafe.Sizeof(holder{})).
const holderCost = 48

type holderShard struct {
	mu    sync.Mutex
	keys  map[string]*holderEntry
	fifo  []*holderEntry // oldest first, from head
	head  int
	bytes int
	// dead counts the FIFO's records of dropped entries: they wait to
	// reach the head, and compact removes them before they outnumber the
	// live ones, so the FIFO stays within a small multiple of the budget.
	dead int
	// rounds holds, per key, the latest write under way at this owner,
	// closed when the write and its invalidations are over and every
	// earlier round of the key is too. While one is open, reads of the
	// key here wait for it (await): a reader here must not see the new
	// value while a holder may still serve the old one, or two reads in a
	// row could see new, then old. It is keyed by the key's hash: keys
	// that share one share their rounds, which only has a read wait for
	// the other key's write, and no key is kept (a write's key is the
	// client's buffer, see transient).
	rounds map[uint64]*round
	// spare keeps ended rounds for reuse, so that a write allocates none.
	spare []*round
	_     [64]byte // keep shards' locks on cache lines of their own
}

type holderEntry struct {
	key   string
	nodes []holder
	at    time.Time // the latest registration: the entry lives until at+ttl
	// queued is at when the entry's FIFO record was queued: an entry
	// registered again since goes back to the tail when it comes up.
	queued time.Time
	gone   bool // taken by a write, or forgotten: its FIFO record is dead
}

type holder struct {
	node uint64 // idHash of the node
	at   time.Time
	// reading counts the node's reads of the key under way; kept says one
	// found the key, so the node may keep a copy. A holder whose reads
	// all missed is dropped (done).
	reading int
	kept    bool
}

// newHolders returns a registry whose entries live ttl, in about
// maxBytes of memory.
func newHolders(ttl time.Duration, maxBytes int64) *holders {
	h := &holders{seed: maphash.MakeSeed(), ttl: ttl, maxBytes: max(int(maxBytes/holderShards), 4096)}
	for i := range h.shards {
		h.shards[i].keys = make(map[string]*holderEntry)
		h.shards[i].rounds = make(map[uint64]*round)
	}
	return h
}

func (h *holders) shard(key string) *holderShard {
	return h.shardOf(h.hash(key))
}

func (h *holders) hash(key string) uint64 { return maphash.String(h.seed, key) }

// shardOf is the shard of a key whose hash is kh.
func (h *holders) shardOf(kh uint64) *holderShard { return &h.shards[kh%holderShards] }

// add registers node as a holder of a copy of key from now on, before
// the node's read of key; done follows the read. forgot is how many
// holders of other keys it forgot to stay within the budget: their copies
// live out their TTL instead of being invalidated.
func (h *holders) add(key string, node uint64, now time.Time) (forgot int) {
	sh := h.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	forgot = sh.expireLocked(now, h.ttl, 0)
	e := sh.keys[key]
	if e == nil {
		e = &holderEntry{key: key, queued: now}
		sh.keys[key] = e
		sh.fifo = append(sh.fifo, e)
		sh.bytes += holderEntryCost + len(key)
	}
	e.at = now
	if i := slices.IndexFunc(e.nodes, func(x holder) bool { return x.node == node }); i >= 0 {
		e.nodes[i].at = now
		e.nodes[i].reading++
		return forgot
	}
	e.nodes = append(e.nodes, holder{node: node, at: now, reading: 1})
	sh.bytes += holderCost
	if sh.bytes > h.maxBytes {
		forgot += sh.expireLocked(now, h.ttl, sh.bytes-h.maxBytes)
	}
	return forgot
}

// done follows a read that add registered: kept says the node got the key
// and may keep a copy. A holder none of whose reads got the key is
// dropped: only a copy that exists needs invalidating. (A write may have
// taken the entry meanwhile; then there is nothing to do.)
func (h *holders) done(key string, node uint64, kept bool) {
	sh := h.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.keys[key]
	if e == nil {
		return
	}
	i := slices.IndexFunc(e.nodes, func(x holder) bool { return x.node == node })
	if i < 0 {
		return
	}
	x := &e.nodes[i]
	x.reading = max(x.reading-1, 0)
	x.kept = x.kept || kept
	if x.reading > 0 || x.kept {
		return
	}
	e.nodes = slices.Delete(e.nodes, i, i+1)
	sh.bytes -= holderCost
	if len(e.nodes) == 0 {
		sh.dropLocked(e)
	}
}

// take returns the nodes that may hold a live copy of key, for a write
// to invalidate, and forgets them; but a node whose read of the key is
// under way stays registered, as if it had just asked: that read may
// return the value this write stored, and the node keep it, and the next
// write must find it.
func (h *holders) take(key string, now time.Time) []uint64 {
	sh := h.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.keys[key]
	if e == nil {
		return nil
	}
	var out []uint64
	reading := e.nodes[:0]
	for _, x := range e.nodes {
		if now.Sub(x.at) <= h.ttl {
			out = append(out, x.node)
		}
		if x.reading > 0 {
			reading = append(reading, holder{node: x.node, at: now, reading: x.reading})
		}
	}
	if len(reading) == 0 {
		sh.dropLocked(e)
		return out
	}
	sh.bytes -= holderCost * (len(e.nodes) - len(reading))
	clear(e.nodes[len(reading):])
	e.nodes, e.at = reading, now
	return out
}

// dropLocked removes e; its FIFO record is skipped when it comes up.
func (sh *holderShard) dropLocked(e *holderEntry) {
	sh.removeLocked(e)
	sh.dead++
	if sh.dead > len(sh.keys)+64 {
		sh.compactLocked()
	}
}

// removeLocked removes e from the map and the budget. Its FIFO record is
// the caller's to account for: dropLocked leaves it to be skipped (dead),
// expireLocked consumes it at the head. Counting a record consumed at the
// head as dead once made expireLocked compact the FIFO under its own feet
// (after a partition healed, when a shard's registrations all expired
// together): it then cleared a live entry's record, which never expired,
// or indexed an empty FIFO and panicked.
func (sh *holderShard) removeLocked(e *holderEntry) {
	delete(sh.keys, e.key)
	e.gone = true
	sh.bytes -= holderEntryCost + len(e.key) + holderCost*len(e.nodes)
	e.nodes = nil
}

// compactLocked drops the dead records from the FIFO.
func (sh *holderShard) compactLocked() {
	live := sh.fifo[:0]
	for _, e := range sh.fifo[sh.head:] {
		if !e.gone {
			live = append(live, e)
		}
	}
	clear(sh.fifo[len(live):])
	sh.fifo, sh.head, sh.dead = live, 0, 0
	if cap(sh.fifo) > 4*len(sh.fifo)+64 {
		sh.fifo = slices.Clip(slices.Clone(sh.fifo)) // give a burst's array back
	}
}

// expireLocked drops entries from the FIFO's head: dead records, expired
// entries, and, while free is positive, live entries too (the oldest),
// until free bytes are freed. It returns how many holders it forgot that
// way. An entry registered again since its record was queued goes back to
// the tail with its new time, so each entry has one record.
func (sh *holderShard) expireLocked(now time.Time, ttl time.Duration, free int) (forgot int) {
	for sh.head < len(sh.fifo) {
		e := sh.fifo[sh.head]
		switch {
		case e.gone:
			sh.dead--
		case e.at.After(e.queued):
			e.queued = e.at
			sh.fifo = append(sh.fifo, e)
		case now.Sub(e.at) > ttl:
			sh.removeLocked(e)
		case free > 0:
			before := sh.bytes
			forgot += len(e.nodes)
			sh.removeLocked(e)
			free -= before - sh.bytes
		default:
			return forgot
		}
		sh.fifo[sh.head] = nil
		sh.head++
		if sh.head > len(sh.fifo)/2 && sh.head > 32 {
			n := copy(sh.fifo, sh.fifo[sh.head:])
			clear(sh.fifo[n:])
			sh.fifo, sh.head = sh.fifo[:n], 0
		}
	}
	return forgot
}

// begin opens a write round of key: until end is called, reads of key
// here wait (await). prev is the round before it, still open, or nil; end
// must not be called before prev is closed (or given up on).
func (h *holders) begin(key string) (prev <-chan struct{}, r writeRound) {
	kh := h.hash(key)
	sh := h.shardOf(kh)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if old, ok := sh.rounds[kh]; ok {
		prev = old.wait()
	} else {
		h.open.Add(1)
	}
	var rd *round
	if n := len(sh.spare); n > 0 {
		rd = sh.spare[n-1]
		sh.spare = sh.spare[:n-1]
	} else {
		rd = new(round)
	}
	sh.rounds[kh] = rd
	return prev, writeRound{h: h, kh: kh, r: rd}
}

// round is an open write round. Its channel is made only when something
// waits for it (a read of the key, or the key's next write), which is
// rare: most rounds open and end unwatched and are then reused, so a write
// allocates nothing. The shard's mutex guards it.
//
// A round is reused only after end, when it is out of the map: whoever
// waits holds its channel, never the round, so a reused round cannot wake
// or hold up the waiters of the round it was before.
type round struct {
	done chan struct{} // closed by end; nil until waited on
}

// wait returns the channel end closes, making it if need be. The shard's
// mutex must be held.
func (rd *round) wait() <-chan struct{} {
	if rd.done == nil {
		rd.done = make(chan struct{})
	}
	return rd.done
}

// spareRounds is how many ended rounds a shard keeps for reuse: more than
// the writes a shard has under way at once on a busy node.
const spareRounds = 64

// writeRound is a write round begin opened; the zero value is none.
type writeRound struct {
	h  *holders
	kh uint64
	r  *round
}

// open reports whether r is a round, not yet ended.
func (r writeRound) open() bool { return r.r != nil }

// end closes the round: reads of its key wait no more, unless a later
// write of the key opened a round of its own.
func (r writeRound) end() {
	sh := r.h.shardOf(r.kh)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.rounds[r.kh] == r.r {
		delete(sh.rounds, r.kh)
		r.h.open.Add(-1)
	}
	if r.r.done != nil {
		close(r.r.done)
		r.r.done = nil
	}
	if len(sh.spare) < spareRounds {
		sh.spare = append(sh.spare, r.r)
	}
}

// round reports whether a write round of key is open and, if watch is
// set, returns a channel closed when it ends. It costs one atomic load
// while no round is open anywhere.
func (h *holders) round(key string, watch bool) (open bool, done <-chan struct{}) {
	if h.open.Load() == 0 {
		return false, nil
	}
	kh := h.hash(key)
	sh := h.shardOf(kh)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	rd, ok := sh.rounds[kh]
	if ok && watch {
		done = rd.wait()
	}
	return ok, done
}

// roundOpen reports whether a write round of key is open, without waiting
// for it.
func (h *holders) roundOpen(key string) bool {
	open, _ := h.round(key, false)
	return open
}

// await waits until no write round of key is open, or timeout passed. It
// costs one atomic load while no round is open anywhere.
func (h *holders) await(key string, timeout time.Duration) {
	open, ch := h.round(key, true)
	if !open {
		return
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

// stats returns the keys registered and the bytes they are charged.
func (h *holders) stats() (keys, bytes int) {
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.Lock()
		keys += len(sh.keys)
		bytes += sh.bytes
		sh.mu.Unlock()
	}
	return keys, bytes
}
