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
// (README "Memory"):
//
//	go test -run '^$' -bench Policies -benchtime 1x ./store/
func BenchmarkPolicies(b *testing.B) {
	for _, w := range trace.Workloads(1 << 20) {
		for _, p := range policies {
			b.Run(fmt.Sprintf("trace=%s/policy=%s", w.Name, p), func(b *testing.B) {
				for range b.N {
					hits, held := replay(b, w, p, 32<<20, 6_000_000)
					b.ReportMetric(100*hits, "hit-%")
					b.ReportMetric(float64(held), "items")
				}
			})
		}
		// For reference: an exact LRU of items, holding as many as the
		// store does.
		b.Run(fmt.Sprintf("trace=%s/policy=exact-lru", w.Name), func(b *testing.B) {
			for range b.N {
				b.ReportMetric(100*replayLRU(w, 200_000, 6_000_000), "hit-%")
				b.ReportMetric(200_000, "items")
			}
		})
	}
}

// replay runs n requests of w against a Segments store of maxBytes with
// policy p, and returns the hit ratio of the second half and the items
// held at the end.
func replay(tb testing.TB, w trace.Workload, p policy, maxBytes int64, n int) (float64, int64) {
	s, _, _ := newSegStore(tb, maxBytes, p)
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
		ratio[p], _ = replay(t, w, p, 2<<20, 200_000)
	}
	if ratio[evictS3FIFO] <= ratio[evictFIFO] || ratio[evictCLOCK] <= ratio[evictFIFO] {
		t.Fatalf("hit ratios %v: FIFO should lose", ratio)
	}
}
