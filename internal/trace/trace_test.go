package trace

import (
	"math"
	"testing"
)

func TestWorkloads(t *testing.T) {
	const keys, n = 1000, 200_000
	for _, w := range Workloads(keys) {
		t.Run(w.Name, func(t *testing.T) {
			counts := map[int]int{}
			a, b := w.Stream(1, 0), w.Stream(1, 0)
			other := w.Stream(1, 1)
			for range n {
				k := a.Next()
				if b.Next() != k {
					t.Fatal("two streams of one seed and id differ")
				}
				if o := other.Next(); k >= keys && o == k {
					t.Fatal("two clients scanned the same key")
				}
				counts[k]++
			}
			top := float64(counts[0]) / n
			switch w.Name {
			case "zipf0.99", "zipf0.8":
				s := map[string]float64{"zipf0.99": 0.99, "zipf0.8": 0.8}[w.Name]
				sum := 0.0
				for k := 1; k <= keys; k++ {
					sum += math.Pow(float64(k), -s)
				}
				if want := 1 / sum; math.Abs(top-want) > want/10 {
					t.Fatalf("key 0 drawn %.4f of the time, want %.4f", top, want)
				}
			case "uniform":
				if math.Abs(top-1.0/keys) > 0.5/keys {
					t.Fatalf("key 0 drawn %.4f of the time, want %.4f", top, 1.0/keys)
				}
			case "scan-mix":
				scans := 0
				for k, c := range counts {
					if k >= keys {
						scans++
						if c != 1 {
							t.Fatalf("scan key %d read %d times", k, c)
						}
					}
				}
				if scans != n/5 {
					t.Fatalf("%d scan keys, want %d", scans, n/5)
				}
			}
		})
	}
}
