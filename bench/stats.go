package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"spillway/internal/loopback"
	"spillway/protocol"
)

// Per-server load comes from each server's own `stats`, read before and
// after the measured phase, so it counts what the servers did (including
// Spillway's internal forwarding), not what this client believes it sent.
// Unknown fields are ignored and missing ones are reported as absent, so
// memcached and proxies work as targets too.

// Spillway's cluster counters (absent on memcached).
const (
	statServed        = "served"
	statForwarded     = "forwarded"
	statSpilledServed = "spilled_served"
	statPeerFetches   = "peer_fetches"
	statOriginFetches = "origin_fetches"
)

// snapshot is one server's `stats` at one moment.
type snapshot struct {
	vals map[string]string
	err  error
}

// readAllStats reads every server's stats concurrently.
func readAllStats(ctx context.Context, servers []string, timeout time.Duration, tlsCfg *tls.Config) []snapshot {
	out := make([]snapshot, len(servers))
	var wg sync.WaitGroup
	for i, addr := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vals, err := readStats(ctx, addr, timeout, tlsCfg)
			out[i] = snapshot{vals: vals, err: err}
		}()
	}
	wg.Wait()
	return out
}

// ReadStats sends `stats` to addr on a fresh connection and collects the
// STAT lines up to END, by name. bench/compare reads the servers it
// starts with it.
func ReadStats(ctx context.Context, addr string, timeout time.Duration) (map[string]string, error) {
	return readStats(ctx, addr, timeout, nil)
}

// readStats is ReadStats, over TLS if tlsCfg is set.
func readStats(ctx context.Context, addr string, timeout time.Duration, tlsCfg *tls.Config) (map[string]string, error) {
	nc, err := dialServer(ctx, addr, timeout, tlsCfg)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(timeout))
	if _, err := nc.Write([]byte("stats\r\n")); err != nil {
		return nil, err
	}
	return parseStats(bufio.NewReader(nc))
}

// parseStats reads the reply to `stats`:
//
//	STAT <name> <value>\r\n ... END\r\n | ERROR\r\n | SERVER_ERROR <msg>\r\n | CLIENT_ERROR <msg>\r\n
func parseStats(r *bufio.Reader) (map[string]string, error) {
	vals := make(map[string]string)
	var rr protocol.ReplyReader
	for {
		b, _, err := rr.Read(r)
		if err != nil {
			return nil, err
		}
		line := string(b)
		switch {
		case line == "END":
			return vals, nil
		case strings.HasPrefix(line, "STAT "):
			name, val, _ := strings.Cut(line[len("STAT "):], " ")
			vals[name] = val
		case strings.HasPrefix(line, "ERROR"), strings.HasPrefix(line, "SERVER_ERROR"),
			strings.HasPrefix(line, "CLIENT_ERROR"):
			return nil, errors.New("stats: " + line)
		default:
			return nil, fmt.Errorf("stats: unexpected line %q", line)
		}
	}
}

// counterDiff is after-before of an integer counter; ok is false when either
// side lacks it (the server does not have that counter).
func counterDiff(before, after snapshot, name string) (uint64, bool) {
	b, ok1 := before.vals[name]
	a, ok2 := after.vals[name]
	if !ok1 || !ok2 {
		return 0, false
	}
	bv, err1 := strconv.ParseUint(b, 10, 64)
	av, err2 := strconv.ParseUint(a, 10, 64)
	if err1 != nil || err2 != nil || av < bv {
		return 0, false // a restart or a counter wrap: no figure rather than a wrong one
	}
	return av - bv, true
}

