package server

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"spillway/protocol"
)

// spillway_request_duration_seconds, kept without bouncing cache lines
// between cores. A Prometheus histogram's Observe makes three atomic
// updates (a count, a bucket, a compare-and-swap loop on the sum) to
// memory every core shares: at pipeline depth 16 that, with the two clock
// reads around each request, was 9 % of a node's CPU. Here a connection
// adds each request's time to a few pending (command, bucket) tallies of
// its own and hands them to the node's totals when it flushes its other
// counters (flushStats: when it has answered everything the client sent),
// so a batch of pipelined gets costs a couple of atomic adds; /metrics
// reads the totals (latencyCollector).

// latencyBounds are the buckets' upper bounds: 5 µs × 4^i, to 1.3 s.
var latencyBounds = prometheus.ExponentialBuckets(5e-6, 4, numLatencyBounds)

// latencyBoundsNs are latencyBounds in nanoseconds.
var latencyBoundsNs = func() (b [numLatencyBounds]int64) {
	for i, s := range latencyBounds {
		b[i] = int64(s * 1e9)
	}
	return b
}()

const (
	numLatencyBounds = 10
	// numLatencyCmds is how many commands are timed: every command the
	// parser knows, from protocol.CmdGet on.
	numLatencyCmds = int(protocol.CmdMetaDebug) + 1
	// numLatencyBuckets counts the buckets and the one past the last
	// bound (+Inf).
	numLatencyBuckets = numLatencyBounds + 1
	// pendingLatencies is how many (command, bucket) tallies a connection
	// keeps before it hands them over: a batch rarely has more.
	pendingLatencies = 4
)

// latencyTotals are a node's counts; safe for concurrent use.
type latencyTotals struct {
	counts [numLatencyCmds][numLatencyBuckets]atomic.Uint64
	sumNs  [numLatencyCmds]atomic.Uint64
}

// latencyTally is a run of requests of one command in one bucket.
type latencyTally struct {
	cmd, bucket uint8
	n           uint32
	ns          int64
}

// pendingLatency is a connection's tallies not yet in the node's totals;
// not safe for concurrent use.
type pendingLatency struct {
	tallies [pendingLatencies]latencyTally
	n       int
}

// latencyBucket is the bucket a duration falls in.
func latencyBucket(ns int64) uint8 {
	for i, b := range latencyBoundsNs {
		if ns <= b {
			return uint8(i)
		}
	}
	return numLatencyBounds
}

// add counts one request of cmd that took ns, handing the tallies to t
// first if there is no room for a new one.
func (p *pendingLatency) add(t *latencyTotals, cmd protocol.Command, ns int64) {
	if int(cmd) >= numLatencyCmds || cmd < protocol.CmdGet {
		return
	}
	b := latencyBucket(ns)
	for i := range p.n {
		if x := &p.tallies[i]; x.cmd == uint8(cmd) && x.bucket == b {
			x.n++
			x.ns += ns
			return
		}
	}
	if p.n == pendingLatencies {
		p.flush(t)
	}
	p.tallies[p.n] = latencyTally{cmd: uint8(cmd), bucket: b, n: 1, ns: ns}
	p.n++
}

// flush adds the pending tallies to t.
func (p *pendingLatency) flush(t *latencyTotals) {
	for _, x := range p.tallies[:p.n] {
		t.counts[x.cmd][x.bucket].Add(uint64(x.n))
		t.sumNs[x.cmd].Add(uint64(x.ns))
	}
	p.n = 0
}

// observe counts a request of cmd that started at start and whose reply
// is buffered now, and returns now: the start of a request pipelined
// behind it (serve).
func (c *conn) observe(cmd protocol.Command, start monotime) monotime {
	now := c.srv.monoNow()
	c.latency.add(&c.srv.latencies, cmd, int64(now-start))
	return now
}

// monotime is a reading of the monotonic clock (monoNow): the time since
// the server's clockBase. A request's latency needs only that clock, and
// reading it alone (time.Since of a time that has a monotonic reading)
// costs about two thirds of time.Now, which reads the wall clock too: 24
// against 38 ns here, where a request at pipeline 16 costs about 1.2 µs.
// The base is the server's, not the process's, so that a test's fake
// clock (testing/synctest) is read against a base of its own.
type monotime time.Duration

func (s *Server) monoNow() monotime { return monotime(time.Since(s.clockBase)) }

// deadline is the time of the reading m.
func (s *Server) deadline(m monotime) time.Time { return s.clockBase.Add(time.Duration(m)) }

// latencyCollector exports latencyTotals as spillway_request_duration_seconds.
type latencyCollector struct {
	t    *latencyTotals
	desc *prometheus.Desc
}

func newLatencyCollector(t *latencyTotals) latencyCollector {
	return latencyCollector{t: t, desc: prometheus.NewDesc("spillway_request_duration_seconds",
		"Time from a request's parse to its reply being buffered, by command (forwarding and fills included). A connection hands its counts over when it has answered all it was sent.",
		[]string{"command"}, nil)}
}

// Describe implements prometheus.Collector.
func (l latencyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- l.desc }

// Collect implements prometheus.Collector: one histogram per command,
// every command the parser knows, as before (a series that exists from
// the start rates from zero).
func (l latencyCollector) Collect(ch chan<- prometheus.Metric) {
	for c := protocol.CmdGet; int(c) < numLatencyCmds; c++ {
		buckets := make(map[float64]uint64, numLatencyBounds)
		var n uint64
		for i, bound := range latencyBounds {
			n += l.t.counts[c][i].Load()
			buckets[bound] = n
		}
		n += l.t.counts[c][numLatencyBounds].Load()
		sum := float64(l.t.sumNs[c].Load()) / 1e9
		ch <- prometheus.MustNewConstHistogram(l.desc, n, sum, buckets, c.String())
	}
}
