package store

import "time"

// The sweeper reclaims memory that eviction would otherwise only get back
// when the segment's turn comes: it drops expired and flushed items (as
// memcached's LRU crawler does), frees segments left empty, and compacts
// segments more than a quarter dead, copying their live items into their
// queue's head. (Compacting only past half dead left 30 % of the segments
// dead on a trace of mixed lifetimes, BenchmarkMixedTTL; past a quarter,
// 8 %, for 1.2 points of hit ratio, at most three bytes copied per byte
// freed. Grouping segments by expiry, as Segcache does, could give at most
// another 0.5 there.) It runs every sweepEvery, and at once after a flush_all,
// taking each shard's lock for sweepBatch segments at a time so that
// requests wait behind it for no longer than a few segments' worth.
//
// Which segments need a look is known without reading them: a segment
// remembers the earliest expiry and the lowest store sequence of the items
// written to it (segment.minExp, minSeq).
//
// It also drains an index left half moved by its growth (shard.drain) by
// sweepDrain slots at a time, for a shard that sees reads but no writes.
const (
	sweepEvery = time.Second
	sweepBatch = 8
	sweepDrain = 4096
)

func (g *segEngine) sweeper() {
	defer close(g.done)
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		case <-g.kick:
		}
		g.sweep()
	}
}

// sweep makes one pass over every shard.
func (g *segEngine) sweep() {
	for i := range g.shards {
		sh := &g.shards[i]
		for from := uint32(1); from != 0; {
			sh.lockWrite()
			if sh.closed {
				sh.unlockWrite()
				return
			}
			sh.drain(sweepDrain)
			from = sh.sweep(from, g.s.clock(), sweepBatch)
			sh.unlockWrite()
		}
	}
}

// sweep looks at the shard's segments from number from on, working on at
// most n of them, and returns the number to go on from, 0 at the end.
func (sh *shard) sweep(from uint32, now int64, n int) uint32 {
	mark := sh.g.s.flush.watermark.Load()
	for id := from; int(id) < sh.segs.len(); id++ {
		seg := sh.segs.get(id)
		if seg == nil || seg.q == noQueue {
			continue
		}
		worked := false
		if seg.nlive > 0 && (seg.minExp != 0 && seg.minExp <= now || seg.minSeq <= mark) {
			sh.reclaim(seg, now)
			worked = true
		}
		switch {
		case sh.segs.get(id) != seg:
			// A large item's, freed by reclaim.
		case seg.nlive == 0 && seg.used > 0:
			sh.dropSegment(seg) // a head too: the next write takes a fresh one
			worked = true
		case seg == sh.q[seg.q].head:
			// Still being filled.
		case !seg.large && seg.live*4 < seg.used*3:
			sh.compact(seg)
			worked = true
		}
		if worked {
			if n--; n == 0 {
				return id + 1
			}
		}
	}
	return 0
}

// reclaim drops seg's expired and flushed items and recomputes its hints.
func (sh *shard) reclaim(seg *segment, now int64) {
	seg.minExp, seg.minSeq = 0, 0
	live := 0
	for off := 0; off < seg.used; {
		it := decode(seg.mem, off)
		off = it.end()
		if it.dead() {
			continue
		}
		if expired, flushed := sh.g.s.stale(it.seq, it.exp, now); expired || flushed {
			pos := sh.at(sh.g.hashOf(it.keyOf(seg.mem)), location(seg, it.off))
			sh.unlink(pos, seg, &it) // frees a large item's segment
			sh.g.s.reclaimed(expired, it.fetched())
			continue
		}
		if it.exp != 0 && (seg.minExp == 0 || it.exp < seg.minExp) {
			seg.minExp = it.exp
		}
		if live == 0 || it.seq < seg.minSeq {
			seg.minSeq = it.seq
		}
		live++
	}
}

// compact copies seg's live items into its queue's head, and frees it if
// they all found room without evicting.
func (sh *shard) compact(seg *segment) {
	for off := 0; off < seg.used; {
		it := decode(seg.mem, off)
		off = it.end()
		if it.dead() {
			continue
		}
		pos := sh.at(sh.g.hashOf(it.keyOf(seg.mem)), location(seg, it.off))
		if !sh.copyForward(pos, seg, &it, int(seg.q), it.freq(), false) {
			return
		}
	}
	sh.dropSegment(seg)
}