// cpuSeconds is the server's CPU time (user + system) from its rusage
// stats, which memcached reports as "seconds.microseconds".
func cpuSeconds(s snapshot) (float64, bool) {
	u, ok1 := s.vals["rusage_user"]
	sys, ok2 := s.vals["rusage_system"]
	if !ok1 || !ok2 {
		return 0, false
	}
	uv, err1 := strconv.ParseFloat(strings.Replace(u, ":", ".", 1), 64)
	sv, err2 := strconv.ParseFloat(strings.Replace(sys, ":", ".", 1), 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return uv + sv, true
}

// ServerLoad is what one server did during the measured phase, from the
// difference of its stats after and before. Counters the server does not
// report are zero; the Has* fields say which were present.
type ServerLoad struct {
	Addr string `json:"addr"`
	// Requests is the load measure compared across servers: Spillway's
	// "served" if present, else cmd_get + cmd_set.
	Requests uint64  `json:"requests"`
	Share    float64 `json:"share"` // of all servers' Requests
	// EntryGets is the gets this bench sent to the server: the reads it
	// received as entry node. CmdGet, the server's own count, also counts
	// reads other nodes forwarded to it.
	EntryGets     uint64 `json:"entry_gets"`
	CmdGet        uint64 `json:"cmd_get"`
	CmdSet        uint64 `json:"cmd_set"`
	GetHits       uint64 `json:"get_hits"`
	GetMisses     uint64 `json:"get_misses"`
	Served        uint64 `json:"served,omitempty"`
	Forwarded     uint64 `json:"forwarded,omitempty"`
	SpilledServed uint64 `json:"spilled_served,omitempty"`
	PeerFetches   uint64 `json:"peer_fetches,omitempty"`
	OriginFetches uint64 `json:"origin_fetches,omitempty"`
	HasCluster    bool   `json:"has_cluster"` // Spillway's "served" counter was present
	// CPUSeconds is user+system CPU the server's process used (rusage
	// stats). Servers sharing a process (same host and pid, e.g. an
	// embedded cluster) each report the whole process.
	CPUSeconds float64 `json:"cpu_seconds"`
	HasCPU     bool    `json:"has_cpu"`
	PID        int     `json:"pid,omitempty"`
	// Err says why stats could not be read; the other fields are then zero.
	Err string `json:"error,omitempty"`
}

func serverLoad(addr string, before, after snapshot) ServerLoad {
	l := ServerLoad{Addr: addr}
	if err := errors.Join(before.err, after.err); err != nil {
		l.Err = err.Error()
		return l
	}
	l.CmdGet, _ = counterDiff(before, after, "cmd_get")
	l.CmdSet, _ = counterDiff(before, after, "cmd_set")
	l.GetHits, _ = counterDiff(before, after, "get_hits")
	l.GetMisses, _ = counterDiff(before, after, "get_misses")
	l.Served, l.HasCluster = counterDiff(before, after, statServed)
	l.Forwarded, _ = counterDiff(before, after, statForwarded)
	l.SpilledServed, _ = counterDiff(before, after, statSpilledServed)
	l.PeerFetches, _ = counterDiff(before, after, statPeerFetches)
	l.OriginFetches, _ = counterDiff(before, after, statOriginFetches)
	if l.HasCluster {
		l.Requests = l.Served
	} else {
		l.Requests = l.CmdGet + l.CmdSet
	}
	l.PID, _ = strconv.Atoi(after.vals["pid"])
	b, ok1 := cpuSeconds(before)
	a, ok2 := cpuSeconds(after)
	if ok1 && ok2 && a >= b {
		l.CPUSeconds, l.HasCPU = a-b, true
	}
	return l
}

// Load summarises how evenly the servers were loaded.
type Load struct {
	// MaxMean is the hottest server's Requests over the mean: 1 is perfectly
	// even; n means one of n servers took everything.
	MaxMean      float64 `json:"max_mean"`
	Hottest      string  `json:"hottest"`
	HottestShare float64 `json:"hottest_share"`
	// SpillShare is spilled_served over served, summed over servers
	// (Spillway only).
	SpillShare    float64 `json:"spill_share"`
	PeerFetches   uint64  `json:"peer_fetches"`
	OriginFetches uint64  `json:"origin_fetches"`
	// ServerCPU is the servers' summed CPU seconds, and OpsPerServerCPU the
	// client's completed requests per server CPU-second: the figure to
	// compare servers on a small machine, where client and servers share
	// the cores and raw ops/s mostly measures the client. 0 if any server
	// lacks rusage stats. A process serving several addresses is counted
	// once.
	ServerCPU       float64 `json:"server_cpu_seconds"`
	OpsPerServerCPU float64 `json:"ops_per_server_cpu_second"`
	// CPUIncludesClient is set when a server runs in this very process
	// (an embedded cluster): ServerCPU then includes the load generator's
	// own CPU and is an upper bound.
	CPUIncludesClient bool `json:"cpu_includes_client,omitempty"`
}

func summariseLoad(servers []ServerLoad, ops int64) Load {
	var l Load
	var total, served, spilled uint64
	cpuOK := len(servers) > 0
	var hottest uint64
	seen := make(map[string]bool) // host/pid of processes already counted
	for _, s := range servers {
		total += s.Requests
		served += s.Served
		spilled += s.SpilledServed
		l.PeerFetches += s.PeerFetches
		l.OriginFetches += s.OriginFetches
		cpuOK = cpuOK && s.HasCPU
		if s.PID > 0 {
			host, _, _ := net.SplitHostPort(s.Addr)
			local := loopback.Is(host)
			if local {
				host = "loopback" // 127.0.0.1 and 127.0.0.2 are one machine
			}
			proc := host + "/" + strconv.Itoa(s.PID)
			if seen[proc] {
				continue
			}
			seen[proc] = true
			if local && s.PID == os.Getpid() {
				l.CPUIncludesClient = true
			}
		}
		l.ServerCPU += s.CPUSeconds
	}
	for _, s := range servers {
		if s.Requests > hottest || l.Hottest == "" {
			hottest, l.Hottest = s.Requests, s.Addr
		}
	}
	if total > 0 {
		l.HottestShare = float64(hottest) / float64(total)
		l.MaxMean = l.HottestShare * float64(len(servers))
	}
	if served > 0 {
		l.SpillShare = float64(spilled) / float64(served)
	}
	if cpuOK && l.ServerCPU > 0 {
		l.OpsPerServerCPU = float64(ops) / l.ServerCPU
	} else if !cpuOK {
		l.ServerCPU = 0
	}
	return l
}

// dialServer connects to addr within timeout, and speaks TLS with tlsCfg
// if it is set (its ServerName, if empty, is addr's host).
func dialServer(ctx context.Context, addr string, timeout time.Duration, tlsCfg *tls.Config) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || tlsCfg == nil {
		return nc, err
	}
	if tlsCfg.ServerName == "" {
		tlsCfg = tlsCfg.Clone()
		tlsCfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	tc := tls.Client(nc, tlsCfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	return tc, nil
}
