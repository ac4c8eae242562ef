package server

import (
	"runtime"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"spillway/protocol"
	"spillway/store"
)

// stat names one of the node's counters: an index into totals (the
// node's) and, for the first numConnStats, into counters (a connection's).
// Where a counter is declared decides how it is counted and whether
// "stats reset" zeroes it; what "stats" and /metrics call it is in
// statLines. Adding a counter is a constant here and a line there.
type stat uint8

// Counted by each connection in its own counters and added to the node's
// once per batch (flushStats). "stats reset" zeroes them.
const (
	statCmdGet stat = iota
	statCmdSet
	statCmdFlush
	statCmdTouch
	statCmdMeta
	statGetHits
	statGetMisses
	statDeleteHits
	statDeleteMisses
	statIncrHits
	statIncrMisses
	statDecrHits
	statDecrMisses
	statCasHits
	statCasMisses
	statCasBadval
	statTouchHits
	statTouchMisses
	statBytesRead
	statBytesWritten

	numConnStats
)

// Counted on the node's totals directly, by whichever goroutine does the
// work (the accept loop, fills, forwards, invalidations). "stats reset"
// zeroes these, as memcached does.
const (
	ctrTotalConns stat = numConnStats + iota
	ctrRejectedConns
	ctrAuthCmds   // authentication attempts (Config.Users)
	ctrAuthErrors // failed ones

	numResetStats
)

// Spillway's own, counted on the node's totals directly. "stats reset"
// leaves them alone.
const (
	ctrServed          stat = numResetStats + iota // reads this node answered itself, whoever the entry node was
	ctrForwarded                                   // reads this entry node sent to another node
	ctrForwardedWrites                             // writes this entry node sent to the key's owner
	ctrSpilledServed                               // reads served here although another node owns the key
	ctrPeerFetches                                 // read-throughs from an owner or previous owner
	ctrPeerErrors                                  // peer requests that failed or timed out
	ctrPeerStreamed                                // peer reads the shared connections could not answer (NS): asked again on a stream
	ctrOriginFetches                               // loads from the origin
	ctrOriginErrors                                // origin loads that failed (not misses)
	ctrMerged                                      // reads that joined another's fill (singleflight)
	ctrInvalidations                               // copy invalidations sent
	// ctrLostInvalidations counts copies that may outlive a write because
	// their holder could not be told (it did not answer in time): the one
	// stated exception to coherence, bounded by the copy TTL.
	ctrLostInvalidations
	ctrRefusedWrites // writes refused here: this node does not own the key
	ctrDeclaredDead  // times this node learned the others had declared it dead (it dropped all it held)
	ctrMergeDrops    // times this node dropped all it held on meeting a member that owned keys apart from it while it did too

	numStats
)

// totals are the node's counters, indexed by stat. They are safe for
// concurrent use: add with totals[id].Add.
type totals [numStats]atomic.Uint64

// counters are a connection's own counts of the first numConnStats stats.
// They are not safe for concurrent use; flushStats hands them to the node.
type counters [numConnStats]uint64

// add adds a connection's counters to the totals and zeroes them, touching
// only the ones that moved: at pipeline depth 1 a get costs four atomic
// adds rather than a lock and twenty adds.
func (t *totals) add(c *counters) {
	for i, n := range c {
		if n != 0 {
			t[i].Add(n)
			c[i] = 0
		}
	}
}

// stats holds the node's connection count, the one figure that goes down.
type stats struct {
	currConns atomic.Int64
}

// flushStats adds the connection's counters to the server's.
func (c *conn) flushStats() {
	c.local[statBytesRead] += c.counted.read
	c.local[statBytesWritten] += c.counted.written
	c.counted.read, c.counted.written = 0, 0
	c.srv.counters.add(&c.local)
	c.latency.flush(&c.srv.latencies)
}

// resetStats answers "stats reset".
func (s *Server) resetStats() {
	for i := range numResetStats {
		s.counters[i].Store(0)
	}
}

// statKind says what a statLine holds and how /metrics exports it.
type statKind uint8

const (
	kindCounter statKind = iota // only grows (until "stats reset"): a Prometheus counter
	kindGauge                   // goes up and down: a Prometheus gauge
	kindText                    // not a number: "stats" only
)

// statLine is one line of "stats", one Prometheus series, or both.
type statLine struct {
	name string // field of "stats"; "" for a series only /metrics has
	prom string // Prometheus name; "" for a line only "stats" has
	help string // Prometheus help
	kind statKind
	// value computes the figure; text, the figure of a kindText line.
	value func(*statsView) uint64
	text  func(*statsView) string
}

