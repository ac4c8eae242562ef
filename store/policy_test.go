package store

import (
	"bytes"
	"container/list"
	"fmt"
	"testing"

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
