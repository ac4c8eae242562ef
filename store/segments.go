package store

import (
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// segEngine keeps items off the Go heap (the Segments engine), in the
// shape of Segcache (Yang et al., NSDI'21) and fastcache:
//
//   - Shards: a key's hash picks one; each has its own mutex, index,
//     segments and eviction queues, and a share of MaxBytes. Nothing is
//     shared between shards but the pool of mapped memory. Writers lock
//     their shard; reads take no lock (read.go): they copy the value out
//     and keep the copy only if the shard's version says no writer ran
//     meanwhile, so there is no global lock and no reference counting.
//     (Reads under the shard's mutex cost gets on both cores 61 % more
//     time than Ristretto's; a read-write lock, reads recording their
//     access by compare-and-swap, made gets 15 % faster and a 9:1 mix of
//     gets and sets 37 % slower, as writers waited.)
//   - Segments (segment.go): items appended to mapped memory, header, key
//     and value together. Items larger than an eighth of a segment get a
//     mapping of their own, in pages, so any item size is served and no
//     segment is mostly padding.
//   - Index (index.go): 8 bytes a slot, no pointers. It grows by a
//     quarter at a time, moving its entries into the new table a few per
//     write, so that no write stalls for a rehash of the shard.
//   - Eviction (evict.go): whole segments, oldest first, S3-FIFO over
//     segments: the items of an evicted segment that were read since they
//     came in are copied forward instead of dropped.
//   - Expiry: checked exactly on every access; a sweeper (sweep.go) drops
//     expired and flushed items in the background and compacts segments
//     that are mostly dead, so that they do not hold memory until evicted.
//
// Every byte it maps is counted against MaxBytes: segments held (the
// dead items in them included), large items' pages, each shard's index
// and ghost table. The Go heap holds only the segment descriptors (about
// 100 bytes per 256 KiB segment).
//
// Left out, or paid for:
//   - Segments are not grouped by TTL as Segcache's are: an expired item
//     among live ones holds its bytes until its segment is a quarter dead
//     (compacted) or evicted; its index slot goes at once. On a trace of
//     mixed lifetimes that leaves 8 % of the segments dead, and grouping
//     could win at most half a point of hit ratio (sweep.go).
//   - A read copies the value out (carved from per-P chunks, copyOut): a
//     process that does little else but read sees its collector run often,
//     though each cycle is short (no item is on the heap). That copy is
//     what parallel gets still pay over Ristretto's, which hands out its
//     own memory (BenchmarkGetParallel: 140 ns against 118; 107 against
//     120 with the collector off; 73-85 ns with no copy at all). Of the
//     rest, the shard's hit counter, a cache line both cores write, costs
//     about 12 ns; Ristretto's engine pays for one too.
//   - While the index grows, the shard pays for the old table and the new
//     one until the old one is drained (16 of its slots a write:
//     some 30,000 writes at half a million items; the sweeper drains 4,096
//     slots a pass too); the ghost table starts empty each time.
//   - Keys are at most 255 bytes (MaxSegmentKeyLen); the store sequence is
//     kept in 32 bits, which 4 billion flush_alls and view changes would
//     wrap.
type segEngine struct {
	s       *Store
	policy  policy
	shards  []shard
	mask    uint64 // hash bits that pick the shard
	segSize int
	large   int // items longer than this get a mapping of their own
	pool    pool

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

const (
	segBits    = 18 // offset bits in an index location
	maxSegSize = 1 << segBits
	minSegSize = 4 << 10
	segIDBits  = locBits - segBits
	maxSegs    = 1<<segIDBits - 1 // per shard
	pageSize   = 4 << 10
	// maxShards bounds the shard count; a shard gets at least
	// minShardBytes of MaxBytes, since each holds a few segments that are
	// not full (a spare, and its queues' heads).
	maxShards     = 64
	minShardBytes = 64 * maxSegSize
)

// shard is one slice of the key space. mu guards everything in it, the
// memory of its segments and index included; a writer holding it also
// makes ver odd while it changes anything a read looks at (lockWrite),
// since reads take no lock (read.go).
type shard struct {
	mu  sync.Mutex
	ver atomic.Uint64 // even when no writer is changing the shard; see read.go
	g   *segEngine

	idx     *index
	ridx    atomic.Pointer[index] // idx, for reads (read.go); nil once closed
	idxMem  []byte                // the index's mapping, the ghost table after the slots
	old     *index                // the index being drained into idx (newIndex); nil if none
	oldMem  []byte
	drained int // old's slots before this one are drained
	ghost   ghost
	segs    segTable // by number; segment 0 is none
	freeIDs []uint32
	q       [numQueues]queue
	spare   *segment // an empty segment kept for the copies of an eviction (evict.go)

	spent, max int64 // bytes mapped for the shard, and its share of MaxBytes

	items, bytes     int64
	evictions        uint64
	evictedUnfetched uint64
	rejections       uint64

	sweepAt uint32 // where the sweeper goes on
	closed  bool

	// Reads count themselves here, on a cache line of their own, away
	// from ver, which every read loads.
	_            [64]byte
	hits, misses atomic.Uint64
	_            [64]byte // keeps neighbouring shards' hot fields apart
}

// lockWrite takes the shard for a change that reads may see: ver is odd
// until unlockWrite.
func (sh *shard) lockWrite() {
	sh.mu.Lock()
	sh.ver.Add(1)
}

func (sh *shard) unlockWrite() {
	sh.ver.Add(1)
	sh.mu.Unlock()
}

// segTable numbers a shard's segments. Writers change it holding the
// shard's mutex; reads that take none load it too (read.go), so its
// entries and its length are atomics, and it grows by copying.
type segTable struct {
	p atomic.Pointer[[]atomic.Pointer[segment]]
}

func (t *segTable) len() int {
	if p := t.p.Load(); p != nil {
		return len(*p)
	}
	return 0
}

// get returns segment id; nil if there is none.
func (t *segTable) get(id uint32) *segment {
	if p := t.p.Load(); p != nil && int(id) < len(*p) {
		return (*p)[id].Load()
	}
	return nil
}

func (t *segTable) set(id uint32, seg *segment) { (*t.p.Load())[id].Store(seg) }

// add makes room for one more number and returns it.
func (t *segTable) add() uint32 {
	var s []atomic.Pointer[segment]
	if p := t.p.Load(); p != nil {
		s = *p
	}
	n := len(s)
	if n == cap(s) {
		c := make([]atomic.Pointer[segment], n, 2*n+8)
		for i := range s {
			c[i].Store(s[i].Load())
		}
		s = c
	}
	s = s[:n+1]
	t.p.Store(&s)
	return uint32(n)
}

func newSegments(s *Store, p policy) (*segEngine, error) {
	n := 1
	for n*2 <= min(maxShards, 4*runtime.GOMAXPROCS(0)) && s.maxBytes/int64(n*2) >= minShardBytes {
		n *= 2
	}
	share := s.maxBytes / int64(n)
	seg := maxSegSize
	for seg > minSegSize && int64(seg)*16 > share {
		seg /= 2
	}
	g := &segEngine{
		s:       s,
		policy:  p,
		shards:  make([]shard, n),
		mask:    uint64(n - 1),
		segSize: seg,
		large:   seg / 8,
		pool:    pool{size: seg},
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	for i := range g.shards {
		sh := &g.shards[i]
		sh.g, sh.max = g, share
		sh.segs.add() // segment 0 is none
		if err := sh.newIndex(minIndex); err != nil {
			g.release()
			return nil, err
		}
	}
	go g.sweeper()
	return g, nil
}

func (g *segEngine) shard(h uint64) *shard { return &g.shards[h&g.mask] }

func (g *segEngine) close() {
	select {
	case <-g.stop:
		return
	default:
	}
	close(g.stop)
	<-g.done
	g.release()
}

// release unmaps every shard's memory; reads and writes find the shards
// closed.
func (g *segEngine) release() {
	for i := range g.shards {
		sh := &g.shards[i]
		sh.lockWrite()
		sh.closed = true
		sh.ridx.Store(nil)
		for id := range sh.segs.len() {
			if seg := sh.segs.get(uint32(id)); seg != nil && seg.large {
				unmapMem(seg.mem)
			}
		}
		for _, mem := range [][]byte{sh.idxMem, sh.oldMem} {
			if mem != nil {
				unmapMem(mem)
			}
		}
		sh.segs.p.Store(nil)
		sh.spare, sh.idx, sh.idxMem, sh.old, sh.oldMem, sh.ghost = nil, nil, nil, nil, nil, ghost{}
		sh.q = [numQueues]queue{}
		sh.unlockWrite()
	}
	g.pool.close()
}

// hashOf is Store.hash of a key held in a segment.
func (g *segEngine) hashOf(key []byte) uint64 { return maphash.Bytes(g.s.seed, key) }

// find returns the position in the current index, segment and header of
// key's item (moving its entry out of an old index being drained).
func (sh *shard) find(key string, h uint64) (int, *segment, view, bool) {
	eq := func(loc uint64) bool {
		k, _ := keyAt(sh.segs.get(uint32(loc>>segBits)).mem, int(loc&(maxSegSize-1)))
		return string(k) == key
	}
	pos, ok := sh.idx.find(h, eq)
	if !ok && sh.old != nil {
		if pos, ok = sh.old.find(h, eq); ok {
			pos = sh.old.take(pos, h, sh.idx)
		}
	}
	if !ok {
		return 0, nil, view{}, false
	}
	loc := sh.idx.loc(pos)
	seg := sh.segs.get(uint32(loc >> segBits))
	return pos, seg, decode(seg.mem, int(loc&(maxSegSize-1))), true
}

func location(seg *segment, off int) uint64 { return uint64(seg.id)<<segBits | uint64(off) }

// getLocked is get under the shard's lock: for reads that cannot be done
// without it (read.go), and those that reclaim what they find expired.
func (g *segEngine) getLocked(sh *shard, key string, h uint64, fetch bool, dst []byte) (Item, bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed {
		return Item{}, false
	}
	// While an index is being drained, find moves the key's entry out of
	// the old table (a tomb there, then an insert into the new one, which
	// may carry other keys' entries along): a change lock-free reads must
	// see, or one that probed the new table before the insert and the old
	// one after the tomb finds the key in neither, sees the version
	// unmoved, and reports a live item missing
	// (TestLockedReadMovesEntryUnderVersion). So the version is odd for
	// the whole lookup then. (Deferred after the Unlock: runs before it.)
	odd := sh.old != nil
	if odd {
		sh.ver.Add(1)
		defer sh.ver.Add(1)
	}
	pos, seg, v, ok := sh.find(key, h)
	if ok {
		visible, expired := g.s.visible(key, v.seq, v.exp)
		if visible {
			r := v.rec(seg.mem)
			it := r.item(key)
			it.Value = copyOut(r.value, dst)
			if fetch {
				sh.hits.Add(1)
				seg.mem[v.off] = accessed(v.meta)
			}
			return it, true
		}
		if !odd {
			sh.ver.Add(1)
		}
		sh.unlink(pos, seg, &v)
		if !odd {
			sh.ver.Add(1)
		}
		g.s.reclaimed(expired, v.fetched())
	}
	if fetch {
		sh.misses.Add(1)
	}
	return Item{}, false
}

// accessed is an item's meta byte after a read: fetched, and one more
// access counted (up to hdrFreq).
func accessed(meta byte) byte {
	m := meta | hdrFetched
	if m&hdrFreq < hdrFreq {
		m++
	}
	return m
}

// clone copies b out of a segment, which may be reused once the shard's
// lock is released.
func clone(b []byte) []byte {
	c := make([]byte, len(b))
	copy(c, b)
	return c
}

func (g *segEngine) write(key string, h uint64, op writeOp) outcome {
	sh := g.shard(h)
	sh.lockWrite()
	defer sh.unlockWrite()
	if sh.closed {
		return outcome{}
	}
	s := g.s
	now := s.begin(&op)
	sh.drain(drainStep)
	pos, seg, v, found := sh.find(key, h)
	var cr rec
	var curp *rec
	var stale, expired bool
	if found && op.lookup() {
		var flushed bool
		if expired, flushed = s.invalid(key, v.seq, v.exp, now); expired || flushed {
			stale = true
		} else {
			cr = v.rec(seg.mem)
			curp = &cr
		}
	}
	o := s.apply(&op, key, curp)
	if o.remove {
		sh.unlink(pos, seg, &v)
		return o
	}
	if !o.store {
		if stale {
			sh.unlink(pos, seg, &v)
			s.reclaimed(expired, v.fetched())
		}
		if op.returnsItem() && curp != nil {
			o.item = cr.item(key)
			o.item.Value = clone(cr.value)
		}
		return o
	}
	n := &o.next
	if op.returnsItem() {
		// Before the store, which may move or drop the bytes n.value
		// aliases.
		o.item = n.item(key)
		o.item.Value = clone(n.value)
	}
	if n.exp != 0 && n.exp <= now {
		// memcached answers STORED, and the item is gone.
		if found {
			sh.unlink(pos, seg, &v)
		}
		return o
	}
	if len(key) > MaxSegmentKeyLen {
		sh.refuse(found, pos, seg, &v)
		return o
	}
	size := itemSize(len(key), len(n.value), n.flags, n.exp)
	var freq byte
	if found {
		freq = v.freq()
		if size == v.size && v.key-v.off == hdrSize(len(n.value), n.flags, n.exp) {
			// Same lengths: rewrite it where it is. The value lands where
			// the old one was, and copy is a memmove, so a value that
			// aliases the old one is fine.
			encode(seg.mem[v.off:v.end()], key, n.value, n, freq)
			seg.noted(n)
			return o
		}
	}
	value := n.value
	if found && overlaps(value, seg.mem[v.off:v.end()]) {
		value = clone(value) // making room may move or drop the old bytes
	}
	q := sh.queueFor(found, seg, h)
	if !found && sh.indexFull() && !sh.grow(now) && sh.idx.n == len(sh.idx.slots) {
		sh.refuse(false, 0, nil, nil)
		return o
	}
	dst, off, ok := sh.room(q, size, now)
	if found {
		// Making room may have moved the old item, or evicted it.
		pos, seg, v, found = sh.find(key, h)
	}
	if !ok {
		sh.refuse(found, pos, seg, &v)
		return o
	}
	encode(dst.mem[off:off+size], key, value, n, freq)
	dst.noted(n)
	dst.live += size
	dst.nlive++
	sh.items++
	sh.bytes += int64(size)
	if found {
		sh.kill(seg, &v)
		sh.idx.set(pos, location(dst, off))
		sh.released(seg)
	} else {
		sh.idx.insert(h, location(dst, off))
	}
	return o
}

// refuse drops a write there is no memory for, and the key's old item with
// it: a later read must not find the value the write replaced.
func (sh *shard) refuse(found bool, pos int, seg *segment, v *view) {
	sh.rejections++
	if found {
		sh.unlink(pos, seg, v)
	}
}

// overlaps reports whether a and b share memory.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}

// kill marks the item v of seg dead and uncounts it; its index entry is
// the caller's business.
func (sh *shard) kill(seg *segment, v *view) {
	seg.mem[v.off] |= hdrDead
	seg.live -= v.size
	seg.nlive--
	sh.items--
	sh.bytes -= int64(v.size)
}

// unlink removes the item v of seg, whose index entry is at pos.
func (sh *shard) unlink(pos int, seg *segment, v *view) {
	sh.idx.remove(pos)
	sh.kill(seg, v)
	sh.released(seg)
}

// released frees a large item's mapping once its item is gone. (An empty
// shared segment waits for the sweeper or eviction.)
func (sh *shard) released(seg *segment) {
	if seg.large && seg.nlive == 0 {
		sh.dropSegment(seg)
	}
}

func (g *segEngine) flushed() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

func (g *segEngine) stats(st *Stats) {
	for i := range g.shards {
		sh := &g.shards[i]
		sh.mu.Lock()
		st.CurrItems += sh.items
		st.Bytes += sh.bytes
		st.Evictions += sh.evictions
		st.EvictedUnfetched += sh.evictedUnfetched
		st.Rejections += sh.rejections
		st.Hits += sh.hits.Load()
		st.Misses += sh.misses.Load()
		sh.mu.Unlock()
	}
}

// newIndex gives the shard an empty index of n slots, and a ghost table to
// go with it. The old index, if any, is drained into it a few slots per
// write (drain); until then the shard pays for both.
func (sh *shard) newIndex(n int) error {
	size := tableBytes(n)
	mem, err := mapMem(size)
	if err != nil {
		return err
	}
	sh.spent += int64(size)
	x := newIndex(mem, n)
	if sh.idx != nil {
		sh.old, sh.oldMem, sh.drained = sh.idx, sh.idxMem, 0
		x.prev.Store(sh.old)
	}
	sh.idx, sh.idxMem = x, mem
	sh.ghost = newGhost(mem[indexBytes(n):])
	sh.ridx.Store(x)
	return nil
}

// drain moves the entries of up to n slots of the index being drained, if
// any, into the current one, and frees the old one once it is empty.
func (sh *shard) drain(n int) {
	if sh.old == nil || !sh.old.drainInto(sh.idx, &sh.drained, n) {
		return
	}
	sh.idx.prev.Store(nil)
	sh.spent -= int64(len(sh.oldMem))
	retire(sh.old, sh.oldMem)
	sh.old, sh.oldMem = nil, nil
}

// drainStep is how many slots of an index being drained each write moves:
// enough that the old index is empty well before the new one fills (it
// is a quarter larger, and grows again past 7/8 full, so some 4.6 slots a
// write would do), few enough that a write hardly notices (BenchmarkIndexGrowth).
const drainStep = 16

// retire gives back the memory of an index a read may still be looking
// at (read.go): its pages at once, its mapping once no read holds x.
func retire(x *index, mem []byte) {
	dropMem(mem)
	runtime.AddCleanup(x, unmapMem, mem)
}

// tableBytes is the mapping of an index of n slots and its ghost table.
func tableBytes(n int) int { return indexBytes(n) + ghostBytes(n) }

// indexFull reports whether one more entry would take the index past
// 7/8, counting those still in the old index.
func (sh *shard) indexFull() bool {
	n := sh.idx.n
	if sh.old != nil {
		n += sh.old.n
	}
	return (n+1)*8 > len(sh.idx.slots)*7
}

// grow makes the index a quarter larger, evicting to pay for it; false if
// it cannot. (Doubling would leave the index half empty, on average a
// quarter, and it is a tenth of the memory.) An index still being drained
// is drained first, at once: writes drain it long before it comes to
// that.
func (sh *shard) grow(now int64) bool {
	sh.drain(len(sh.idx.slots) + 1)
	n := len(sh.idx.slots) + len(sh.idx.slots)/4
	if n > maxIndex {
		return false
	}
	return sh.shedFor(int64(tableBytes(n)), now) && sh.newIndex(n) == nil
}

// at returns the position in the current index of the entry for hash h
// at loc, which must be in the index, moving it out of the old index if
// it is still there.
func (sh *shard) at(h, loc uint64) int {
	eq := func(l uint64) bool { return l == loc }
	if pos, ok := sh.idx.find(h, eq); ok {
		return pos
	}
	if sh.old != nil {
		if pos, ok := sh.old.find(h, eq); ok {
			return sh.old.take(pos, h, sh.idx)
		}
	}
	panic("store: index lost an item")
}
