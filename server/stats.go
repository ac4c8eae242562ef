package server

import (
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"spillway/protocol"
)

// counters are the per-command statistics of memcached's "stats" reply.
// A connection keeps its own and adds them to the server's once per batch.
type counters struct {
	cmdGet, cmdSet, cmdFlush, cmdTouch, cmdMeta uint64
	getHits, getMisses                          uint64
	deleteHits, deleteMisses                    uint64
	incrHits, incrMisses, decrHits, decrMisses  uint64
	casHits, casMisses, casBadval               uint64
	touchHits, touchMisses                      uint64
	bytesRead, bytesWritten                     uint64
	dirty                                       bool
}

// totals are the node's counters. A connection adds its own to them once
// per batch, touching only the fields that moved: at pipeline depth 1 a get
// costs four atomic adds rather than a lock and twenty adds.
type totals struct {
	cmdGet       atomic.Uint64
	cmdSet       atomic.Uint64
	cmdFlush     atomic.Uint64
	cmdTouch     atomic.Uint64
	cmdMeta      atomic.Uint64
	getHits      atomic.Uint64
	getMisses    atomic.Uint64
	deleteHits   atomic.Uint64
	deleteMisses atomic.Uint64
	incrHits     atomic.Uint64
	incrMisses   atomic.Uint64
	decrHits     atomic.Uint64
	decrMisses   atomic.Uint64
	casHits      atomic.Uint64
	casMisses    atomic.Uint64
	casBadval    atomic.Uint64
	touchHits    atomic.Uint64
	touchMisses  atomic.Uint64
	bytesRead    atomic.Uint64
	bytesWritten atomic.Uint64
}

func (t *totals) add(c *counters) {
	if c.cmdGet != 0 {
		t.cmdGet.Add(c.cmdGet)
	}
	if c.cmdSet != 0 {
		t.cmdSet.Add(c.cmdSet)
	}
	if c.cmdFlush != 0 {
		t.cmdFlush.Add(c.cmdFlush)
	}
	if c.cmdTouch != 0 {
		t.cmdTouch.Add(c.cmdTouch)
	}
	if c.cmdMeta != 0 {
		t.cmdMeta.Add(c.cmdMeta)
	}
	if c.getHits != 0 {
		t.getHits.Add(c.getHits)
	}
	if c.getMisses != 0 {
		t.getMisses.Add(c.getMisses)
	}
	if c.deleteHits != 0 {
		t.deleteHits.Add(c.deleteHits)
	}
	if c.deleteMisses != 0 {
		t.deleteMisses.Add(c.deleteMisses)
	}
	if c.incrHits != 0 {
		t.incrHits.Add(c.incrHits)
	}
	if c.incrMisses != 0 {
		t.incrMisses.Add(c.incrMisses)
	}
	if c.decrHits != 0 {
		t.decrHits.Add(c.decrHits)
	}
	if c.decrMisses != 0 {
		t.decrMisses.Add(c.decrMisses)
	}
	if c.casHits != 0 {
		t.casHits.Add(c.casHits)
	}
	if c.casMisses != 0 {
		t.casMisses.Add(c.casMisses)
	}
	if c.casBadval != 0 {
		t.casBadval.Add(c.casBadval)
	}
	if c.touchHits != 0 {
		t.touchHits.Add(c.touchHits)
	}
	if c.touchMisses != 0 {
		t.touchMisses.Add(c.touchMisses)
	}
	if c.bytesRead != 0 {
		t.bytesRead.Add(c.bytesRead)
	}
	if c.bytesWritten != 0 {
		t.bytesWritten.Add(c.bytesWritten)
	}
}

func (t *totals) load() counters {
	return counters{
		cmdGet:       t.cmdGet.Load(),
		cmdSet:       t.cmdSet.Load(),
		cmdFlush:     t.cmdFlush.Load(),
		cmdTouch:     t.cmdTouch.Load(),
		cmdMeta:      t.cmdMeta.Load(),
		getHits:      t.getHits.Load(),
		getMisses:    t.getMisses.Load(),
		deleteHits:   t.deleteHits.Load(),
		deleteMisses: t.deleteMisses.Load(),
		incrHits:     t.incrHits.Load(),
		incrMisses:   t.incrMisses.Load(),
		decrHits:     t.decrHits.Load(),
		decrMisses:   t.decrMisses.Load(),
		casHits:      t.casHits.Load(),
		casMisses:    t.casMisses.Load(),
		casBadval:    t.casBadval.Load(),
		touchHits:    t.touchHits.Load(),
		touchMisses:  t.touchMisses.Load(),
		bytesRead:    t.bytesRead.Load(),
		bytesWritten: t.bytesWritten.Load(),
	}
}

func (t *totals) reset() {
	t.cmdGet.Store(0)
	t.cmdSet.Store(0)
	t.cmdFlush.Store(0)
	t.cmdTouch.Store(0)
	t.cmdMeta.Store(0)
	t.getHits.Store(0)
	t.getMisses.Store(0)
	t.deleteHits.Store(0)
	t.deleteMisses.Store(0)
	t.incrHits.Store(0)
	t.incrMisses.Store(0)
	t.decrHits.Store(0)
	t.decrMisses.Store(0)
	t.casHits.Store(0)
	t.casMisses.Store(0)
	t.casBadval.Store(0)
	t.touchHits.Store(0)
	t.touchMisses.Store(0)
	t.bytesRead.Store(0)
	t.bytesWritten.Store(0)
}