// statsView is what statLines read: everything sampled once per "stats"
// or per scrape.
type statsView struct {
	s   *Server
	t   [numStats]uint64
	st  store.Stats
	now time.Time
	ru  syscall.Rusage
}

func (s *Server) statsView() *statsView {
	v := &statsView{s: s, st: s.store.Stats(), now: s.cfg.Now()}
	for i := range v.t {
		v.t[i] = s.counters[i].Load()
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &v.ru)
	return v
}

// statLines are the lines of "stats", in its order: memcached's general
// purpose fields in memcached's order, then Spillway's own; and the
// Prometheus series, some of them under other names. Clients and the
// conformance suite parse "stats": never reorder or rename a line.
var statLines = []statLine{
	infoLine("pid", func(*statsView) uint64 { return uint64(pid) }),
	infoLine("uptime", func(v *statsView) uint64 { return uint64(v.now.Sub(v.s.start) / time.Second) }),
	infoLine("time", func(v *statsView) uint64 { return uint64(v.now.Unix()) }),
	textLine("version", func(*statsView) string { return Version }),
	textLine("libevent", func(*statsView) string { return "none" }),
	infoLine("pointer_size", func(*statsView) uint64 { return strconv.IntSize }),
	textLine("rusage_user", func(v *statsView) string { return timeval(v.ru.Utime) }),
	textLine("rusage_system", func(v *statsView) string { return timeval(v.ru.Stime) }),
	infoLine("max_connections", func(v *statsView) uint64 { return uint64(v.s.cfg.MaxConns) }),
	gaugeLine("curr_connections", "spillway_curr_connections", "Open client connections.", currConns),
	counterLine(ctrTotalConns, "total_connections", "spillway_connections_total", "Client connections accepted."),
	counterLine(ctrRejectedConns, "rejected_connections", "spillway_rejected_connections_total", "Client connections refused over max_connections."),
	infoLine("connection_structures", currConns),
	counterLine(statCmdGet, "cmd_get", "spillway_cmd_get_total", "Keys asked for by get, gets, gat, gats and mg."),
	counterLine(statCmdSet, "cmd_set", "spillway_cmd_set_total", "Storage commands."),
	counterLine(statCmdFlush, "cmd_flush", "spillway_cmd_flush_total", "flush_all commands."),
	counterLine(statCmdTouch, "cmd_touch", "spillway_cmd_touch_total", "Keys touched by touch, gat, gats and mg T."),
	counterLine(statCmdMeta, "cmd_meta", "spillway_cmd_meta_total", "Meta commands."),
	counterLine(statGetHits, "get_hits", "spillway_get_hits_total", "Keys asked for and found."),
	counterLine(statGetMisses, "get_misses", "spillway_get_misses_total", "Keys asked for and not found."),
	infoLine("get_expired", func(v *statsView) uint64 { return v.st.GetExpired }),
	infoLine("get_flushed", func(v *statsView) uint64 { return v.st.GetFlushed }),
	counterLine(statDeleteMisses, "delete_misses", "spillway_delete_misses_total", "Deletes of a missing key."),
	counterLine(statDeleteHits, "delete_hits", "spillway_delete_hits_total", "Deletes of a key held."),
	counterLine(statIncrMisses, "incr_misses", "spillway_incr_misses_total", "Increments of a missing key."),
	counterLine(statIncrHits, "incr_hits", "spillway_incr_hits_total", "Increments of a key held."),
	counterLine(statDecrMisses, "decr_misses", "spillway_decr_misses_total", "Decrements of a missing key."),
	counterLine(statDecrHits, "decr_hits", "spillway_decr_hits_total", "Decrements of a key held."),
	counterLine(statCasMisses, "cas_misses", "spillway_cas_misses_total", "Compare-and-swaps of a missing key."),
	counterLine(statCasHits, "cas_hits", "spillway_cas_hits_total", "Compare-and-swaps that stored."),
	counterLine(statCasBadval, "cas_badval", "spillway_cas_badval_total", "Compare-and-swaps refused: the key changed."),
	counterLine(statTouchHits, "touch_hits", "spillway_touch_hits_total", "Touches of a key held."),
	counterLine(statTouchMisses, "touch_misses", "spillway_touch_misses_total", "Touches of a missing key."),
	counterLine(ctrAuthCmds, "auth_cmds", "spillway_auth_cmds_total", "Client authentication attempts."),
	counterLine(ctrAuthErrors, "auth_errors", "spillway_auth_errors_total", "Failed client authentication attempts."),
	counterLine(statBytesRead, "bytes_read", "spillway_bytes_read_total", "Bytes read from client connections."),
	counterLine(statBytesWritten, "bytes_written", "spillway_bytes_written_total", "Bytes written to client connections."),
	infoLine("limit_maxbytes", func(v *statsView) uint64 { return uint64(v.s.cfg.MaxBytes) }),
	infoLine("accepting_conns", func(v *statsView) uint64 { return boolUint(!v.s.closing.Load()) }),
	infoLine("threads", func(*statsView) uint64 { return uint64(runtime.GOMAXPROCS(0)) }),
	infoLine("conn_yields", zero),
	gaugeLine("bytes", "spillway_store_bytes", "Bytes counted against the memory limit.", func(v *statsView) uint64 { return uint64(v.st.Bytes) }),
	gaugeLine("curr_items", "spillway_store_items", "Items in the owned store.", func(v *statsView) uint64 { return uint64(v.st.CurrItems) }),
	infoLine("total_items", func(v *statsView) uint64 { return v.st.TotalItems }),
	infoLine("expired_unfetched", func(v *statsView) uint64 { return v.st.ExpiredUnfetched }),
	infoLine("evicted_unfetched", func(v *statsView) uint64 { return v.st.EvictedUnfetched }),
	infoLine("evicted_active", zero),
	counterFuncLine("evictions", "spillway_store_evictions_total", "Items evicted from the owned store under memory pressure.", func(v *statsView) uint64 { return v.st.Evictions }),
	infoLine("reclaimed", func(v *statsView) uint64 { return v.st.Reclaimed }),
	gaugeLine("", "spillway_go_memory_limit_bytes", "The Go runtime's soft memory limit: the part of the node's memory budget on the Go heap (README Operations, Memory), or GOMEMLIMIT.", func(*statsView) uint64 {
		return uint64(debug.SetMemoryLimit(-1))
	}),
	counterFuncLine("", "spillway_store_hits_total", "Owned-store hits.", func(v *statsView) uint64 { return v.st.Hits }),
	counterFuncLine("", "spillway_store_misses_total", "Owned-store misses.", func(v *statsView) uint64 { return v.st.Misses }),

	gaugeLine("cluster_nodes", "spillway_cluster_nodes", "Members in this node's ring.", func(v *statsView) uint64 {
		if v.s.cl == nil {
			return 1
		}
		return uint64(v.s.cl.view.Load().ring.Len())
	}),
	counterFuncLine("served", "spillway_served_total", "Reads this node answered itself, whoever the entry node was.", func(v *statsView) uint64 {
		if !v.s.routed {
			// A node with no cluster and no origin serves every read itself.
			return v.t[statCmdGet]
		}
		return v.t[ctrServed]
	}),
	counterLine(ctrForwarded, "forwarded", "spillway_forwarded_total", "Reads this entry node forwarded to another node."),
	counterLine(ctrForwardedWrites, "forwarded_writes", "spillway_forwarded_writes_total", "Writes this entry node forwarded to the key's owner."),
	counterLine(ctrSpilledServed, "spilled_served", "spillway_spilled_served_total", "Reads served here although another node owns the key."),
	counterLine(ctrPeerFetches, "peer_fetches", "spillway_peer_fetches_total", "Read-throughs from a key's owner or previous owner."),
	counterLine(ctrPeerStreamed, "peer_reads_streamed", "spillway_peer_reads_streamed_total", "Peer reads asked again on a connection of their own: the owner would have had to wait for a write round or a fill."),
	counterLine(ctrPeerErrors, "peer_errors", "spillway_peer_errors_total", "Peer requests that failed or timed out."),
	counterLine(ctrOriginFetches, "origin_fetches", "spillway_origin_fetches_total", "Loads from the origin."),
	counterLine(ctrOriginErrors, "origin_errors", "spillway_origin_errors_total", "Origin loads that failed."),
	counterLine(ctrMerged, "singleflight_merged", "spillway_singleflight_merged_total", "Reads that waited for another read's fill of the same key."),
	gaugeLine("copies", "spillway_copies", "Copies of other nodes' keys held here.", func(v *statsView) uint64 {
		if v.s.cl == nil {
			return 0
		}
		return uint64(v.s.cl.copies.Stats().CurrItems)
	}),
	counterLine(ctrInvalidations, "invalidations", "spillway_invalidations_total", "Copy invalidations sent to other nodes."),
	counterLine(ctrLostInvalidations, "lost_invalidations", "spillway_lost_invalidations_total", "Copies that may outlive a write because their holder could not be told in time (served at most until the copy TTL)."),
	counterLine(ctrRefusedWrites, "refused_writes", "spillway_refused_writes_total", "Writes refused because this node does not own the key in its view."),
	counterLine(ctrDeclaredDead, "declared_dead", "spillway_declared_dead_total", "Times this node learned the others had declared it dead, and dropped every item it held."),
	counterLine(ctrMergeDrops, "merge_drops", "spillway_merge_drops_total", "Times this node dropped every item it held on meeting a member that had owned keys in views without it while it did the same without that member."),
}

