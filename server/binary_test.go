package server

import (
	"context"
	"fmt"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"spillway/protocol"
	"spillway/ring"
)

// binClient speaks raw binary packets to a node, one exchange at a time.
type binClient struct {
	t  testing.TB
	nc net.Conn
}

func dialBinary(t testing.TB, addr string) *binClient {
	t.Helper()
	return &binClient{t: t, nc: dialRaw(t, addr).nc}
}

// do sends reqs and requires the replies want, compared as the
// conformance suite compares them (CAS variables bound in vars).
func (c *binClient) do(vars map[string]uint64, reqs []bp, want ...bp) {
	c.t.Helper()
	var out []byte
	for _, r := range reqs {
		b, err := r.encode(vars)
		if err != nil {
			c.t.Fatal(err)
		}
		out = append(out, b...)
	}
	c.nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.nc.Write(out); err != nil {
		c.t.Fatal(err)
	}
	for i, w := range want {
		got, err := readBinaryPacket(c.nc)
		if err != nil {
			c.t.Fatalf("reply %d: %v, want %s", i+1, err, w)
		}
		if msg := w.match(got, vars); msg != "" {
			c.t.Fatalf("reply %d: %s\nwant %s\ngot  %s", i+1, msg, w, describePacket(got))
		}
	}
}

// stats reads a node's "stats" over the binary protocol, as a map.
func (c *binClient) stats() map[string]string {
	c.t.Helper()
	return binaryStats(c.t, c.nc, "")
}

// binaryStats sends a stat request for group and collects its packets up
// to the terminating empty one, checking each packet's shape.
func binaryStats(t testing.TB, nc net.Conn, group string) map[string]string {
	t.Helper()
	req, _ := rq(protocol.OpStat, group).opq(0x5eed).encode(nil)
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Write(req); err != nil {
		t.Fatal(err)
	}
	m := make(map[string]string)
	for {
		p, err := readBinaryPacket(nc)
		if err != nil {
			t.Fatalf("stat %q: %v after %d stats", group, err, len(m))
		}
		keylen := int(p[2])<<8 | int(p[3])
		if p[0] != 0x81 || protocol.Opcode(p[1]) != protocol.OpStat || p[4] != 0 || p[5] != 0 || p[6] != 0 || p[7] != 0 ||
			string(p[12:16]) != "\x00\x00\x5e\xed" || string(p[16:24]) != "\x00\x00\x00\x00\x00\x00\x00\x00" {
			t.Fatalf("stat %q: bad packet %s", group, describePacket(p))
		}
		if keylen == 0 {
			if len(p) != 24 {
				t.Fatalf("stat %q: a terminator with a body: %s", group, describePacket(p))
			}
			return m
		}
		m[string(p[24:24+keylen])] = string(p[24+keylen:])
	}
}

// TestBinaryStatsShape: "stat" and "stat settings" are one packet per
// statistic and an empty one at the end, as memcached sends them.
func TestBinaryStatsShape(t *testing.T) {
	for _, s := range []struct{ name, addr string }{{"memcached", startMemcached(t)}, {"spillway", startSpillway(t)}} {
		t.Run(s.name, func(t *testing.T) {
			c := dialBinary(t, s.addr)
			st := c.stats()
			for _, f := range []string{"pid", "uptime", "time", "version", "curr_connections", "total_connections", "cmd_get", "cmd_set", "get_hits", "get_misses", "bytes", "curr_items", "limit_maxbytes"} {
				if _, ok := st[f]; !ok {
					t.Errorf("stat: no %s among %d stats", f, len(st))
				}
			}
			if !strings.HasPrefix(st["version"], "1.6.") {
				t.Errorf("stat version = %q", st["version"])
			}
			if set := binaryStats(t, c.nc, "settings"); set["maxbytes"] != "67108864" {
				t.Errorf("stat settings: maxbytes %q", set["maxbytes"])
			}
		})
	}
}

