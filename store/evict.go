package store

import "unsafe"

// Eviction takes whole segments, oldest first, and for each item in the
// victim asks the policy whether it stays (copied forward into a queue's
// head) or goes. Three policies, compared on the same traces
// (policy_test.go, README "Memory"):
//
//   - FIFO: every item of the victim goes. The baseline.
//   - CLOCK: one queue; an item read since it was written or last copied
//     is copied forward, once (FIFO with reinsertion: CLOCK, the usual
//     approximation of LRU).
//   - S3-FIFO (Yang et al., SOSP'23) over segments. New items go
//     to a small queue (a tenth of the memory); an item leaving it that was
//     read moves to the main queue, one that was not goes, leaving its
//     hash in a ghost table; a new key found in the ghost goes straight to
//     main. Main is CLOCK with a 2-bit count: an item read since its last
//     pass is copied forward with one count less.
//
// Copies forward need room while the victim is being emptied; an empty
// spare segment per shard provides it, and the emptied victim becomes the
// next spare. If neither the budget nor the spare has room, the item goes.
type policy uint8

const (
	evictS3FIFO policy = iota
	evictCLOCK
	evictFIFO
)

func (p policy) String() string {
	return [...]string{"s3fifo", "clock", "fifo"}[p]
}

const (
	qSmall = iota
	qMain
	numQueues
	noQueue = 0xff // segment.q of a segment in no queue
)

// queue is a FIFO of segments, linked through their prev and next.
type queue struct {
	first, last uint32 // oldest, newest
	head        *segment
	bytes       int64 // mapped bytes of its segments
}

// smallShare is S3-FIFO's small queue: a tenth of the shard's memory.
const smallShare = 10

// evictRounds bounds the segments one write may evict; after forceRound
// of them, victims are emptied without copies forward (every item of the
// shard may have been read since its last pass).
const (
	evictRounds = 16
	forceRound  = 8
)

// queueFor is the queue an item goes to: its old version's, or for a new
// key the policy's entry queue.
func (sh *shard) queueFor(found bool, old *segment, h uint64) int {
	switch {
	case found:
		return int(old.q)
	case sh.g.policy == evictS3FIFO && !sh.ghost.take(h):
		return qSmall
	}
	return qMain
}

// push appends seg at the newest end of queue q; as head, new items of q
// go to it.
func (sh *shard) push(q int, seg *segment, head bool) {
	qq := &sh.q[q]
	seg.q = uint8(q)
	seg.prev, seg.next = qq.last, 0
	if qq.last != 0 {
		sh.segs.get(qq.last).next = seg.id
	} else {
		qq.first = seg.id
	}
	qq.last = seg.id
	qq.bytes += int64(len(seg.mem))
	if head {
		qq.head = seg
	}
}

// detach takes seg out of its queue.
func (sh *shard) detach(seg *segment) {
	qq := &sh.q[seg.q]
	if seg.prev != 0 {
		sh.segs.get(seg.prev).next = seg.next
	} else {
		qq.first = seg.next
	}
	if seg.next != 0 {
		sh.segs.get(seg.next).prev = seg.prev
	} else {
		qq.last = seg.prev
	}
	seg.prev, seg.next, seg.q = 0, 0, noQueue
	qq.bytes -= int64(len(seg.mem))
	if qq.head == seg {
		qq.head = nil
	}
}

// room reserves size bytes for an item in queue q, evicting if need be,
// and returns where. A reservation is used at once: nothing else may move
// items in between.
func (sh *shard) room(q, size int, now int64) (*segment, int, bool) {
	if size > sh.g.large {
		return sh.largeRoom(q, size, now)
	}
	for range evictRounds {
		if hd := sh.q[q].head; hd != nil && hd.free() >= size {
			off := hd.used
			hd.used += size
			return hd, off, true
		}
		seg := sh.fresh(now)
		if seg == nil {
			return nil, 0, false
		}
		if hd := sh.q[q].head; hd != nil && hd.free() >= size {
			sh.keep(seg) // the eviction made room in the head meanwhile
			continue
		}
		sh.push(q, seg, true)
	}
	return nil, 0, false
}