// stats holds the node's totals.
type stats struct {
	total totals

	currConns, totalConns, rejectedConns atomic.Int64
}

// flushStats adds the connection's counters to the server's.
func (c *conn) flushStats() {
	c.local.bytesRead, c.counted.read = c.local.bytesRead+c.counted.read, 0
	c.local.bytesWritten, c.counted.written = c.local.bytesWritten+c.counted.written, 0
	if !c.local.dirty && c.local.bytesRead == 0 && c.local.bytesWritten == 0 {
		return
	}
	c.srv.stats.total.add(&c.local)
	c.local = counters{}
}

func (s *Server) snapshot() counters { return s.stats.total.load() }

func (s *Server) resetStats() {
	s.stats.total.reset()
	s.stats.totalConns.Store(0)
	s.stats.rejectedConns.Store(0)
}

// writeStats answers "stats" with memcached's general-purpose fields, in
// memcached's order, followed by Spillway's own.
func (c *conn) writeStats() {
	s := c.srv
	c.flushStats()
	t := s.snapshot()
	st := s.store.Stats()
	now := s.cfg.Now()
	w := c.w
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)

	w.StatUint("pid", uint64(pid))
	w.StatUint("uptime", uint64(now.Sub(s.start)/time.Second))
	w.StatUint("time", uint64(now.Unix()))
	w.Stat("version", Version)
	w.Stat("libevent", "none")
	w.StatUint("pointer_size", strconv.IntSize)
	w.Stat("rusage_user", timeval(ru.Utime))
	w.Stat("rusage_system", timeval(ru.Stime))
	w.StatUint("max_connections", uint64(s.cfg.MaxConns))
	w.StatUint("curr_connections", uint64(s.stats.currConns.Load()))
	w.StatUint("total_connections", uint64(s.stats.totalConns.Load()))
	w.StatUint("rejected_connections", uint64(s.stats.rejectedConns.Load()))
	w.StatUint("connection_structures", uint64(s.stats.currConns.Load()))
	w.StatUint("cmd_get", t.cmdGet)
	w.StatUint("cmd_set", t.cmdSet)
	w.StatUint("cmd_flush", t.cmdFlush)
	w.StatUint("cmd_touch", t.cmdTouch)
	w.StatUint("cmd_meta", t.cmdMeta)
	w.StatUint("get_hits", t.getHits)
	w.StatUint("get_misses", t.getMisses)
	w.StatUint("get_expired", st.GetExpired)
	w.StatUint("get_flushed", st.GetFlushed)
	w.StatUint("delete_misses", t.deleteMisses)
	w.StatUint("delete_hits", t.deleteHits)
	w.StatUint("incr_misses", t.incrMisses)
	w.StatUint("incr_hits", t.incrHits)
	w.StatUint("decr_misses", t.decrMisses)
	w.StatUint("decr_hits", t.decrHits)
	w.StatUint("cas_misses", t.casMisses)
	w.StatUint("cas_hits", t.casHits)
	w.StatUint("cas_badval", t.casBadval)
	w.StatUint("touch_hits", t.touchHits)
	w.StatUint("touch_misses", t.touchMisses)
	w.StatUint("auth_cmds", 0)
	w.StatUint("auth_errors", 0)
	w.StatUint("bytes_read", t.bytesRead)
	w.StatUint("bytes_written", t.bytesWritten)
	w.StatUint("limit_maxbytes", uint64(s.cfg.MaxBytes))
	w.StatUint("accepting_conns", boolUint(!s.closing.Load()))
	w.StatUint("threads", uint64(runtime.GOMAXPROCS(0)))
	w.StatUint("conn_yields", 0)
	w.StatUint("bytes", uint64(st.Bytes))
	w.StatUint("curr_items", uint64(st.CurrItems))
	w.StatUint("total_items", uint64(st.TotalItems))
	w.StatUint("evictions", uint64(st.Evictions))
	w.StatUint("reclaimed", st.Reclaimed)
	s.writeClusterCounters(w)
	w.Status(protocol.End)
}

// writeClusterCounters adds Spillway's own lines to "stats".
func (s *Server) writeClusterCounters(w *protocol.Writer) {
	c := &s.counters
	nodes, copies := uint64(1), uint64(0)
	if s.cl != nil {
		nodes = uint64(s.cl.view.Load().ring.Len())
		copies = uint64(s.cl.copies.Stats().CurrItems)
	}
	w.StatUint("cluster_nodes", nodes)
	served := c.served.Load()
	if !s.routed() {
		// A node with no cluster and no origin serves every read itself.
		served = s.snapshot().cmdGet
	}
	w.StatUint("served", served)
	w.StatUint("forwarded", c.forwarded.Load())
	w.StatUint("forwarded_writes", c.forwardedWrites.Load())
	w.StatUint("spilled_served", c.spilledServed.Load())
	w.StatUint("peer_fetches", c.peerFetches.Load())
	w.StatUint("peer_errors", c.peerErrors.Load())
	w.StatUint("origin_fetches", c.originFetches.Load())
	w.StatUint("origin_errors", c.originErrors.Load())
	w.StatUint("singleflight_merged", c.merged.Load())
	w.StatUint("copies", copies)
	w.StatUint("invalidations", c.invalidations.Load())
	w.StatUint("lost_invalidations", c.lostInvalidations.Load())
	w.StatUint("refused_writes", c.refusedWrites.Load())
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
