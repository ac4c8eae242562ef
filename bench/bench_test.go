package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"spillway/internal/memcachedtest"
)

func TestRunAgainstFake(t *testing.T) {
	f := newFakeServer(t, func(f *fakeServer) { f.cluster = true })
	var progress bytes.Buffer
	cfg := Config{
		Servers:  []string{f.addr()},
		Conns:    4,
		Pipeline: 8,
		Requests: 2000,
		Keys:     500,
		Zipf:     0.99,
		Prefill:  true,
		Seed:     1,
		Progress: &progress,
	}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Ops != 2000 || rep.ErrorCount != 0 {
		t.Fatalf("ops %d errors %v, want 2000 and none", rep.Ops, rep.Errors)
	}
	if rep.Hits != rep.Gets || rep.HitRatio != 1 {
		t.Errorf("prefilled run: %d hits of %d gets", rep.Hits, rep.Gets)
	}
	if rep.Gets < 1600 || rep.Sets < 100 {
		t.Errorf("9:1 mix gave %d gets, %d sets", rep.Gets, rep.Sets)
	}
	if rep.Latency.Count != 2000 || rep.Latency.P50 <= 0 || rep.Latency.Max < rep.Latency.P99 {
		t.Errorf("latency %+v", rep.Latency)
	}
	s := rep.Servers[0]
	if s.Err != "" || s.CmdGet != uint64(rep.Gets) || s.CmdSet != uint64(rep.Sets) {
		t.Errorf("server stats diff %+v, want cmd_get %d cmd_set %d", s, rep.Gets, rep.Sets)
	}
	if !s.HasCluster || s.Requests != s.Served || s.SpilledServed != s.Served/4 || s.OriginFetches != 0 {
		t.Errorf("cluster counters %+v", s)
	}
	// The fake's "CPU" is one second per request: ops per CPU-second is ~1.
	if !s.HasCPU || rep.Load.OpsPerServerCPU < 0.9 || rep.Load.OpsPerServerCPU > 1.1 {
		t.Errorf("cpu %+v load %+v", s, rep.Load)
	}
	if rep.Load.MaxMean != 1 || rep.Load.HottestShare != 1 {
		t.Errorf("one server: load %+v", rep.Load)
	}
	if !strings.Contains(progress.String(), "ops/s") || !strings.HasSuffix(progress.String(), "\n") {
		t.Errorf("progress line %q", progress.String())
	}
	if len(rep.Throughput) == 0 {
		t.Error("no throughput samples")
	}
	var sum int64
	for _, smp := range rep.Throughput {
		sum += smp.Ops
	}
	if sum != 2000 {
		t.Errorf("throughput samples add to %d, want 2000", sum)
	}
	checkRenders(t, rep)
}

func checkRenders(t *testing.T, rep *Report) {
	t.Helper()
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatalf("JSON does not read back: %v", err)
	}
	if back.Ops != rep.Ops || back.Latency.P99 != rep.Latency.P99 || len(back.Servers) != len(rep.Servers) {
		t.Errorf("JSON round trip lost data")
	}
	buf.Reset()
	if err := rep.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"throughput", "p99", "hit ratio", "max/mean"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, buf.String())
		}
	}
	checkHTML(t, rep)
}

func TestCorruptValueFailsRun(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt func(key string, v []byte) []byte
	}{
		{"flipped byte", func(_ string, v []byte) []byte { v[len(v)/2] ^= 0x20; return v }},
		{"truncated", func(_ string, v []byte) []byte { return v[:len(v)-1] }},
		{"another key's value", func(key string, v []byte) []byte {
			return appendValue(nil, []byte(key+"0"), 1, 1, len(v))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeServer(t, func(f *fakeServer) { f.corrupt = tc.corrupt })
			rep, err := Run(context.Background(), Config{
				Servers: []string{f.addr()}, Conns: 2, Requests: 200, Keys: 20, Prefill: true, Seed: 3,
			})
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
			if rep == nil || rep.Errors[kindCorrupt] == 0 {
				t.Fatalf("report %+v", rep)
			}
			if rep.Hits != 0 {
				t.Errorf("%d corrupted gets counted as hits", rep.Hits)
			}
		})
	}
}