// fresh returns an empty shared segment, not in any queue, from the
// budget or by eviction; nil if there is nothing left to evict.
func (sh *shard) fresh(now int64) *segment {
	seg := int64(sh.g.segSize)
	for round := range evictRounds {
		if sh.spent+seg <= sh.max {
			if sh.spare != nil || sh.spent+2*seg <= sh.max {
				return sh.newSegment()
			}
			// The last segment the budget allows: the spare, for the
			// copies of the evictions to come.
			if sh.spare = sh.newSegment(); sh.spare == nil {
				return nil
			}
		}
		v, ok := sh.evict(now, round >= forceRound)
		if !ok {
			break
		}
		if v == nil {
			continue // a large item's mapping was freed: budget
		}
		if sh.spare == nil {
			sh.spare = v // the copies used the spare: v replaces it
			continue
		}
		return v
	}
	if v := sh.spare; v != nil {
		sh.spare = nil
		return v
	}
	return nil
}

// keep puts an empty segment aside as the spare, or frees it.
func (sh *shard) keep(seg *segment) {
	if sh.spare == nil {
		sh.spare = seg
		return
	}
	sh.dropSegment(seg)
}

// shed evicts until it frees memory (a segment or a large item's
// mapping), for the index or a large item to grow into; force drops every
// item of the victim.
func (sh *shard) shed(now int64, force bool) bool {
	if v := sh.spare; v != nil {
		sh.spare = nil
		sh.dropSegment(v)
		return true
	}
	v, ok := sh.evict(now, force)
	if v != nil {
		sh.dropSegment(v)
	}
	return ok
}

// shedFor sheds until need more bytes fit in the shard's memory; false if
// they cannot.
func (sh *shard) shedFor(need, now int64) bool {
	for round := 0; sh.spent+need > sh.max; round++ {
		if round == evictRounds || !sh.shed(now, round >= forceRound) {
			return false
		}
	}
	return true
}

// forward makes room for a copy of size bytes in queue q's head without
// evicting: from the budget, or the spare if spare is set (an eviction's
// copies may take it; a compaction's may not).
func (sh *shard) forward(q, size int, spare bool) (*segment, int, bool) {
	hd := sh.q[q].head
	if hd == nil || hd.free() < size {
		var seg *segment
		switch {
		case sh.spent+int64(sh.g.segSize) <= sh.max:
			seg = sh.newSegment()
		case spare && sh.spare != nil:
			seg, sh.spare = sh.spare, nil
		}
		if seg == nil {
			return nil, 0, false
		}
		sh.push(q, seg, true)
		hd = seg
	}
	off := hd.used
	hd.used += size
	return hd, off, true
}

// victim is the segment to evict next: the oldest of the queue the policy
// picks, heads last.
func (sh *shard) victim() *segment {
	first := qMain
	if sh.g.policy == evictS3FIFO && sh.q[qSmall].bytes*smallShare > sh.max {
		first = qSmall
	}
	for _, q := range [...]int{first, 1 - first} {
		for id := sh.q[q].first; id != 0; id = sh.segs.get(id).next {
			if seg := sh.segs.get(id); seg != sh.q[q].head {
				return seg
			}
		}
	}
	for _, q := range [...]int{first, 1 - first} {
		if hd := sh.q[q].head; hd != nil {
			return hd
		}
	}
	return nil
}

// evict empties the policy's victim: each live item is dropped or copied
// forward. It returns the emptied segment, out of any queue, or nil if it
// was a large item's (freed, or moved on whole); ok is false if there was
// nothing to evict. force drops every item.
func (sh *shard) evict(now int64, force bool) (*segment, bool) {
	v := sh.victim()
	if v == nil {
		return nil, false
	}
	from := int(v.q)
	sh.detach(v)
	for off := 0; off < v.used; {
		it := decode(v.mem, off)
		off = it.end()
		if it.dead() {
			continue
		}
		h := sh.g.hashOf(it.keyOf(v.mem))
		pos := sh.at(h, location(v, it.off))
		if expired, flushed := sh.g.s.stale(it.seq, it.exp, now); expired || flushed {
			sh.unlink(pos, v, &it)
			sh.g.s.reclaimed(expired, it.fetched())
			continue
		}
		if q, freq, keep := sh.g.policy.keep(from, it.freq()); keep && !force {
			if v.large {
				v.mem[0] = v.mem[0]&^hdrFreq | freq
				sh.push(q, v, false) // moved on whole
				return nil, true
			}
			if sh.copyForward(pos, v, &it, q, freq, true) {
				continue
			}
		}
		sh.evictions++
		if !it.fetched() {
			sh.evictedUnfetched++
		}
		if from == qSmall && sh.g.policy == evictS3FIFO {
			sh.ghost.add(h)
		}
		sh.unlink(pos, v, &it)
	}
	if v.large {
		return nil, true // unlink freed it
	}
	v.reset()
	return v, true
}

