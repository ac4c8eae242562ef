package server

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"spillway/store"
)

// statOf returns the value of the stat named name in the "stats" of the
// node at addr.
func statOf(t *testing.T, addr, name string) string {
	t.Helper()
	c := dialRaw(t, addr)
	c.send("stats\r\n")
	got := ""
	for l := c.line(); l != "END"; l = c.line() {
		if f := strings.Fields(l); len(f) == 3 && f[1] == name {
			got = f[2]
		}
	}
	if got == "" {
		t.Fatalf("stats shows no %s", name)
	}
	return got
}

// TestStatLinesShown checks that "stats" shows exactly the named
// statLines, in their order, and /metrics every one with a Prometheus name,
// with its help and type.
func TestStatLinesShown(t *testing.T) {
	addr, srv := startServer(t, Config{})
	c := dialRaw(t, addr)
	c.send("stats\r\n")
	var got []string
	for l := c.line(); l != "END"; l = c.line() {
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "STAT" {
			t.Fatalf("stats line %q", l)
		}
		got = append(got, f[1])
	}
	var want []string
	for _, l := range statLines {
		if l.name != "" {
			want = append(want, l.name)
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("stats shows\n%v\nwant\n%v", got, want)
	}

	rec := httptest.NewRecorder()
	srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	m := string(body)
	for _, l := range statLines {
		if l.prom == "" {
			continue
		}
		typ := "gauge"
		if l.kind == kindCounter {
			typ = "counter"
		}
		for _, want := range []string{
			"# HELP " + l.prom + " " + l.help + "\n",
			"# TYPE " + l.prom + " " + typ + "\n",
			"\n" + l.prom + " ",
		} {
			if !strings.Contains(m, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	}
}

// TestStatCountersWired checks that every counter has one statLine, both
// in "stats" and on /metrics, that shows it.
func TestStatCountersWired(t *testing.T) {
	// With an origin the node is routed, so served is its own counter.
	_, srv := startServer(t, Config{Origin: OriginFunc(func(context.Context, string) (store.Item, error) {
		return store.Item{}, ErrOriginMiss
	})})
	v := srv.statsView()
	for i := range v.t {
		v.t[i] = 1000 + uint64(i)
	}
	for id := range numStats {
		var lines []string
		for _, l := range statLines {
			if l.kind == kindCounter && l.value(v) == v.t[id] {
				lines = append(lines, l.name)
				if l.name == "" || l.prom == "" {
					t.Errorf("counter %d: line %q/%q is not both in stats and /metrics", id, l.name, l.prom)
				}
			}
		}
		if len(lines) != 1 {
			t.Errorf("counter %d is shown by %d lines %q, want 1", id, len(lines), lines)
		}
	}
}

// TestStatsReset checks that "stats reset" zeroes memcached's counters and
// the connection counts, and leaves Spillway's own.
func TestStatsReset(t *testing.T) {
	addr, srv := startServer(t, Config{})
	c := dialRaw(t, addr)
	c.send("mn\r\n")
	c.expect("MN\r\n")
	for i := range srv.counters {
		srv.counters[i].Store(7)
	}
	c.send("stats reset\r\n")
	c.expect("RESET\r\n")
	for _, id := range []stat{statCmdGet, statCmdMeta, statCasBadval, ctrTotalConns, ctrRejectedConns} {
		if got := srv.counters[id].Load(); got != 0 {
			t.Errorf("counter %d = %d after reset, want 0", id, got)
		}
	}
	for _, id := range []stat{ctrServed, ctrForwarded, ctrLostInvalidations, ctrRefusedWrites} {
		if got := srv.counters[id].Load(); got != 7 {
			t.Errorf("counter %d = %d after reset, want 7 (kept)", id, got)
		}
	}
}
