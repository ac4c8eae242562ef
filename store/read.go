package store

import (
	"runtime"
	"sync"
)

// A Segments read takes no lock: it finds the item, copies it out, and
// then checks that no writer touched the shard meanwhile, as a seqlock
// reader does. Every writer (write, the sweeper, Close, a read that
// reclaims an expired item) holds the shard's mutex and makes the shard's
// version odd before it changes anything a read looks at (index slots,
// the segment table, segment memory), and even again after (lockWrite);
// a read loads the version before and after and keeps what it read only
// if both loads saw the same even number. Otherwise it tries once more,
// then takes the lock (getLocked), which also does what a read may not:
// reclaim an expired or flushed item, and read a large item, whose
// mapping is unmapped when the item goes.
//
// What a read may meet, and why each is harmless:
//
//   - A write of the same key, or eviction, compaction or the sweeper
//     moving, killing or overwriting the item (a segment is reused as
//     soon as it is emptied, possibly by another shard, through the
//     pool): the read may copy a mix of old and new bytes, or bytes of
//     some other item, or zeros (a segment given back to the pool). The
//     writer made the version odd before its first store, so the read's
//     second load sees a different version and the copy is thrown away.
//     Nothing a read decodes is trusted before that check: headers are
//     parsed with bounds checks (parse, keyAt), so garbage makes the read
//     fail, never fault or panic.
//   - The index growing, or being drained (index.go): a read looks in
//     the table it loaded, then in that one's prev, and may hold tables
//     that are no longer the shard's. A drained table's pages are given
//     back at once (they then read as zeros) but its mapping stays until
//     no read holds it (retire, runtime.AddCleanup), so a read never
//     touches unmapped memory; the version check discards what it found
//     there.
//   - The segment table growing or renumbering: entries and length are
//     atomics (segTable); an old table gives an old segment, whose memory
//     (the pool's) stays mapped until Close.
//   - A large item: its mapping is unmapped when it is freed, so a read
//     never touches it; a read that meets one takes the lock.
//   - Close: must not run concurrently with reads (Store.Close); a read
//     after it finds no index and misses.
//
// A read records its access in the item's meta byte (fetched, and the
// frequency count eviction reads). That store is made under the mutex,
// after checking that the version has not moved since the read began, so
// it lands on the header the read found; it is needed only until the
// count saturates (hdrFreq), so reads of hot items write nothing. It
// leaves the version alone: it changes no byte a read decodes a layout
// from.
//
// Measured (BenchmarkGetParallel, 2 cores): see the commit that made reads
// lock-free and README "Memory".

// readTries is how many lock-free attempts a read makes before it takes
// the lock.
const readTries = 2

func (g *segEngine) get(key string, h uint64, fetch bool, dst []byte) (Item, bool) {
	sh := g.shard(h)
	for range readTries {
		if it, found, ok := sh.read(key, h, fetch, dst); ok {
			return it, found
		}
	}
	return g.getLocked(sh, key, h, fetch, dst)
}

// read is a get without the lock; ok is false if a writer got in the way,
// or the read needs the lock.
func (sh *shard) read(key string, h uint64, fetch bool, dst []byte) (it Item, found, ok bool) {
	v0 := sh.ver.Load()
	if v0&1 != 0 {
		return Item{}, false, false
	}
	x := sh.ridx.Load()
	if x == nil {
		return Item{}, false, true // closed
	}
	var seg *segment
	var v view
	locked := false
	eq := func(loc uint64) bool {
		s := sh.segs.get(uint32(loc >> segBits))
		if s == nil || s.large {
			locked = true // torn, or a large item: not without the lock
			return true
		}
		off := int(loc & (maxSegSize - 1))
		if k, ok := keyAt(s.mem, off); !ok || string(k) != key {
			return false
		}
		var parsed bool
		seg = s
		v, parsed = parse(s.mem, off)
		locked = !parsed
		return true
	}
	_, found = x.find(h, eq)
	old := x.prev.Load()
	if !found && old != nil {
		_, found = old.find(h, eq)
	}
	runtime.KeepAlive(x) // the mappings stay until here (retire)
	runtime.KeepAlive(old)
	if locked {
		return Item{}, false, false
	}
	var value []byte
	if found {
		if v.vlen > sh.g.large {
			return Item{}, false, false // torn: no such item in a shared segment
		}
		value = copyOut(seg.mem[v.val:v.end()], dst)
	}
	if sh.ver.Load() != v0 {
		return Item{}, false, false
	}
	// What was read is what the shard held: trust it from here on.
	if !found {
		if fetch {
			sh.misses.Add(1)
		}
		return Item{}, false, true
	}
	if expired, flushed := sh.g.s.readable(key, v.seq, v.exp); expired || flushed {
		return Item{}, false, false // the lock reclaims it, and counts
	}
	r := v.rec(seg.mem)
	r.value = value
	it = r.item(key)
	if fetch {
		if accessed(v.meta) != v.meta {
			sh.mu.Lock()
			if sh.ver.Load() != v0 {
				sh.mu.Unlock()
				return Item{}, false, false
			}
			seg.mem[v.off] = accessed(seg.mem[v.off])
			sh.mu.Unlock()
		}
		sh.hits.Add(1)
	}
	return it, true, true
}

// copyOut copies a value out of a segment for a read: into dst's array if
// it fits (GetAppend), else into memory of its own. Small values are
// carved from chunks of copyChunk bytes rather than allocated one by one:
// the chunks come from a sync.Pool, which keeps one per P, so concurrent
// reads do not share one. Each copy's capacity is its length, so a caller
// cannot append into its neighbour; a chunk lives as long as any value cut
// from it does.
func copyOut(b, dst []byte) []byte {
	n := len(b)
	if n <= cap(dst) {
		return append(dst[:0], b...)
	}
	if n > copyChunk/8 {
		return clone(b)
	}
	c := chunks.Get().(*[]byte)
	if len(*c) < n {
		*c = make([]byte, copyChunk)
	}
	v := (*c)[:n:n]
	*c = (*c)[n:]
	chunks.Put(c)
	copy(v, b)
	return v
}

// copyChunk is the size of the chunks copyOut carves values from.
const copyChunk = 16 << 10

var chunks = sync.Pool{New: func() any { return new([]byte) }}
