package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"spillway/protocol"
)

func TestLatencyBucket(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want uint8
	}{
		{0, 0},
		{5 * time.Microsecond, 0},
		{5*time.Microsecond + 1, 1},
		{20 * time.Microsecond, 1},
		{80 * time.Microsecond, 2},
		{time.Millisecond, 4},
		{1310720 * time.Microsecond, 9},
		{2 * time.Second, 10}, // +Inf
	} {
		if got := latencyBucket(int64(tc.d)); got != tc.want {
			t.Errorf("latencyBucket(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// histogram gathers spillway_request_duration_seconds for cmd from t.
func histogram(t *testing.T, totals *latencyTotals, cmd string) *dto.Histogram {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(newLatencyCollector(totals))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == cmd {
				return m.GetHistogram()
			}
		}
	}
	t.Fatalf("no histogram for %s", cmd)
	return nil
}

// TestPendingLatency: a connection's tallies reach the totals when it
// flushes, or when a new (command, bucket) finds no room; the exported
// histogram is cumulative, with the sum in seconds.
func TestPendingLatency(t *testing.T) {
	var totals latencyTotals
	var p pendingLatency
	obs := []struct {
		cmd protocol.Command
		d   time.Duration
	}{
		{protocol.CmdGet, 3 * time.Microsecond},
		{protocol.CmdGet, 4 * time.Microsecond},
		{protocol.CmdGet, 10 * time.Microsecond},
		{protocol.CmdSet, 10 * time.Microsecond},
		{protocol.CmdGet, time.Millisecond},
		{protocol.CmdGet, 3 * time.Second},
		{protocol.CmdGet, 2 * time.Microsecond},
	}
	for i, o := range obs {
		p.add(&totals, o.cmd, int64(o.d))
		if i == 4 && totals.counts[protocol.CmdGet][0].Load() != 0 {
			t.Fatal("tallies handed over while there was room")
		}
	}
	// The sixth observation found four tallies: they went, it stayed.
	if got := totals.counts[protocol.CmdGet][0].Load(); got != 2 {
		t.Fatalf("get's first bucket before the flush: %d, want 2", got)
	}
	p.flush(&totals)
	if p.n != 0 {
		t.Fatalf("%d tallies pending after flush", p.n)
	}
	h := histogram(t, &totals, "get")
	if h.GetSampleCount() != 6 {
		t.Errorf("get count %d, want 6", h.GetSampleCount())
	}
	wantSum := (3 + 4 + 10 + 1000 + 3e6 + 2) * 1e-6
	if d := h.GetSampleSum() - wantSum; d > 1e-9 || d < -1e-9 {
		t.Errorf("get sum %v, want %v", h.GetSampleSum(), wantSum)
	}
	var cum []string
	for _, b := range h.GetBucket() {
		cum = append(cum, fmt.Sprint(b.GetCumulativeCount()))
	}
	if got, want := strings.Join(cum, " "), "3 4 4 4 5 5 5 5 5 5"; got != want {
		t.Errorf("get's cumulative buckets %s, want %s", got, want)
	}
	if h := histogram(t, &totals, "set"); h.GetSampleCount() != 1 {
		t.Errorf("set count %d, want 1", h.GetSampleCount())
	}
	if h := histogram(t, &totals, "mg"); h.GetSampleCount() != 0 {
		t.Errorf("mg count %d, want 0", h.GetSampleCount())
	}
}

// TestLatencyOverSocket: every request a client sends, pipelined or not,
// is counted once in /metrics by the time its replies are back.
func TestLatencyOverSocket(t *testing.T) {
	addr, srv := startServer(t, Config{})
	c := dialRaw(t, addr)
	c.send("set k 0 0 1\r\nv\r\n")
	c.expect("STORED\r\n")
	c.send(strings.Repeat("get k\r\n", 50))
	c.expect(strings.Repeat("VALUE k 0 1\r\nv\r\nEND\r\n", 50))
	c.send("get k\r\n")
	c.expect("VALUE k 0 1\r\nv\r\nEND\r\n")
	if h := histogram(t, &srv.latencies, "get"); h.GetSampleCount() != 51 {
		t.Errorf("get count %d, want 51", h.GetSampleCount())
	}
	if h := histogram(t, &srv.latencies, "set"); h.GetSampleCount() != 1 {
		t.Errorf("set count %d, want 1", h.GetSampleCount())
	}
}
