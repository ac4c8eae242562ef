package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	// Fields 14 and 15 (utime, stime) are 250 and 50 ticks: 3 s.
	const rest = " S 1 2 3 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 500 100000 200 18446744073709551615"
	for _, tc := range []struct {
		name, stat string
		want       time.Duration
		ok         bool
	}{
		{"plain", "1234 (memcached)" + rest, 3 * time.Second, true},
		{"comm-with-spaces-and-parens", "1234 (a (b) c)" + rest, 3 * time.Second, true},
		{"comm-looks-like-fields", "1234 (1 2 3 4 5 6 7 8 9 10 11 12 13)" + rest, 3 * time.Second, true},
		{"no-paren", "1234 memcached S 1", 0, false},
		{"short", "1234 (memcached) S 1 2 3", 0, false},
		{"not-a-number", "1234 (memcached) S 1 2 3 0 -1 4194560 100 0 0 0 x 50 0", 0, false},
	} {
		got, err := parseProcStat([]byte(tc.stat))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%s: got %v, %v; want %v (ok %v)", tc.name, got, err, tc.want, tc.ok)
		}
	}
}

func TestParseMachineStat(t *testing.T) {
	// busy: user 100 + nice 10 + system 40 + irq 5 + softirq 3 + steal 2 = 160 ticks
	got, err := parseMachineStat([]byte("cpu  100 10 40 9000 30 5 3 2 7 0\ncpu0 50 5 20 4500 15 2 1 1 3 0\n"))
	if err != nil || got != 1600*time.Millisecond {
		t.Errorf("got %v, %v; want 1.6s", got, err)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8\n", "cpu 1 2 3\n", "cpu 1 2 3 x 5 6 7 8\n"} {
		if _, err := parseMachineStat([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{7}, 7},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{5, 5, 1}, 5},
	} {
		in := append([]float64(nil), tc.xs...)
		if got := median(tc.xs); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", in, got, tc.want)
		}
		if !slices.Equal(in, tc.xs) {
			t.Errorf("median reordered its input: %v, was %v", tc.xs, in)
		}
	}
}

func TestCommas(t *testing.T) {
	for x, want := range map[float64]string{
		0: "0", 999: "999", 1000: "1,000", 80783.4: "80,783", 80783.5: "80,784",
		1234567: "1,234,567", -1234.4: "-1,234", 100000: "100,000",
	} {
		if got := commas(x); got != want {
			t.Errorf("commas(%v) = %q, want %q", x, got, want)
		}
	}
}