// TestBinaryStatsAsMemcached: a binary client's requests are counted in
// "stats" as memcached counts them (and not as meta commands).
func TestBinaryStatsAsMemcached(t *testing.T) {
	ops := []bp{
		set("s-a", "1"), rq(protocol.OpGet, "s-a"), rq(protocol.OpGetKQ, "s-miss"), rq(protocol.OpGetK, "s-miss"),
		rq(protocol.OpAdd, "s-a").ext(setExtras(0, 0)).val("x"), rq(protocol.OpReplace, "s-miss").ext(setExtras(0, 0)).val("x"),
		rq(protocol.OpAppend, "s-a").val("2"), rq(protocol.OpTouch, "s-a").ext(u32(100)), rq(protocol.OpTouch, "s-miss").ext(u32(100)),
		rq(protocol.OpGAT, "s-a").ext(u32(100)), rq(protocol.OpGATQ, "s-miss").ext(u32(100)),
		rq(protocol.OpIncrement, "s-n").ext(incrExtras(1, 5, 0)), rq(protocol.OpIncrement, "s-n").ext(incrExtras(1, 5, 0)),
		rq(protocol.OpDecrement, "s-n").ext(incrExtras(1, 5, 0)), rq(protocol.OpIncrement, "s-miss").ext(incrExtras(1, 5, noCreate)),
		rq(protocol.OpDelete, "s-a"), rq(protocol.OpDeleteQ, "s-a"), rq(protocol.OpFlush, ""), rq(protocol.OpNoop, ""),
	}
	fields := []string{"cmd_get", "cmd_set", "cmd_touch", "cmd_flush", "get_hits", "get_misses", "touch_hits", "touch_misses",
		"incr_hits", "incr_misses", "decr_hits", "decr_misses", "delete_hits", "delete_misses"}
	got := map[string]map[string]string{}
	for _, s := range []struct{ name, addr string }{{"memcached", startMemcached(t)}, {"spillway", startSpillway(t)}} {
		c := dialBinary(t, s.addr)
		var out []byte
		for _, p := range ops {
			b, _ := p.encode(nil)
			out = append(out, b...)
		}
		c.nc.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.nc.Write(out); err != nil {
			t.Fatal(err)
		}
		for { // every reply up to the noop's
			p, err := readBinaryPacket(c.nc)
			if err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			if protocol.Opcode(p[1]) == protocol.OpNoop {
				break
			}
		}
		got[s.name] = c.stats()
		if s.name == "spillway" && got[s.name]["cmd_meta"] != "0" {
			t.Errorf("binary requests counted as %s meta commands", got[s.name]["cmd_meta"])
		}
	}
	for _, f := range fields {
		if m, s := got["memcached"][f], got["spillway"][f]; m != s {
			t.Errorf("%s: memcached %s, spillway %s", f, m, s)
		}
	}
}

// TestBinaryUnknownCommandBody: an unknown command's extras, key and
// value are skipped whole (memcached skips bodylen more bytes, eating
// into the next request; see protocol's binary.go).
func TestBinaryUnknownCommandBody(t *testing.T) {
	c := dialBinary(t, startSpillway(t))
	c.do(nil, []bp{rq(0x1b, "").ext(u32(1)).opq(1), rq(0x55, "key").ext("ext").val("value").opq(2), rq(protocol.OpNoop, "").opq(3)},
		fails(0x1b, protocol.StatusUnknownCommand, txtUnknown).opq(1), fails(0x55, protocol.StatusUnknownCommand, txtUnknown).opq(2),
		rs(protocol.OpNoop, protocol.StatusOK).opq(3))
}

