package bench

import (
	"math"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// zipfProbs are the exact probabilities of ranks 0..n-1 at exponent s.
func zipfProbs(n int, s float64) []float64 {
	p := make([]float64, n)
	var h float64
	for i := range p {
		p[i] = math.Pow(float64(i+1), -s)
		h += p[i]
	}
	for i := range p {
		p[i] /= h
	}
	return p
}

func TestZipfFrequencies(t *testing.T) {
	const draws = 400_000
	for _, tc := range []struct {
		n int
		s float64
	}{
		{1000, 0.99},
		{1000, 1.2},
		{100_000, 0.95},
		{50, 0.5},
		{10, 2.5},
	} {
		cfg, _ := Config{Servers: []string{"x"}, Keys: tc.n, Zipf: tc.s, Seed: 42}.withDefaults()
		wl := newWorkload(&cfg, 0)
		counts := make([]int, tc.n)
		for range draws {
			k := wl.key(false)
			if k < 0 || k >= tc.n {
				t.Fatalf("n=%d s=%g: rank %d out of range", tc.n, tc.s, k)
			}
			counts[k]++
		}
		// Top ranks and the tail mass must each match theory within five
		// standard errors. The stream is seeded, so this cannot flake.
		tail := 0.0
		tailCount := 0
		for k, p := range zipfProbs(tc.n, tc.s) {
			if k < 10 {
				checkFreq(t, tc.n, tc.s, "rank "+itoa(k+1), counts[k], p, draws)
			} else {
				tail += p
				tailCount += counts[k]
			}
		}
		if tc.n > 10 {
			checkFreq(t, tc.n, tc.s, "ranks > 10", tailCount, tail, draws)
		}
	}
}

func checkFreq(t *testing.T, n int, s float64, what string, got int, p float64, draws int) {
	t.Helper()
	want := p * float64(draws)
	sigma := math.Sqrt(float64(draws) * p * (1 - p))
	if math.Abs(float64(got)-want) > 5*sigma+1 {
		t.Errorf("n=%d s=%g %s: %d draws, want %.0f ± %.0f", n, s, what, got, want, 5*sigma)
	}
}

func itoa(i int) string { return string(appendKey(nil, "", i)) }

func TestUniformAtZero(t *testing.T) {
	const n, draws = 20, 200_000
	cfg, _ := Config{Servers: []string{"x"}, Keys: n, Seed: 7}.withDefaults()
	wl := newWorkload(&cfg, 3)
	if wl.zipf != nil {
		t.Fatal("zipf 0 should be uniform")
	}
	counts := make([]int, n)
	for range draws {
		counts[wl.key(false)]++
	}
	for k, c := range counts {
		checkFreq(t, n, 0, "key "+itoa(k), c, 1.0/n, draws)
	}
}

func TestWorkloadDeterministic(t *testing.T) {
	cfg, _ := Config{Servers: []string{"x"}, Keys: 1000, Zipf: 0.99, Seed: 99,
		ValueSize: Size{10, 500}, Ratio: Ratio{3, 1}}.withDefaults()
	seq := func(worker int) []int {
		wl := newWorkload(&cfg, worker)
		var out []int
		for range 1000 {
			out = append(out, wl.key(false), int(wl.kind()), wl.valueSize())
		}
		return out
	}
	a, b, c := seq(0), seq(0), seq(1)
	same := func(x, y []int) bool {
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return true
	}
	if !same(a, b) {
		t.Error("same seed and worker gave different sequences")
	}
	if same(a, c) {
		t.Error("different workers gave the same sequence")
	}
	cfg.Seed = 100
	if d := seq(0); same(a, d) {
		t.Error("different seeds gave the same sequence")
	}
}

func TestWorkloadMix(t *testing.T) {
	const draws = 100_000
	cfg, _ := Config{Servers: []string{"x"}, Keys: 1000, Seed: 1, Ratio: Ratio{9, 1},
		ValueSize: Size{100, 199}, HotShare: 0.5}.withDefaults()
	wl := newWorkload(&cfg, 0)
	gets, hot, minSize, maxSize := 0, 0, 1<<30, 0
	for range draws {
		if wl.kind() == opGet {
			gets++
		}
		if wl.key(true) == hotKey(cfg.Keys) {
			hot++
		}
		sz := wl.valueSize()
		minSize, maxSize = min(minSize, sz), max(maxSize, sz)
	}
	checkFreq(t, 1000, 0, "gets", gets, 0.9, draws)
	checkFreq(t, 1000, 0, "hot key", hot, 0.5+0.5/1000, draws)
	if minSize != 100 || maxSize != 199 {
		t.Errorf("value sizes in [%d, %d], want [100, 199]", minSize, maxSize)
	}
	if k := wl.key(false); k == hotKey(cfg.Keys) && wl.key(false) == k && wl.key(false) == k {
		t.Error("hot key chosen before the flash sale started")
	}
}

func TestPickHashedMatchesGomemcache(t *testing.T) {
	// crc32 IEEE of "foo" is 0x8c736521; mod 3 = 2, mod 7 = 2; mod 5 = 4.
	for _, tc := range []struct {
		n, want int
	}{{1, 0}, {3, 2}, {7, 2}, {5, 4}} {
		if got := pickHashed([]byte("foo"), tc.n); got != tc.want {
			t.Errorf("pickHashed(foo, %d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Ratio
		ok   bool
	}{{"9:1", Ratio{9, 1}, true}, {"1:0", Ratio{1, 0}, true}, {"0:0", Ratio{}, false}, {"9", Ratio{}, false}, {"a:1", Ratio{}, false}} {
		got, err := ParseRatio(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseRatio(%q) = %v, %v", tc.in, got, err)
		}
	}
	for _, tc := range []struct {
		in   string
		want Size
		ok   bool
	}{{"100", Size{100, 100}, true}, {"10-4096", Size{10, 4096}, true}, {"0", Size{}, false}, {"5-1", Size{}, false}, {"x", Size{}, false}} {
		got, err := ParseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseSize(%q) = %v, %v", tc.in, got, err)
		}
	}
}
