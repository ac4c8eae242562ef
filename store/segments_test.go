package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"
)

// newSegStore returns a Segments store with the given policy on a fake
// clock, closed when the test ends.
func newSegStore(t testing.TB, maxBytes int64, p policy) (*Store, *segEngine, *clock) {
	t.Helper()
	clk := newClock()
	s, err := New(Config{Engine: Segments, MaxBytes: maxBytes, Now: clk.Now, policy: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, s.eng.(*segEngine), clk
}

var policies = []policy{evictS3FIFO, evictCLOCK, evictFIFO}

// checkSegments verifies every shard's bookkeeping against its memory:
// each index entry leads to a live item of its key, each live item has an
// index entry, and the counts (items, bytes, per segment, per queue,
// memory spent) add up and stay within the limit.
func checkSegments(t testing.TB, g *segEngine) {
	t.Helper()
	for i := range g.shards {
		sh := &g.shards[i]
		sh.mu.Lock()
		err := sh.check()
		sh.mu.Unlock()
		if err != nil {
			t.Fatalf("shard %d: %v", i, err)
		}
	}
}

func (sh *shard) check() error {
	spent := int64(len(sh.idxMem) + len(sh.oldMem))
	tables := []*index{sh.idx}
	indexed := sh.idx.n
	if sh.old != nil {
		tables = append(tables, sh.old)
		indexed += sh.old.n
	}
	var items, bytes int64
	var qbytes [numQueues]int64
	for id := range sh.segs.len() {
		seg := sh.segs.get(uint32(id))
		if seg == nil {
			continue
		}
		if seg.id != uint32(id) {
			return fmt.Errorf("segment %d numbered %d", id, seg.id)
		}
		spent += int64(len(seg.mem))
		if seg.q != noQueue {
			qbytes[seg.q] += int64(len(seg.mem))
		} else if seg != sh.spare {
			return fmt.Errorf("segment %d is in no queue and not the spare", id)
		}
		live, nlive := 0, 0
		for off := 0; off < seg.used; {
			it := decode(seg.mem, off)
			off = it.end()
			if off > seg.used {
				return fmt.Errorf("segment %d: item at %d runs past %d", id, it.off, seg.used)
			}
			if it.dead() {
				continue
			}
			live += it.size
			nlive++
			h := sh.g.hashOf(it.keyOf(seg.mem))
			if !slices.ContainsFunc(tables, func(x *index) bool {
				_, ok := x.find(h, func(l uint64) bool { return l == location(seg, it.off) })
				return ok
			}) {
				return fmt.Errorf("segment %d: live item %q at %d is not indexed", id, it.keyOf(seg.mem), it.off)
			}
			if it.exp != 0 && seg.minExp > it.exp || it.seq < seg.minSeq {
				return fmt.Errorf("segment %d: hints (exp %d, seq %d) above an item's (%d, %d)", id, seg.minExp, seg.minSeq, it.exp, it.seq)
			}
		}
		if live != seg.live || nlive != seg.nlive {
			return fmt.Errorf("segment %d: %d live items, %d bytes; counted %d, %d", id, nlive, live, seg.nlive, seg.live)
		}
		if seg.large && nlive == 0 {
			return fmt.Errorf("large segment %d kept with no item", id)
		}
		items += int64(nlive)
		bytes += int64(live)
	}
	for q := range sh.q {
		n := int64(0)
		for id := sh.q[q].first; id != 0; id = sh.segs.get(id).next {
			n += int64(len(sh.segs.get(id).mem))
		}
		if n != qbytes[q] || n != sh.q[q].bytes {
			return fmt.Errorf("queue %d: linked %d bytes, segments say %d, queue %d", q, n, qbytes[q], sh.q[q].bytes)
		}
	}
	for _, x := range tables {
		for pos, s := range x.slots {
			if s == 0 || s == tomb {
				continue
			}
			seg := sh.segs.get(uint32(s & locMask >> segBits))
			if seg == nil {
				return fmt.Errorf("slot %d: no segment %d", pos, s&locMask>>segBits)
			}
			it := decode(seg.mem, int(s&(maxSegSize-1)))
			if it.dead() || sh.g.hashOf(it.keyOf(seg.mem))>>locBits != s>>locBits {
				return fmt.Errorf("slot %d leads to a dead item or one of another tag", pos)
			}
		}
	}
	switch {
	case items != sh.items || bytes != sh.bytes || int(items) != indexed:
		return fmt.Errorf("%d items, %d bytes in segments; counted %d, %d; index %d", items, bytes, sh.items, sh.bytes, indexed)
	case spent != sh.spent:
		return fmt.Errorf("%d bytes mapped, counted %d", spent, sh.spent)
	case spent > sh.max:
		return fmt.Errorf("%d bytes mapped, over the limit %d", spent, sh.max)
	}
	return nil
}

// fill writes n keys of vlen-byte values and returns the keys.
func fill(s *Store, prefix string, n, vlen int) []string {
	keys := make([]string, n)
	val := bytes.Repeat([]byte("v"), vlen)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
		s.Set(Item{Key: keys[i], Value: val})
	}
	return keys
}

func TestSegmentsLayout(t *testing.T) {
	cpus := 1
	for cpus*2 <= 4*runtime.GOMAXPROCS(0) {
		cpus *= 2
	}
	tests := []struct {
		maxBytes    int64
		shards, seg int
	}{
		{maxBytes: 4096, shards: 1, seg: 4 << 10},
		{maxBytes: 1 << 20, shards: 1, seg: 64 << 10},
		{maxBytes: 64 << 20, shards: min(cpus, 4), seg: 256 << 10},
		{maxBytes: 1 << 30, shards: min(cpus, 64), seg: 256 << 10},
	}
	for _, tt := range tests {
		_, g, _ := newSegStore(t, tt.maxBytes, evictS3FIFO)
		if len(g.shards) != tt.shards || g.segSize != tt.seg {
			t.Errorf("MaxBytes %d: %d shards of %d-byte segments, want %d of %d", tt.maxBytes, len(g.shards), g.segSize, tt.shards, tt.seg)
		}
	}
	if got := itemSize(11, 100, 0, 0); got != 11+100+15 {
		t.Errorf("a 100-byte item under an 11-byte key takes %d bytes, want %d", got, 11+100+15)
	}
}

// TestSegmentsEviction fills a store many times over with each policy: it
// stays within its memory, keeps its books, counts what it evicted, and
// every key it says it holds reads back with its value.
func TestSegmentsEviction(t *testing.T) {
	for _, p := range policies {
		t.Run(p.String(), func(t *testing.T) {
			s, g, _ := newSegStore(t, 2<<20, p)
			const n = 60000 // about 8 MiB of items
			keys := fill(s, "k", n, 100)
			checkSegments(t, g)
			st := s.Stats()
			if st.Evictions == 0 || st.CurrItems+int64(st.Evictions) != n || st.EvictedUnfetched != st.Evictions {
				t.Fatalf("Stats = %+v: want evictions that add up to %d with the items held", st, n)
			}
			held := 0
			for _, k := range keys {
				if it, ok := s.Peek(k); ok {
					held++
					if len(it.Value) != 100 || it.Key != k {
						t.Fatalf("Peek(%q) = %+v", k, it)
					}
				}
			}
			if int64(held) != st.CurrItems || held < n/6 {
				t.Fatalf("%d keys readable, Stats says %d, of %d written", held, st.CurrItems, n)
			}
		})
	}
}

// TestSegmentsKeepHotKeys: a small set of keys read between waves of
// one-off keys survives with the policies that copy read items forward,
// and not with FIFO.
func TestSegmentsKeepHotKeys(t *testing.T) {
	for _, p := range policies {
		t.Run(p.String(), func(t *testing.T) {
			s, g, _ := newSegStore(t, 2<<20, p)
			hot := fill(s, "hot", 500, 100)
			lost := 0
			for wave := range 20 {
				for _, k := range hot {
					if _, ok := s.Get(k); !ok {
						lost++
						s.Set(Item{Key: k, Value: bytes.Repeat([]byte("v"), 100)})
					}
				}
				fill(s, "cold"+strconv.Itoa(wave)+":", 2000, 100)
			}
			checkSegments(t, g)
			if p == evictFIFO {
				if lost == 0 {
					t.Fatal("FIFO kept every hot key: the test does not evict them")
				}
				return
			}
			if lost > 0 {
				t.Fatalf("%s lost %d reads of hot keys", p, lost)
			}
		})
	}
}

// TestSegmentsLargeItems: items longer than a shared segment's share get
// mappings of their own, from a few KiB to several MiB, and give them back
// when replaced, deleted or evicted.
func TestSegmentsLargeItems(t *testing.T) {
	s, g, _ := newSegStore(t, 64<<20, evictS3FIFO)
	sizes := []int{g.large - 20, g.large + 1, 100 << 10, 1 << 20, 5 << 20}
	for i, n := range sizes {
		v := bytes.Repeat([]byte{byte('a' + i)}, n)
		key := "big" + strconv.Itoa(i)
		s.Set(Item{Key: key, Value: v, Flags: 7})
		if it := mustGet(t, s, key); !bytes.Equal(it.Value, v) || it.Flags != 7 {
			t.Fatalf("%d-byte item read back wrong", n)
		}
	}
	checkSegments(t, g)
	before := spent(g)
	s.Set(Item{Key: "big4", Value: []byte("small now")})
	s.Delete("big3")
	if after := spent(g); before-after < 6<<20-int64(g.segSize) { // the small value may take a new segment
		t.Fatalf("replacing and deleting 6 MiB of items freed %d bytes", before-after)
	}
	if _, err := s.Append(Item{Key: "big2", Value: []byte("!")}); err != nil {
		t.Fatal(err)
	}
	if it := mustGet(t, s, "big2"); len(it.Value) != 100<<10+1 || it.Value[len(it.Value)-1] != '!' {
		t.Fatalf("append to a large item: %d bytes", len(it.Value))
	}
	checkSegments(t, g)
	// Far more large items than fit: evicted like the others.
	for i := range 40 {
		s.Set(Item{Key: "huge" + strconv.Itoa(i), Value: make([]byte, 3<<20)})
	}
	checkSegments(t, g)
	if st := s.Stats(); st.Evictions == 0 || st.CurrItems == 0 {
		t.Fatalf("Stats = %+v", st)
	}
	// An item larger than a shard's memory is refused, and takes the old
	// value with it.
	s.Set(Item{Key: "k", Value: []byte("old")})
	s.Set(Item{Key: "k", Value: make([]byte, 65<<20)})
	mustMiss(t, s, "k")
	if st := s.Stats(); st.Rejections != 1 {
		t.Fatalf("Rejections = %d, want 1", st.Rejections)
	}
	checkSegments(t, g)
}

func spent(g *segEngine) int64 {
	var n int64
	for i := range g.shards {
		sh := &g.shards[i]
		sh.mu.Lock()
		n += sh.spent
		sh.mu.Unlock()
	}
	return n
}

// TestSegmentsSweep: the sweeper drops expired and flushed items without
// their being read, frees the segments they leave empty and compacts the
// ones mostly dead, and counts what it reclaimed.
func TestSegmentsSweep(t *testing.T) {
	s, g, clk := newSegStore(t, 16<<20, evictS3FIFO)
	val := bytes.Repeat([]byte("x"), 100)
	for i := range 20000 {
		exp := time.Time{}
		if i%4 != 0 {
			exp = clk.Now().Add(time.Minute) // three in four expire
		}
		s.Set(Item{Key: "k" + strconv.Itoa(i), Value: val, Expires: exp})
	}
	s.Get("k1") // fetched: not expired_unfetched
	full := spent(g)
	clk.Advance(time.Minute)
	g.sweep()
	checkSegments(t, g)
	st := s.Stats()
	if st.CurrItems != 5000 || st.Reclaimed != 15000 || st.ExpiredUnfetched != 14999 {
		t.Fatalf("after expiry: Stats = %+v", st)
	}
	g.sweep() // the first pass dropped items; compaction frees their segments
	checkSegments(t, g)
	if now := spent(g); now > full/2 {
		t.Fatalf("%d bytes mapped after three quarters expired, %d before", now, full)
	}
	for i := 0; i < 20000; i += 4 {
		mustGet(t, s, "k"+strconv.Itoa(i))
	}
	// flush_all: the sweeper (kicked by Flush, or the test) drops it all.
	s.Flush(0)
	s.Set(Item{Key: "after", Value: val})
	g.sweep()
	g.sweep()
	checkSegments(t, g)
	if st := s.Stats(); st.CurrItems != 1 {
		t.Fatalf("after flush_all: %d items", st.CurrItems)
	}
	mustGet(t, s, "after")
	index := int64(0)
	for i := range g.shards {
		index += int64(len(g.shards[i].idxMem))
	}
	if now := spent(g); now > index+int64(g.segSize) {
		t.Fatalf("%d bytes mapped after flush_all (%d before): more than the index (%d) and the one item's segment", now, full, index)
	}
}

// TestSegmentsInPlace: a write of the same length rewrites the item where
// it is, so counters, touches and same-size sets leave no dead bytes.
func TestSegmentsInPlace(t *testing.T) {
	s, g, clk := newSegStore(t, 1<<20, evictS3FIFO)
	s.Set(Item{Key: "n", Value: []byte("100"), Expires: clk.Now().Add(time.Hour)})
	used := func() int {
		sh := g.shard(s.hash("n"))
		return sh.q[qSmall].head.used
	}
	before := used()
	for range 50 {
		s.Incr("n", 1, false)
		s.Touch("n", clk.Now().Add(2*time.Hour))
		s.Set(Item{Key: "n", Value: []byte("777"), Expires: clk.Now().Add(time.Hour)})
	}
	if after := used(); after != before {
		t.Fatalf("same-length writes appended %d bytes", after-before)
	}
	s.Set(Item{Key: "n", Value: []byte("1000")})
	if used() == before {
		t.Fatal("a longer value was written in place")
	}
	checkSegments(t, g)
}

func TestSegmentsLongKey(t *testing.T) {
	s, g, _ := newSegStore(t, 1<<20, evictS3FIFO)
	long := string(bytes.Repeat([]byte("k"), MaxSegmentKeyLen+1))
	s.Set(Item{Key: long, Value: []byte("v")})
	mustMiss(t, s, long)
	ok := string(bytes.Repeat([]byte("k"), MaxSegmentKeyLen))
	s.Set(Item{Key: ok, Value: []byte("v")})
	mustGet(t, s, ok)
	if st := s.Stats(); st.Rejections != 1 {
		t.Fatalf("Rejections = %d", st.Rejections)
	}
	checkSegments(t, g)
}

// TestSegmentsCacheModel runs random commands over many keys in a store
// far too small for them: a hit must return the latest write (a miss is
// always allowed), and the books must balance after every burst.
func TestSegmentsCacheModel(t *testing.T) {
	for _, p := range policies {
		t.Run(p.String(), func(t *testing.T) {
			s, g, clk := newSegStore(t, 1<<20, p)
			rng := rand.New(rand.NewPCG(uint64(p), 9))
			latest := map[string]string{}
			for step := range 60000 {
				key := "k" + strconv.Itoa(rng.IntN(3000))
				val := strconv.Itoa(step) + string(bytes.Repeat([]byte("."), rng.IntN(600)))
				switch op := rng.IntN(10); {
				case op < 5:
					it, ok := s.Get(key)
					if ok && string(it.Value) != latest[key] {
						t.Fatalf("step %d: Get(%q) = %.20q…, latest write %.20q…", step, key, it.Value, latest[key])
					}
				case op < 8:
					s.Set(Item{Key: key, Value: []byte(val)})
					latest[key] = val
				case op == 8:
					if _, err := s.Append(Item{Key: key, Value: []byte("+")}); err == nil {
						latest[key] += "+"
					}
				default:
					if err := s.Delete(key); err != nil && !errors.Is(err, ErrNotFound) {
						t.Fatal(err)
					}
					delete(latest, key)
				}
				if step%5000 == 0 {
					clk.Advance(time.Second)
					g.sweep()
					checkSegments(t, g)
				}
			}
			checkSegments(t, g)
		})
	}
}

// TestSegmentsConcurrent: writers, readers and the sweeper on a store
// under memory pressure; with -race, and the books checked at the end.
func TestSegmentsConcurrent(t *testing.T) {
	s, g, clk := newSegStore(t, 1<<20, evictS3FIFO)
	run(8, func(w int) {
		rng := rand.New(rand.NewPCG(uint64(w), 1))
		for i := range 4000 {
			key := "k" + strconv.Itoa(rng.IntN(2000))
			switch rng.IntN(6) {
			case 0, 1:
				s.Set(Item{Key: key, Value: bytes.Repeat([]byte{byte(w)}, 50+rng.IntN(400)), Expires: clk.Now().Add(time.Duration(rng.IntN(3)) * time.Second)})
			case 2:
				s.Incr(key, 1, false)
			case 3:
				s.Delete(key)
			default:
				if it, ok := s.Get(key); ok && len(it.Value) > 0 && bytes.Count(it.Value, it.Value[:1]) != len(it.Value) {
					t.Errorf("torn value %q", it.Value)
					return
				}
			}
			if w == 0 && i%500 == 0 {
				clk.Advance(time.Second)
				g.sweep()
			}
		}
	})
	checkSegments(t, g)
}

// TestSegmentsIndexDrains: while a shard's index is drained into a larger
// one, every key is found in one table or the other, and writes, deletes
// and evictions of keys still in the old table move or drop them there;
// the sweeper finishes a drain that writes leave half done.
func TestSegmentsIndexDrains(t *testing.T) {
	s, g, _ := newSegStore(t, 8<<20, evictS3FIFO)
	sh := &g.shards[0]
	old := func() int { // entries left in the old table; -1 if none
		sh.mu.Lock() // the sweeper drains too
		defer sh.mu.Unlock()
		if sh.old == nil {
			return -1
		}
		return sh.old.n
	}
	val := bytes.Repeat([]byte("v"), 50)
	n := 0
	for ; old() < 1000; n++ {
		s.Set(Item{Key: "k" + strconv.Itoa(n), Value: val})
		if n > 1_000_000 {
			t.Fatal("the index never grew")
		}
	}
	checkSegments(t, g)
	for i := range n {
		mustGet(t, s, "k"+strconv.Itoa(i))
	}
	for i := 0; i < n; i += 3 {
		s.Delete("k" + strconv.Itoa(i))
	}
	for i := 1; i < n; i += 3 {
		s.Set(Item{Key: "k" + strconv.Itoa(i), Value: []byte("other")})
	}
	checkSegments(t, g)
	for i := range n {
		it, ok := s.Get("k" + strconv.Itoa(i))
		switch {
		case i%3 == 0 && ok:
			t.Fatalf("k%d deleted, still found", i)
		case i%3 == 1 && string(it.Value) != "other":
			t.Fatalf("k%d = %q, %v; want the overwrite", i, it.Value, ok)
		case i%3 == 2 && !ok:
			t.Fatalf("k%d lost", i)
		}
	}
	for old() >= 0 {
		g.sweep()
	}
	checkSegments(t, g)
	for i := 2; i < n; i += 3 {
		mustGet(t, s, "k"+strconv.Itoa(i))
	}
}