// TestBinaryShutdown: an idle binary connection is closed by a graceful
// shutdown, and one in the middle of a request is answered first.
func TestBinaryShutdown(t *testing.T) {
	addr, srv := startServer(t, Config{})
	idle, busy := dialBinary(t, addr), dialBinary(t, addr)
	idle.do(nil, []bp{rq(protocol.OpNoop, "")}, rs(protocol.OpNoop, protocol.StatusOK))
	busy.do(nil, []bp{rq(protocol.OpNoop, "")}, rs(protocol.OpNoop, protocol.StatusOK))
	waitFor(t, func() bool { return srv.busyConns() == 0 })
	req, _ := set("shutdown-k", "v").encode(nil)
	busy.nc.Write(req[:30])
	waitFor(t, func() bool { return srv.busyConns() == 1 })
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- srv.Shutdown(ctx)
	}()
	idle.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := readBinaryPacket(idle.nc); err == nil {
		t.Fatal("the idle connection got a reply, want a close")
	}
	busy.do(map[string]uint64{}, []bp{{raw: string(req[30:])}}, rs(protocol.OpSet, protocol.StatusOK).casOf("c"))
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// TestBinaryClusterLikeText: in a cluster, a binary request goes where its
// text twin goes. The same requests run through a node that owns none of
// the keys, once in binary and once as the meta commands a text client
// would send, on keys with the same owners; every node's counters and
// routing metrics move the same way.
func TestBinaryClusterLikeText(t *testing.T) {
	// Two keys per owner role, one for each run, owned alike.
	var bin, txt []string
	for _, role := range []string{"k", "n", "m"} {
		bin = append(bin, "bin-"+role)
		txt = append(txt, "txt-"+role)
	}
	// Plain consistent hashing: the picker's load, which the first run
	// changes, does not send the second run's reads elsewhere. No owner
	// grace: a new owner's warming from the previous owner, which ends
	// during the runs, would count differently in each.
	o := clusterOpts{
		picker: ring.PickerConfig{Epsilon: math.Inf(1)},
		tune:   func(_ string, cfg *Config) { cfg.Cluster.OwnerGrace = time.Nanosecond },
	}
	nodes := clusterAvoiding(t, append(append([]string{}, bin...), txt...), o)
	v := nodes[0].srv.cl.view.Load()
	for i := range bin {
		for v.ring.Owner(bin[i]) != v.ring.Owner(txt[i]) {
			txt[i] += "x" // another key of the same owner (still not the entry's: checked below)
		}
		if v.ring.Owner(txt[i]) == nodes[0].srv.cl.self() {
			t.Fatalf("%s is the entry's", txt[i])
		}
	}
	entry := nodes[0].addr
	binRun := func(k, n, m string) {
		c := dialBinary(t, entry)
		vars := map[string]uint64{}
		c.do(vars, []bp{set(k, "v1")}, rs(protocol.OpSet, protocol.StatusOK).casOf("c0"))
		c.do(vars, []bp{rq(protocol.OpGet, k), rq(protocol.OpGetK, m), rq(protocol.OpAddQ, k).ext(setExtras(0, 0)).val("x"),
			rq(protocol.OpTouch, k).ext(u32(100)), rq(protocol.OpGAT, k).ext(u32(200)),
			rq(protocol.OpIncrement, n).ext(incrExtras(1, 5, 0)), rq(protocol.OpIncrementQ, n).ext(incrExtras(1, 5, 0)),
			rq(protocol.OpAppend, k).val("+"), rq(protocol.OpDelete, m), set(k, "v2").casOf("c0"),
			rq(protocol.OpGetQ, k), rq(protocol.OpNoop, "")},
			hit(protocol.OpGet, "v1", "c0"), rs(protocol.OpGetK, protocol.StatusKeyNotFound).k(m),
			fails(protocol.OpAddQ, protocol.StatusKeyExists, txtExists),
			rs(protocol.OpTouch, protocol.StatusOK).ext(u32(0)).casOf("c0"), hit(protocol.OpGAT, "v1", "c0"),
			rs(protocol.OpIncrement, protocol.StatusOK).val(u64(5)).casOf("c1"), rs(protocol.OpAppend, protocol.StatusOK).casOf("c2"),
			fails(protocol.OpDelete, protocol.StatusKeyNotFound, txtNotFound), fails(protocol.OpSet, protocol.StatusKeyExists, txtExists),
			hit(protocol.OpGetQ, "v1+", "c2"), rs(protocol.OpNoop, protocol.StatusOK))
	}
	txtRun := func(k, n, m string) {
		c := dialRaw(t, entry)
		c.send(fmt.Sprintf("ms %s 2 F0 T0 c\r\nv1\r\n", k))
		c0 := strings.TrimPrefix(c.line(), "HD c")
		c.send(fmt.Sprintf("mg %[1]s v f c\r\nmg %[3]s v f c\r\nms %[1]s 1 F0 T0 ME c\r\nx\r\n"+
			"mg %[1]s T100 f c\r\nmg %[1]s T200 v f c\r\nma %[2]s D1 MI N0 J5 v c\r\nma %[2]s D1 MI N0 J5 v c\r\n"+
			"ms %[1]s 1 MA c\r\n+\r\nmd %[3]s\r\nms %[1]s 2 F0 T0 C%[4]s c\r\nv2\r\nmg %[1]s v f c\r\nmn\r\n", k, n, m, c0))
		for _, want := range []string{"VA 2 f0 c" + c0, "v1", "EN", "NS c0", "HD f0 c" + c0, "VA 2 f0 c" + c0, "v1",
			"VA 1 c*", "5", "VA 1 c*", "6", "HD c*", "NF", "EX c0", "VA 3 f0 c*", "v1+", "MN"} {
			if got := c.line(); got != want && !(strings.HasSuffix(want, "*") && strings.HasPrefix(got, want[:len(want)-1])) {
				t.Fatalf("text twin: got %q, want %q", got, want)
			}
		}
	}
	before := clusterCounts(nodes)
	binRun(bin[0], bin[1], bin[2])
	mid := clusterCounts(nodes)
	txtRun(txt[0], txt[1], txt[2])
	after := clusterCounts(nodes)
	for i := range nodes {
		for name, b := range mid[i] {
			switch name {
			case "bytes_read", "bytes_written", "total_connections":
				continue
			case "cmd_meta": // binary requests are not meta commands
				continue
			}
			if db, dt := b-before[i][name], after[i][name]-b; db != dt {
				t.Errorf("node %d %s: moved by %v for binary, by %v for text", i, name, db, dt)
			}
		}
	}
	for _, key := range bin {
		if _, ok := nodes[0].srv.store.Peek(key); ok {
			t.Errorf("the entry node stored %s", key)
		}
	}
	if mid[0]["forwarded_writes"] == before[0]["forwarded_writes"] || mid[0]["forwarded"] == before[0]["forwarded"] {
		t.Error("the entry node forwarded nothing")
	}
}