// keep is the policy's verdict on a live item of an evicted segment of
// queue from, read freq times since its last pass: whether it stays, in
// which queue, with what count.
func (p policy) keep(from int, freq byte) (q int, next byte, ok bool) {
	switch {
	case p == evictFIFO || freq == 0:
		return 0, 0, false
	case p == evictCLOCK, from == qSmall:
		return qMain, 0, true
	}
	return qMain, freq - 1, true
}

// copyForward copies the item it of seg, indexed at pos, to queue q's head
// with access count freq; false if there is no room without evicting (see
// forward for spare).
func (sh *shard) copyForward(pos int, seg *segment, it *view, q int, freq byte, spare bool) bool {
	dst, off, ok := sh.forward(q, it.size, spare)
	if !ok {
		return false
	}
	copy(dst.mem[off:off+it.size], seg.mem[it.off:it.end()])
	dst.mem[off] = dst.mem[off]&^hdrFreq | freq
	r := rec{exp: it.exp, seq: it.seq}
	dst.noted(&r)
	dst.live += it.size
	dst.nlive++
	seg.mem[it.off] |= hdrDead
	seg.live -= it.size
	seg.nlive--
	sh.idx.set(pos, location(dst, off))
	return true
}

// largeRoom maps a segment of its own for an item of size bytes, at the
// newest end of queue q, evicting to pay for it.
func (sh *shard) largeRoom(q, size int, now int64) (*segment, int, bool) {
	n := (size + pageSize - 1) &^ (pageSize - 1)
	if !sh.shedFor(int64(n), now) {
		return nil, 0, false
	}
	mem, err := mapMem(n)
	if err != nil {
		return nil, 0, false
	}
	seg := sh.addSegment(mem, true)
	if seg == nil {
		unmapMem(mem)
		return nil, 0, false
	}
	sh.push(q, seg, false)
	seg.used = size
	return seg, 0, true
}

// newSegment takes a shared segment from the pool and counts it.
func (sh *shard) newSegment() *segment {
	mem, err := sh.g.pool.get()
	if err != nil {
		return nil
	}
	seg := sh.addSegment(mem, false)
	if seg == nil {
		sh.g.pool.put(mem)
	}
	return seg
}

// addSegment numbers a new segment and counts its memory; nil if the
// shard has run out of numbers.
func (sh *shard) addSegment(mem []byte, large bool) *segment {
	var id uint32
	if n := len(sh.freeIDs); n > 0 {
		id = sh.freeIDs[n-1]
		sh.freeIDs = sh.freeIDs[:n-1]
	} else {
		if sh.segs.len() > maxSegs {
			return nil
		}
		id = sh.segs.add()
	}
	seg := &segment{mem: mem, id: id, large: large, q: noQueue}
	sh.segs.set(id, seg)
	sh.spent += int64(len(mem))
	return seg
}

// dropSegment gives seg's memory back (to the pool, or the kernel for a
// large item's) and forgets it. It must hold no live item.
func (sh *shard) dropSegment(seg *segment) {
	if sh.segs.get(seg.id) != seg {
		panic("store: segment dropped twice")
	}
	if seg.q != noQueue {
		sh.detach(seg)
	}
	sh.spent -= int64(len(seg.mem))
	sh.segs.set(seg.id, nil)
	sh.freeIDs = append(sh.freeIDs, seg.id)
	if seg.large {
		unmapMem(seg.mem)
	} else {
		sh.g.pool.put(seg.mem)
	}
}

// ghost remembers the hashes of keys S3-FIFO evicted from its small queue
// without their being read: one 16-bit tag per slot, direct-mapped, so a
// new entry overwrites whatever hashed to its slot, and an entry lives
// for about as many evictions as there are slots (as many as the index
// has entries, at half its size).
type ghost struct{ tags []uint16 }

// ghostBytes is the ghost table that goes with an index of n slots: a tag
// for every other slot.
func ghostBytes(n int) int { return n &^ 1 }

func newGhost(mem []byte) ghost {
	return ghost{tags: unsafe.Slice((*uint16)(unsafe.Pointer(&mem[0])), len(mem)/2)}
}

// The slot and the tag use hash bits the shard (low bits) and the index
// position (high bits) leave alone.
func (g *ghost) slot(h uint64) *uint16 { return &g.tags[int(h>>32*uint64(len(g.tags))>>32)] }
func ghostTag(h uint64) uint16         { return uint16(h>>8) | 1 }

func (g *ghost) add(h uint64) { *g.slot(h) = ghostTag(h) }

// take reports whether h was evicted recently, and forgets it.
func (g *ghost) take(h uint64) bool {
	p := g.slot(h)
	if *p != ghostTag(h) {
		return false
	}
	*p = 0
	return true
}
