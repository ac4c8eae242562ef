package store

import (
	"bytes"
	"container/list"
	"fmt"
	"testing"
	"time"

	"spillway/internal/trace"
)

// BenchmarkPolicies replays the same cache-aside traces (get; on a miss,
// set) through the Segments engine with each eviction policy, at memory
// that holds about a fifth of the keys, and reports the hit ratio over the
// second half of each trace. It is how the default policy was chosen
// (README "Memory"). For reference it also replays them through the
// Ristretto engine at the same MaxBytes (which charges ItemOverhead per
// item, so it holds fewer), and through an exact LRU of items holding as
// many as the Segments store does:
//
//	go test -run '^$' -bench Policies -benchtime 1x ./store/
func BenchmarkPolicies(b *testing.B) {
	const maxBytes, n = 32 << 20, 6_000_000
	for _, w := range trace.Workloads(1 << 20) {
		var held int64 // by S3-FIFO, for the LRU to hold as many
		for _, p := range policies {
			b.Run(fmt.Sprintf("trace=%s/policy=%s", w.Name, p), func(b *testing.B) {
				for range b.N {
					hits, items := replay(b, w, Config{Engine: Segments, policy: p}, maxBytes, n)
					b.ReportMetric(100*hits, "hit-%")
					b.ReportMetric(float64(items), "items")
					if p == evictS3FIFO {
						held = items
					}
				}
			})
		}
		b.Run(fmt.Sprintf("trace=%s/policy=ristretto", w.Name), func(b *testing.B) {
			for range b.N {
				hits, items := replay(b, w, Config{Engine: Ristretto}, maxBytes, n)
				b.ReportMetric(100*hits, "hit-%")
				b.ReportMetric(float64(items), "items")
			}
		})
		b.Run(fmt.Sprintf("trace=%s/policy=exact-lru", w.Name), func(b *testing.B) {
			for range b.N {
				b.ReportMetric(100*replayLRU(w, int(held), n), "hit-%")
				b.ReportMetric(float64(held), "items")
			}
		})
	}
}

// replay runs n requests of w against a store of cfg with maxBytes, and
// returns the hit ratio of the second half and the items held at the end.
func replay(tb testing.TB, w trace.Workload, cfg Config, maxBytes int64, n int) (float64, int64) {
	cfg.MaxBytes = maxBytes
	s, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Close()
	val := bytes.Repeat([]byte("v"), 100)
	key := make([]byte, 0, 16)
	ratio := cacheAside(w, n, func(k int) bool {
		key := string(appendKey(key[:0], k))
		_, ok := s.Get(key)
		if !ok {
			s.Set(Item{Key: key, Value: val})
		}
		return ok
	})
	return ratio, s.Stats().CurrItems
}

// replayLRU is replay with an exact LRU of capacity items.
func replayLRU(w trace.Workload, capacity, n int) float64 {
	lru := list.New()
	at := make(map[int]*list.Element, capacity)
	return cacheAside(w, n, func(k int) bool {
		if e, ok := at[k]; ok {
			lru.MoveToFront(e)
			return true
		}
		at[k] = lru.PushFront(k)
		if lru.Len() > capacity {
			delete(at, lru.Remove(lru.Back()).(int))
		}
		return false
	})
}

// cacheAside sends n keys of w to get, which reads a key and on a miss
// writes it, and returns the hit ratio over the second half.
func cacheAside(w trace.Workload, n int, get func(k int) (hit bool)) float64 {
	keys := w.Stream(42, 0)
	hits := 0
	for i := range n {
		if get(keys.Next()) && i >= n/2 {
			hits++
		}
	}
	return float64(hits) / float64(n-n/2)
}

// TestPoliciesOnATrace is a short replay, so that the comparison keeps
// working: the policies that copy read items forward hit more than FIFO on
// a skewed trace.
func TestPoliciesOnATrace(t *testing.T) {
	w := trace.Workloads(1 << 16)[0]
	ratio := map[policy]float64{}
	for _, p := range policies {
		ratio[p], _ = replay(t, w, Config{Engine: Segments, policy: p}, 2<<20, 200_000)
	}
	if ratio[evictS3FIFO] <= ratio[evictFIFO] || ratio[evictCLOCK] <= ratio[evictFIFO] {
		t.Fatalf("hit ratios %v: FIFO should lose", ratio)
	}
}