// clusterCounts samples every node's counters (as "stats" names them) and
// its routing and latency metrics (by series).
func clusterCounts(nodes []*testNode) []map[string]float64 {
	var out []map[string]float64
	for _, nd := range nodes {
		s := nd.srv
		m := map[string]float64{}
		v := s.statsView()
		for i := range statLines {
			if l := &statLines[i]; l.name != "" && l.kind == kindCounter {
				m[l.name] = float64(l.value(v))
			}
		}
		fams, _ := s.metrics.reg.Gather()
		for _, f := range fams {
			switch f.GetName() {
			case "cache_routing_requests_total", "spillway_request_duration_seconds":
				for _, mt := range f.GetMetric() {
					name := f.GetName()
					for _, l := range mt.GetLabel() {
						name += "," + l.GetName() + "=" + l.GetValue()
					}
					if mt.Counter != nil {
						m[name] = mt.Counter.GetValue()
					} else {
						m[name] = float64(mt.Histogram.GetSampleCount())
					}
				}
			}
		}
		out = append(out, m)
	}
	return out
}

// TestBinaryClusterOddKeys: a key that cannot stand in a text line is
// passed to its owner in base64, which fits a line for keys of up to 186
// bytes; a longer one is refused with an error, never left hanging.
func TestBinaryClusterOddKeys(t *testing.T) {
	short, long := "odd key\x00"+xs(186-8), "odd key\x00"+xs(200-8)
	nodes := clusterAvoiding(t, []string{short, long}, clusterOpts{})
	c := dialBinary(t, nodes[0].addr)
	vars := map[string]uint64{}
	c.do(vars, []bp{set(short, "v"), rq(protocol.OpGetK, short), rq(protocol.OpDelete, short)},
		rs(protocol.OpSet, protocol.StatusOK).casOf("c"), rs(protocol.OpGetK, protocol.StatusOK).ext(u32(0)).k(short).val("v").casOf("c"),
		rs(protocol.OpDelete, protocol.StatusOK))
	c.do(vars, []bp{set(long, "v").opq(1), rq(protocol.OpGet, long).opq(2), rq(protocol.OpNoop, "").opq(3)},
		fails(protocol.OpSet, protocol.StatusInvalid, "bad command line format").opq(1),
		fails(protocol.OpGet, protocol.StatusKeyNotFound, txtNotFound).opq(2), rs(protocol.OpNoop, protocol.StatusOK).opq(3))
}

// TestBinaryNotWithAuth: a node whose clients authenticate speaks no
// binary protocol, as memcached -Y (its binary authentication would be
// SASL's): binary bytes are a text request like any other, refused until
// the connection authenticated.
func TestBinaryNotWithAuth(t *testing.T) {
	file, users := writeAuthFile(t, "alice:wonder\n")
	addr, _ := startServer(t, Config{Users: users})
	noop, _ := rq(protocol.OpNoop, "").encode(nil)
	for name, target := range map[string]string{"spillway": addr, "memcached": startMemcached(t, "-Y", file)} {
		t.Run(name, func(t *testing.T) {
			c := dialRaw(t, target)
			c.send(string(noop) + "\r\n")
			c.expect("CLIENT_ERROR unauthenticated\r\n")
		})
	}
}
