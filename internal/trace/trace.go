// Package trace generates the cache-aside key streams that the store's
// eviction policies were compared on (store/policy_test.go) and that
// `make bench-memory` replays against memcached and Spillway
// (bench/memory): Zipf 0.99, Zipf 0.8, uniform, and Zipf 0.99 mixed with
// one-off scans. It is internal: a few lines those two share.
package trace

import (
	"math"
	"math/rand/v2"
	"sort"
)

// Workload is one kind of trace over Keys keys.
type Workload struct {
	Name string
	Keys int
	zipf zipfCDF // nil: uniform
	scan bool
}

// Workloads are the four traces, over keys keys.
func Workloads(keys int) []Workload {
	z99 := newZipfCDF(keys, 0.99)
	return []Workload{
		{Name: "zipf0.99", Keys: keys, zipf: z99},
		{Name: "zipf0.8", Keys: keys, zipf: newZipfCDF(keys, 0.8)},
		{Name: "uniform", Keys: keys},
		// One request in five is part of a scan: keys outside the Zipf
		// range, each read once and never again.
		{Name: "scan-mix", Keys: keys, zipf: z99, scan: true},
	}
}

// Stream is one client's sequence of keys; streams with different ids
// scan different keys. Not safe for concurrent use.
type Stream struct {
	w   *Workload
	rng *rand.Rand
	id  int
	n   int
}

// Stream returns the seeded stream of client id.
func (w *Workload) Stream(seed uint64, id int) *Stream {
	return &Stream{w: w, rng: rand.New(rand.NewPCG(seed, uint64(id))), id: id}
}

// Next returns the next key, as a number: 0 is the most popular.
func (s *Stream) Next() int {
	s.n++
	switch {
	case s.w.scan && s.n%5 == 0:
		return s.w.Keys + s.id<<32 + s.n/5
	case s.w.zipf == nil:
		return s.rng.IntN(s.w.Keys)
	}
	return s.w.zipf.rank(s.rng)
}

// zipfCDF draws ranks 0..n-1 with P(k) proportional to 1/(k+1)^s, for any
// s (math/rand's Zipf needs s > 1), by binary search in the cumulative
// distribution: 8 bytes a key, read-only once built, so streams share it.
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
	return min(sort.SearchFloat64s(c, rng.Float64()), len(c)-1)
}