// BenchmarkMixedTTL asks whether grouping segments by expiry, as Segcache
// does, would pay: it replays Zipf 0.99 cache-aside traffic (2M keys,
// 100-byte values) on a fake clock at 20,000 requests a second, each key
// written with one of four lifetimes (3 in 10 keys 10 s, 3 in 10 one
// minute, 2 in 10 ten minutes, 2 in 10 none), and the sweeper run once a
// simulated second. It reports, averaged over the sweeps, the share of the
// mapped segments that expired items still held after one (expired-%), and
// that dead items held (dead-%: expired ones the sweeper dropped, in
// segments not dead enough to compact; there are no overwrites), and the
// hit ratio. Dead bytes are what grouping could give back, since a group's
// segment would expire whole. The second run gives the store as much more
// memory as the dead bytes took: the hit ratio a store that reclaimed
// every expired byte at once could reach at most.
//
//	go test -run '^$' -bench MixedTTL -benchtime 1x ./store/
func BenchmarkMixedTTL(b *testing.B) {
	const maxBytes, n, rate = 48 << 20, 8_000_000, 20_000
	w := trace.Workloads(2_000_000)[0]
	lifetime := func(k int) time.Duration {
		switch k % 10 {
		case 0, 1, 2:
			return 10 * time.Second
		case 3, 4, 5:
			return time.Minute
		case 6, 7:
			return 10 * time.Minute
		}
		return 0
	}
	run := func(b *testing.B, mem int64) (hits, expired, dead float64) {
		s, g, clk := newSegStore(b, mem, evictS3FIFO)
		val := bytes.Repeat([]byte("v"), 100)
		key := make([]byte, 0, 16)
		var sweeps int
		i := 0
		hits = cacheAside(w, n, func(k int) bool {
			if i++; i%rate == 0 {
				g.sweep()
				e, d := deadShares(g, clk.Now().UnixNano())
				expired, dead, sweeps = expired+e, dead+d, sweeps+1
			}
			clk.Advance(time.Second / rate)
			key := string(appendKey(key[:0], k))
			_, ok := s.Get(key)
			if !ok {
				it := Item{Key: key, Value: val}
				if d := lifetime(k); d > 0 {
					it.Expires = clk.Now().Add(d)
				}
				s.Set(it)
			}
			return ok
		})
		return hits, expired / float64(sweeps), dead / float64(sweeps)
	}
	var share float64
	b.Run("memory=48MiB", func(b *testing.B) {
		for range b.N {
			hits, expired, dead := run(b, maxBytes)
			share = dead
			b.ReportMetric(100*hits, "hit-%")
			b.ReportMetric(100*expired, "expired-%")
			b.ReportMetric(100*dead, "dead-%")
		}
	})
	b.Run("memory=48MiB+dead", func(b *testing.B) {
		for range b.N {
			hits, _, _ := run(b, int64(float64(maxBytes)/(1-share)))
			b.ReportMetric(100*hits, "hit-%")
		}
	})
}

// deadShares is the share of the bytes of g's shared segments that hold
// expired items not yet reclaimed, and that hold dead ones (replaced,
// removed, or moved on by eviction or compaction).
func deadShares(g *segEngine, now int64) (expired, dead float64) {
	var mapped, exp, gone int64
	for i := range g.shards {
		sh := &g.shards[i]
		sh.mu.Lock()
		for id := range sh.segs.len() {
			seg := sh.segs.get(uint32(id))
			if seg == nil || seg.large {
				continue
			}
			mapped += int64(len(seg.mem))
			gone += int64(seg.used - seg.live)
			for off := 0; off < seg.used; {
				it := decode(seg.mem, off)
				off = it.end()
				if !it.dead() && it.exp != 0 && it.exp <= now {
					exp += int64(it.size)
				}
			}
		}
		sh.mu.Unlock()
	}
	return float64(exp) / float64(mapped), float64(gone) / float64(mapped)
}

// BenchmarkCopyStore replays cache-aside traces through a store of the
// copy budget (server.DefaultCopyMaxBytes, 16 MiB) on each engine: the
// hit ratio of the second half and the items held. Ristretto's TinyLFU
// admission keeps one-off keys out; Segments has none, only S3-FIFO's
// small queue.
//
//	go test -run '^$' -bench CopyStore -benchtime 1x ./store/
func BenchmarkCopyStore(b *testing.B) {
	const maxBytes, n = 16 << 20, 4_000_000
	for _, w := range trace.Workloads(1 << 20) {
		for _, eng := range engines {
			b.Run(fmt.Sprintf("trace=%s/engine=%s", w.Name, eng), func(b *testing.B) {
				for range b.N {
					hits, items := replay(b, w, Config{Engine: eng}, maxBytes, n)
					b.ReportMetric(100*hits, "hit-%")
					b.ReportMetric(float64(items), "items")
				}
			})
		}
	}
}
