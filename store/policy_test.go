package store

import (
	"bytes"
	"container/list"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// BenchmarkPolicies replays the same cache-aside traces (get; on a miss,
// set) through the Segments engine with each eviction policy, at memory
// that holds about a fifth of the keys, and reports the hit ratio over the
// second half of each trace. It is how the default policy was chosen
// (README "Memory"):
//
//	go test -run '^$' -bench Policies -benchtime 1x ./store/
func BenchmarkPolicies(b *testing.B) {
	const keys = 1 << 20
	for _, w := range traceWorkloads(keys) {
		for _, p := range policies {
			b.Run(fmt.Sprintf("trace=%s/policy=%s", w.name, p), func(b *testing.B) {
				for range b.N {
					hits, held := replay(b, w, p, 32<<20, 6_000_000)
					b.ReportMetric(100*hits, "hit-%")
					b.ReportMetric(float64(held), "items")
				}
			})
		}
		// For reference: an exact LRU of items, holding as many as the
		// store does.
		b.Run(fmt.Sprintf("trace=%s/policy=exact-lru", w.name), func(b *testing.B) {
			for range b.N {
				b.ReportMetric(100*replayLRU(w, 200_000, 6_000_000), "hit-%")
				b.ReportMetric(200_000, "items")
			}
		})
	}
}

// replayLRU is replay with an exact LRU of capacity items.
func replayLRU(w workload, capacity, n int) float64 {
	rng := rand.New(rand.NewPCG(42, 42))
	lru := list.New()
	at := make(map[int]*list.Element, capacity)
	hits, gets := 0, 0
	for i := range n {
		k := w.next(rng, i)
		e, ok := at[k]
		if i >= n/2 {
			gets++
			if ok {
				hits++
			}
		}
		if ok {
			lru.MoveToFront(e)
			continue
		}
		at[k] = lru.PushFront(k)
		if lru.Len() > capacity {
			delete(at, lru.Remove(lru.Back()).(int))
		}
	}
	return float64(hits) / float64(gets)
}

// workload is a trace: next returns the key rank of the i-th request.
type workload struct {
	name string
	next func(rng *rand.Rand, i int) int
}

func traceWorkloads(keys int) []workload {
	z99, z80 := newZipfCDF(keys, 0.99), newZipfCDF(keys, 0.8)
	return []workload{
		{"zipf0.99", func(rng *rand.Rand, _ int) int { return z99.rank(rng) }},
		{"zipf0.8", func(rng *rand.Rand, _ int) int { return z80.rank(rng) }},
		{"uniform", func(rng *rand.Rand, _ int) int { return rng.IntN(keys) }},
		// Zipf 0.99, and one request in five part of a scan: runs of
		// 50,000 keys read once each, never again (keys above the
		// Zipf range).
		{"scan-mix", func(rng *rand.Rand, i int) int {
			if i%5 == 0 {
				return keys + i/5
			}
			return z99.rank(rng)
		}},
	}
}

// replay runs n requests of w against a Segments store of maxBytes with
// policy p, and returns the hit ratio of the second half and the items
// held at the end.
func replay(tb testing.TB, w workload, p policy, maxBytes int64, n int) (float64, int64) {
	s, _, _ := newSegStore(tb, maxBytes, p)
	rng := rand.New(rand.NewPCG(42, 42))
	val := bytes.Repeat([]byte("v"), 100)
	key := make([]byte, 0, 16)
	hits, gets := 0, 0
	for i := range n {
		k := string(appendKey(key[:0], w.next(rng, i)))
		_, ok := s.Get(k)
		if i >= n/2 {
			gets++
			if ok {
				hits++
			}
		}
		if !ok {
			s.Set(Item{Key: k, Value: val})
		}
	}
	return float64(hits) / float64(gets), s.Stats().CurrItems
}

// zipfCDF draws ranks 0..n-1 with P(k) proportional to 1/(k+1)^s, for any
// s (math/rand's Zipf needs s > 1), by binary search in the cumulative
// distribution.
type zipfCDF []float64

func newZipfCDF(n int, s float64) zipfCDF {
	c := make(zipfCDF, n)
	sum := 0.0
	for k := range c {
		sum += math.Pow(float64(k+1), -s)
		c[k] = sum
	}
	for k := range c {
		c[k] /= sum
	}
	return c
}

func (c zipfCDF) rank(rng *rand.Rand) int {
	u := rng.Float64()
	return min(sort.SearchFloat64s(c, u), len(c)-1)
}

// TestPoliciesOnATrace is a short replay, so that the comparison keeps
// working: the policies that copy read items forward hit more than FIFO on
// a skewed trace.
func TestPoliciesOnATrace(t *testing.T) {
	w := traceWorkloads(1 << 16)[0]
	ratio := map[policy]float64{}
	for _, p := range policies {
		ratio[p], _ = replay(t, w, p, 2<<20, 200_000)
	}
	if ratio[evictS3FIFO] <= ratio[evictFIFO] || ratio[evictCLOCK] <= ratio[evictFIFO] {
		t.Fatalf("hit ratios %v: FIFO should lose", ratio)
	}
}
