package bench

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

func TestValueRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		key  string
		ver  uint32
		size int
	}{
		{"bench:0", 1, 100},
		{"bench:123456", 4000000000, 100},
		{"k", 7, 1},        // grown to the minimum
		{"k", 7, 1 << 20},  // largest memcached item
		{"a:b:c", 12, 200}, // colons in the key
	} {
		v := appendValue(nil, []byte(tc.key), 0xdeadbeef, tc.ver, tc.size)
		if want := max(tc.size, minValueSize(len(tc.key), tc.ver)); len(v) != want {
			t.Errorf("%s v%d: %d bytes, want %d", tc.key, tc.ver, len(v), want)
		}
		if err := checkValue([]byte(tc.key), v, 0xdeadbeef, tc.ver); err != nil {
			t.Errorf("%s v%d: own value rejected: %v", tc.key, tc.ver, err)
		}
	}
}

func TestValueCheckCatches(t *testing.T) {
	key := []byte("bench:42")
	const run = 0x01020304
	good := appendValue(nil, key, run, 5, 100)
	rng := rand.New(rand.NewPCG(1, 2))
	// Any single changed byte is caught.
	for i := range good {
		bad := append([]byte(nil), good...)
		bad[i] ^= byte(1 + rng.IntN(255))
		if err := checkValue(key, bad, run, 5); !errors.Is(err, errCorrupt) {
			t.Errorf("byte %d changed: got %v, want corrupt", i, err)
		}
	}
	for _, tc := range []struct {
		name   string
		key    string
		val    []byte
		run    uint32
		issued uint32
		ok     bool
	}{
		{"another key's value", "bench:43", good, run, 5, false},
		{"prefix of another key", "bench:4", good, run, 5, false},
		{"version never issued", "bench:42", good, run, 4, false},
		{"older version of this run", "bench:42", good, run, 9, true},
		{"value from an earlier run", "bench:42", good, 0x99, 0, true},
		{"truncated", "bench:42", good[:60], run, 5, false},
		{"empty", "bench:42", nil, run, 5, false},
		{"extended", "bench:42", append(append([]byte(nil), good...), 'x'), run, 5, false},
	} {
		err := checkValue([]byte(tc.key), tc.val, tc.run, tc.issued)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestHistogramPercentiles(t *testing.T) {
	// 1..100,000 µs, each once: percentile p is p% of 100 ms.
	tl := newTally()
	for i := 1; i <= 100_000; i++ {
		tl.record(time.Duration(i) * time.Microsecond)
	}
	rep := newReport(Config{Entry: EntrySpread}, phaseResult{tally: tl, elapsed: time.Second}, nil, nil)
	for _, tc := range []struct {
		name string
		got  time.Duration
		want time.Duration
	}{
		{"p50", rep.Latency.P50, 50 * time.Millisecond},
		{"p90", rep.Latency.P90, 90 * time.Millisecond},
		{"p99", rep.Latency.P99, 99 * time.Millisecond},
		{"p99.9", rep.Latency.P999, 99900 * time.Microsecond},
		{"max", rep.Latency.Max, 100 * time.Millisecond},
		{"mean", rep.Latency.Mean, 50 * time.Millisecond},
	} {
		// Three significant digits: within 0.1%.
		if d := float64(tc.got-tc.want) / float64(tc.want); d > 0.001 || d < -0.001 {
			t.Errorf("%s = %v, want %v ± 0.1%%", tc.name, tc.got, tc.want)
		}
	}
	if n := rep.Latency.Count; n != 100_000 {
		t.Errorf("count %d", n)
	}
	if got := len(rep.Latency.Percentiles); got != len(spectrum) {
		t.Errorf("%d spectrum points, want %d", got, len(spectrum))
	}

	// Out-of-range values are clamped, not dropped.
	tl = newTally()
	tl.record(0)
	tl.record(2 * time.Hour)
	if tl.hist.TotalCount() != 2 || tl.hist.Max() < int64(time.Hour)*999/1000 {
		t.Errorf("clamping: count %d max %d", tl.hist.TotalCount(), tl.hist.Max())
	}
}