// counterLine is the line of a counter in totals.
func counterLine(id stat, name, prom, help string) statLine {
	return counterFuncLine(name, prom, help, func(v *statsView) uint64 { return v.t[id] })
}

// counterFuncLine is a figure that only grows, computed.
func counterFuncLine(name, prom, help string, f func(*statsView) uint64) statLine {
	return statLine{name, prom, help, kindCounter, f, nil}
}

// gaugeLine is a line that goes up and down, on /metrics too.
func gaugeLine(name, prom, help string, f func(*statsView) uint64) statLine {
	return statLine{name, prom, help, kindGauge, f, nil}
}

// infoLine is a number only "stats" shows.
func infoLine(name string, f func(*statsView) uint64) statLine {
	return statLine{name: name, kind: kindGauge, value: f}
}

// textLine is a line only "stats" shows that is not a number.
func textLine(name string, f func(*statsView) string) statLine {
	return statLine{name: name, kind: kindText, text: f}
}

func zero(*statsView) uint64 { return 0 }

func currConns(v *statsView) uint64 { return uint64(v.s.stats.currConns.Load()) }

// writeStats answers "stats": one line for each named statLine, in order.
func (c *conn) writeStats() {
	c.flushStats()
	v := c.srv.statsView()
	w := c.w
	for i := range statLines {
		l := &statLines[i]
		switch {
		case l.name == "":
		case l.kind == kindText:
			w.Stat(l.name, l.text(v))
		default:
			w.StatUint(l.name, l.value(v))
		}
	}
	w.Status(protocol.End)
}