func TestRatio(t *testing.T) {
	for _, tc := range []struct {
		a, b float64
		want string
	}{
		{80783, 59937, "0.74×"}, {100, 300, "3.00×"}, {0, 5, "—"}, {5, 0, "—"},
	} {
		if got := ratio(tc.a, tc.b); got != tc.want {
			t.Errorf("ratio(%v, %v) = %q, want %q", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestWriteTable(t *testing.T) {
	var b strings.Builder
	writeTable(&b, []string{"scenario", "ratio"}, [][]string{{"a | b", "0.74×"}, {"c", "—"}})
	want := "| scenario | ratio |\n|---|---|\n| a \\| b | 0.74× |\n| c | — |\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestParseMemcaslap(t *testing.T) {
	out := "servers: 127.0.0.1:11211\nthreads count: 2\ncmd_get: 541970\n\n" +
		"Run time: 3.0s Ops: 602216 TPS: 200128 Net_rate: 47.4M/s\n"
	ops, secs, err := parseMemcaslap(out)
	if err != nil || ops != 602216 || secs != 3.0 {
		t.Errorf("got %d ops in %vs, %v", ops, secs, err)
	}
	for _, bad := range []string{"", "Please specify the item window size. :-)\n", "Run time: 0.0s Ops: 5 TPS: 0 Net_rate: 0M/s\n"} {
		if _, _, err := parseMemcaslap(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestNodeRequests(t *testing.T) {
	before := map[string]string{"cmd_get": "100", "cmd_set": "10", "served": "60", "forwarded_writes": "4"}
	// 1000 gets and 100 sets more: 300 of the gets were forwarded to this
	// node by others (counted in cmd_get, and in served), 200 of its
	// clients' gets it forwarded elsewhere (in cmd_get, not in served);
	// 40 of the sets came from other nodes, 30 of its clients' it sent on.
	after := map[string]string{"cmd_get": "1100", "cmd_set": "110", "served": "860", "forwarded_writes": "34"}
	ans, cmd, err := nodeRequests(before, after, true)
	if err != nil || ans != 800+100-30 || cmd != 1100 {
		t.Errorf("spillway: answered %v, cmd %v, %v; want 870, 1100", ans, cmd, err)
	}
	ans, cmd, err = nodeRequests(before, after, false)
	if err != nil || ans != 1100 || cmd != 1100 {
		t.Errorf("memcached: answered %v, cmd %v, %v; want 1100, 1100", ans, cmd, err)
	}
	if _, _, err := nodeRequests(map[string]string{"cmd_get": "1"}, after, false); err == nil {
		t.Error("a missing stat: no error")
	}
}

func TestMaxOverMean(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{10, 10, 10}, 1}, {[]float64{30, 0, 0}, 3}, {[]float64{20, 10, 0}, 2}, {[]float64{0, 0}, 0},
	} {
		if got := maxOverMean(tc.xs); got != tc.want {
			t.Errorf("maxOverMean(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}

func TestParsePerfCount(t *testing.T) {
	const ev = "raw_syscalls:sys_enter"
	for _, tc := range []struct {
		name, out string
		want      int64
		ok        bool
	}{
		{"count", "736559,,raw_syscalls:sys_enter,4001234567,100.00,,\n", 736559, true},
		{"after-other-lines", "# started on Sat Dec  5\n\n582,,raw_syscalls:sys_enter,11256942,100.00,,\n", 582, true},
		{"not-supported", "<not supported>,,raw_syscalls:sys_enter,0,100.00,,\n", 0, false},
		{"not-counted", "<not counted>,,raw_syscalls:sys_enter,0,0.00,,\n", 0, false},
		{"other-event", "10,,context-switches,1,100.00,,\n", 0, false},
		{"error-text", "Error: No permission to enable raw_syscalls:sys_enter event.\n", 0, false},
		{"empty", "", 0, false},
	} {
		got, err := parsePerfCount(tc.out, ev)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%s: got %d, %v; want %d (ok %v)", tc.name, got, err, tc.want, tc.ok)
		}
	}
}

func TestParseSwitches(t *testing.T) {
	const head = "Name:\tspillway\nState:\tS (sleeping)\nThreads:\t11\n"
	for _, tc := range []struct {
		name, status string
		want         int64
		ok           bool
	}{
		{"both", head + "voluntary_ctxt_switches:\t33354\nnonvoluntary_ctxt_switches:\t1017\n", 34371, true},
		{"no-trailing-newline", head + "voluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t49", 61, true},
		{"one-missing", head + "voluntary_ctxt_switches:\t12\n", 0, false},
		{"none", head, 0, false},
		{"not-a-number", head + "voluntary_ctxt_switches:\tmany\nnonvoluntary_ctxt_switches:\t49\n", 0, false},
	} {
		got, err := parseSwitches([]byte(tc.status))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%s: got %d, %v; want %d (ok %v)", tc.name, got, err, tc.want, tc.ok)
		}
	}
}

// Every scenario has a row in the report: a renamed or added scenario
// that the report does not know would otherwise run and print nothing.
func TestReportHasEveryScenario(t *testing.T) {
	st := &setup{name: "a setup"}
	all := scenarios(st, st, st, st, st, st)
	res := make(results)
	// A busiest/mean no other cell has: 9.01, 9.02, ...
	busiest := func(i int) float64 { return 9.01 + 0.01*float64(i) }
	for i, sc := range all {
		v := float64(100_003 + 10*i) // a figure no other cell has
		res[sc.name] = &[2][]sample{{{opsPerCPU: 1, opsPerSec: 1, p50: 1, p99: 1}}, {{opsPerCPU: v, opsPerSec: v, p50: v, p99: v, busiest: busiest(i)}}}
	}
	var out strings.Builder
	printReport(&out, res, all, time.Second)
	// The tables of figures, not the cells' details that follow them.
	tables, _, _ := strings.Cut(out.String(), "### Every cell")
	for i, sc := range all {
		v := float64(100_003 + 10*i)
		if !strings.Contains(tables, commas(v)) && !strings.Contains(tables, fmt.Sprintf("%.0f", v)) {
			t.Errorf("scenario %s has no row in the report", sc.name)
		}
		// Every mix of the cluster pair shows how evenly it spread: the
		// goal's bound on the busiest node holds at every mix or not.
		if sc.name == "cluster" || strings.HasPrefix(sc.name, "cluster-") {
			if b := fmt.Sprintf("%.2f", busiest(i)); !strings.Contains(tables, "| "+b+" |") {
				t.Errorf("scenario %s has no busiest/mean row in the report (want %s)", sc.name, b)
			}
		}
	}
}