func TestRateModeIssuesScheduledCount(t *testing.T) {
	f := newFakeServer(t, nil)
	for _, tc := range []struct {
		name string
		cfg  Config
		want int64
	}{
		// Rate*Duration requests are scheduled, split across workers.
		{"duration", Config{Rate: 4000, Duration: 250 * time.Millisecond, Conns: 3}, 1000},
		{"requests", Config{Rate: 20000, Requests: 777, Conns: 4, Pipeline: 4}, 777},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Servers, cfg.Keys, cfg.Seed = []string{f.addr()}, 100, 5
			rep, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Ops != tc.want || rep.ErrorCount != 0 {
				t.Fatalf("%d ops, errors %v; want exactly %d", rep.Ops, rep.Errors, tc.want)
			}
			// The last request is not sent before its scheduled time, so
			// the run cannot be faster than the rate allows.
			if minimum := float64(tc.want-1) / cfg.Rate; rep.Elapsed < minimum {
				t.Errorf("elapsed %.3fs, faster than the rate allows (%.3fs)", rep.Elapsed, minimum)
			}
		})
	}
}

func TestHashedEntryRoutesByKey(t *testing.T) {
	fs := []*fakeServer{newFakeServer(t, nil), newFakeServer(t, nil), newFakeServer(t, nil)}
	addrs := []string{fs[0].addr(), fs[1].addr(), fs[2].addr()}
	rep, err := Run(context.Background(), Config{
		Servers: addrs, Entry: EntryHashed, Conns: 2, Pipeline: 4, Requests: 1500, Keys: 300, Seed: 9,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Ops != 1500 {
		t.Fatalf("ops %d errors %v", rep.Ops, rep.Errors)
	}
	var total uint64
	for i, f := range fs {
		for k := range f.keysSeen() {
			if got := pickHashed([]byte(k), 3); got != i {
				t.Errorf("key %s went to server %d, crc32 says %d", k, i, got)
			}
		}
		total += rep.Servers[i].Requests
	}
	if total != 1500 {
		t.Errorf("servers saw %d requests, want 1500", total)
	}
	checkEntryGets(t, rep)
}

// checkEntryGets: the gets the bench counts per server add up to its gets,
// and each is what the server itself counted (these servers forward
// nothing, so every get they saw came from the bench).
func checkEntryGets(t *testing.T, rep *Report) {
	t.Helper()
	var sum uint64
	for i, s := range rep.Servers {
		sum += s.EntryGets
		if s.EntryGets != s.CmdGet {
			t.Errorf("server %d: entry gets %d, its cmd_get %d", i, s.EntryGets, s.CmdGet)
		}
	}
	if sum != uint64(rep.Gets) {
		t.Errorf("entry gets add up to %d, the bench did %d gets", sum, rep.Gets)
	}
}

func TestSpreadEntryUsesEveryServer(t *testing.T) {
	fs := []*fakeServer{newFakeServer(t, nil), newFakeServer(t, nil)}
	rep, err := Run(context.Background(), Config{
		Servers: []string{fs[0].addr(), fs[1].addr()}, Conns: 4, Requests: 400, Keys: 50, Seed: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range rep.Servers {
		if s.Requests == 0 {
			t.Errorf("server %d got no requests: %+v", i, s)
		}
	}
	if rep.Load.MaxMean < 1 || rep.Load.MaxMean > 2 {
		t.Errorf("max/mean %v", rep.Load.MaxMean)
	}
	checkEntryGets(t, rep)
}

// TestObserveSeesEveryMeasuredRequest checks Config.Observe against the
// report: one call per measured request (none for the prefill), with the
// entry server, the key and the outcome the report counted.
func TestObserveSeesEveryMeasuredRequest(t *testing.T) {
	fs := []*fakeServer{newFakeServer(t, nil), newFakeServer(t, nil)}
	var mu sync.Mutex
	var gets, sets, hits, atServer1 int64
	began := time.Now()
	rep, err := Run(context.Background(), Config{
		Servers: []string{fs[0].addr(), fs[1].addr()}, Conns: 4, Requests: 400, Keys: 50, Seed: 2, Prefill: true,
		Observe: func(o Observation) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case o.Set && o.Result == "":
				sets++
			case !o.Set && (o.Result == "hit" || o.Result == "miss"):
				gets++
				if o.Result == "hit" {
					hits++
				}
			default:
				t.Errorf("observation %+v: unexpected result", o)
			}
			if o.Server == 1 {
				atServer1++
			}
			if o.Key < 0 || o.Key >= 50 || o.Start.Before(began) || o.Latency <= 0 {
				t.Errorf("observation %+v", o)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if gets != rep.Gets || sets != rep.Sets || hits != rep.Hits || gets+sets != 400 {
		t.Errorf("observed %d gets (%d hits) %d sets; report %d (%d) %d", gets, hits, sets, rep.Gets, rep.Hits, rep.Sets)
	}
	if atServer1 == 0 || atServer1 == 400 {
		t.Errorf("%d of 400 observed at server 1, want some", atServer1)
	}
}

func TestTimeoutsAreCounted(t *testing.T) {
	f := newFakeServer(t, func(f *fakeServer) { f.silent = true })
	rep, err := Run(context.Background(), Config{
		Servers: []string{f.addr()}, Conns: 1, Requests: 3, Timeout: 100 * time.Millisecond, Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors[kindTimeout] != 3 || rep.Ops != 0 {
		t.Errorf("errors %v ops %d, want 3 timeouts", rep.Errors, rep.Ops)
	}
	if rep.Servers[0].Err == "" {
		t.Error("stats from a silent server did not fail")
	}
}

func TestCancelStopsRun(t *testing.T) {
	f := newFakeServer(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var p cancelAfter
	p.n, p.cancel = 2, cancel
	rep, err := Run(ctx, Config{
		Servers: []string{f.addr()}, Conns: 2, Duration: time.Hour, Interval: 10 * time.Millisecond, Progress: &p,
	})
	if !errors.Is(err, context.Canceled) || rep == nil {
		t.Fatalf("err %v report %v", err, rep)
	}
	if rep.ErrorCount != 0 {
		t.Errorf("cancellation counted as errors: %v", rep.Errors)
	}
}

// cancelAfter cancels after n progress writes: the run is known to be
// under way without sleeping.
type cancelAfter struct {
	n      int
	cancel func()
}

func (c *cancelAfter) Write(b []byte) (int, error) {
	if c.n--; c.n == 0 {
		c.cancel()
	}
	return len(b), nil
}

func TestUnreachableServerFailsFast(t *testing.T) {
	f := newFakeServer(t, nil)
	addr := f.addr()
	f.close()
	if _, err := Run(context.Background(), Config{Servers: []string{addr}, Requests: 1}); err == nil {
		t.Fatal("no error for a closed port")
	}
}

func TestConfigValidation(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Servers: []string{"a"}, Entry: "random"},
		{Servers: []string{"a"}, Zipf: -1},
		{Servers: []string{"a"}, HotShare: 2},
		{Servers: []string{"a"}, Zipf: math.Inf(1)}, // would never draw a key
		{Servers: []string{"a"}, Zipf: math.NaN()},
		{Servers: []string{"a"}, Rate: math.Inf(1)},
		{Servers: []string{"a"}, Rate: 1, Duration: time.Millisecond},
		{Servers: []string{"a"}, ValueSize: Size{1, 2 << 20}},
	} {
		if _, err := Run(context.Background(), cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

func TestTerminalProgress(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if TerminalProgress(w) != nil {
		t.Error("a pipe is not a terminal")
	}
	if TerminalProgress(nil) != nil {
		t.Error("nil file")
	}
}

func TestCompareText(t *testing.T) {
	f := newFakeServer(t, nil)
	rep, err := Run(context.Background(), Config{Servers: []string{f.addr()}, Conns: 2, Requests: 100, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := CompareText(&buf, []string{"epsilon=0.25", "epsilon=inf"}, []*Report{rep, nil}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "max/mean") || !strings.Contains(lines[1], "epsilon=0.25") ||
		!strings.Contains(lines[2], "epsilon=inf") {
		t.Errorf("compare table:\n%s", buf.String())
	}
}

func TestRunAgainstMemcached(t *testing.T) {
	addr := memcachedtest.Start(t)
	rep, err := Run(context.Background(), Config{
		Servers:   []string{addr},
		Conns:     8,
		Pipeline:  8,
		Requests:  2000,
		Keys:      1000,
		Zipf:      0.99,
		ValueSize: Size{50, 300},
		Prefill:   true,
		Seed:      11,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Ops != 2000 || rep.ErrorCount != 0 || rep.HitRatio != 1 {
		t.Fatalf("ops %d errors %v hit ratio %v", rep.Ops, rep.Errors, rep.HitRatio)
	}
	s := rep.Servers[0]
	if s.Err != "" || s.CmdGet != uint64(rep.Gets) || s.CmdSet != uint64(rep.Sets) || s.HasCluster || !s.HasCPU {
		t.Errorf("memcached stats diff %+v (gets %d sets %d)", s, rep.Gets, rep.Sets)
	}
	checkRenders(t, rep)
}