// writeClusterStats answers "stats cluster": one group of lines per
// member, in the style of "stats slabs" (STAT <node>:<field> <value>).
func (c *conn) writeClusterStats() {
	w := c.w
	info := c.srv.ringInfo()
	w.Stat("self", info.Self)
	w.StatUint("vnodes", uint64(info.VNodes))
	w.Stat("epsilon", strconv.FormatFloat(info.Epsilon, 'g', -1, 64))
	w.Stat("load_mode", info.Load)
	for _, m := range info.Members {
		w.Stat(m.ID+":client", m.Client)
		w.Stat(m.ID+":peer", m.Peer)
		w.StatUint(m.ID+":weight", uint64(m.Weight))
		w.Stat(m.ID+":share", strconv.FormatFloat(m.Share, 'f', 4, 64))
		w.Stat(m.ID+":load", strconv.FormatFloat(m.Load, 'f', 1, 64))
	}
	w.Status(protocol.End)
}

// writeSettings answers "stats settings".
func (c *conn) writeSettings() {
	s := c.srv
	w := c.w
	w.StatUint("maxbytes", uint64(s.cfg.MaxBytes))
	w.StatUint("maxconns", uint64(s.cfg.MaxConns))
	w.StatUint("tcpport", 0)
	w.StatUint("verbosity", uint64(s.verbosity.Load()))
	w.Stat("evictions", "on")
	w.StatUint("num_threads", uint64(runtime.GOMAXPROCS(0)))
	w.Stat("cas_enabled", "yes")
	w.StatUint("item_size_max", uint64(s.cfg.MaxItemSize))
	w.StatUint("idle_timeout", uint64(s.cfg.IdleTimeout/time.Second))
	w.Stat("flush_enabled", "yes")
	w.Status(protocol.End)
}

func boolUint(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// timeval formats a rusage time as memcached does: seconds.microseconds.
func timeval(tv syscall.Timeval) string {
	usec := strconv.FormatInt(int64(tv.Usec), 10)
	for len(usec) < 6 {
		usec = "0" + usec
	}
	return strconv.FormatInt(int64(tv.Sec), 10) + "." + usec
}
