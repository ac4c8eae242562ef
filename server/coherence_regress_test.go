package server

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"spillway/ring"
	"spillway/store"
)

// Regression tests for issue 9 ("Coherence under membership change"): one
// test per finding, each on real nodes over loopback with raw protocol
// clients. The contract they check (ARCHITECTURE.md, "Coherence"): a hit
// is never older than the latest acknowledged write to its key; a miss is
// always allowed.

// ---- helpers ----

// rawGetValue sends "get key" on c and returns the value and whether it was
// a hit.
func rawGetValue(t testing.TB, c *rawConn, key string) (string, bool) {
	t.Helper()
	c.send("get " + key + "\r\n")
	l := c.line()
	if l == "END" {
		return "", false
	}
	var k string
	var flags, n int
	if _, err := fmt.Sscanf(l, "VALUE %s %d %d", &k, &flags, &n); err != nil || k != key {
		t.Fatalf("get %s: unexpected reply %q", key, l)
	}
	v := c.line()
	if end := c.line(); end != "END" {
		t.Fatalf("get %s: %q after the value, want END", key, end)
	}
	return v, true
}

// rawGetsCAS sends "gets key" on c and returns value, CAS unique and hit.
func rawGetsCAS(t testing.TB, c *rawConn, key string) (string, uint64, bool) {
	t.Helper()
	c.send("gets " + key + "\r\n")
	l := c.line()
	if l == "END" {
		return "", 0, false
	}
	var k string
	var flags, n int
	var cas uint64
	if _, err := fmt.Sscanf(l, "VALUE %s %d %d %d", &k, &flags, &n, &cas); err != nil || k != key {
		t.Fatalf("gets %s: unexpected reply %q", key, l)
	}
	v := c.line()
	if end := c.line(); end != "END" {
		t.Fatalf("gets %s: %q after the value, want END", key, end)
	}
	return v, cas, true
}

// rawSet sets key to val (exptime exp) on c and requires STORED.
func rawSet(t testing.TB, c *rawConn, key, val string, exp int) {
	t.Helper()
	c.send(fmt.Sprintf("set %s 0 %d %d\r\n%s\r\n", key, exp, len(val), val))
	if got := c.line(); got != "STORED" {
		t.Fatalf("set %s %q: %q", key, val, got)
	}
}

// ownerOn is the owner of key in nd's current view.
func ownerOn(nd *testNode, key string) string {
	return nd.srv.cl.view.Load().ring.Owner(key)
}

// neverOld reads every key through every live node and reports each hit
// that returns a forbidden value (an older, overwritten one).
func neverOld(t *testing.T, when string, nodes []*testNode, keys []string, forbidden string) {
	t.Helper()
	var bad []string
	reads := 0
	for _, nd := range nodes {
		if nd.closed {
			continue
		}
		c := dialRaw(t, nd.addr)
		for _, k := range keys {
			v, hit := rawGetValue(t, c, k)
			reads++
			if hit && v == forbidden {
				bad = append(bad, fmt.Sprintf("%s via %s = %q (owner in its view: %s)", k, nd.srv.ID(), v, ownerOn(nd, k)))
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("%s: %d of %d reads returned the overwritten value %q; first: %s",
			when, len(bad), reads, forbidden, strings.Join(bad[:min(len(bad), 5)], "; "))
	}
}

func keyRange(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return keys
}

// keyOwnedBy finds a key with the prefix that owner owns in nd's view.
func keyOwnedBy(t testing.TB, nd *testNode, prefix, owner string) string {
	t.Helper()
	for i := range 10000 {
		if k := fmt.Sprintf("%s%d", prefix, i); ownerOn(nd, k) == owner {
			return k
		}
	}
	t.Fatalf("no key %s* owned by %s", prefix, owner)
	return ""
}

// joinAfterOld starts two nodes, sets n keys prefix0.. to "old" through
// node0, then starts node2 and waits until the three have converged. It
// returns the nodes, the keys and each key's owner before the join.
func joinAfterOld(t *testing.T, o clusterOpts, prefix string, n int) ([]*testNode, []string, map[string]string) {
	t.Helper()
	nodes := startCluster(t, 2, o)
	keys := keyRange(prefix, n)
	w := dialRaw(t, nodes[0].addr)
	before := make(map[string]string, n)
	for _, k := range keys {
		rawSet(t, w, k, "old", 0)
		before[k] = ownerOn(nodes[0], k)
	}
	nodes = append(nodes, startNode(t, "node2", nodes, o))
	waitConverged(t, nodes)
	return nodes, keys, before
}

// ---- finding 1 ----

// A node that lost a key to a joining node must not serve its stored item
// as its own, after the join nor after the joiner leaves again.
func TestCoherenceMovedKeyNotServedAsOwned(t *testing.T) {
	o := clusterOpts{picker: ring.PickerConfig{Epsilon: math.Inf(1)}}
	nodes, keys, _ := joinAfterOld(t, o, "c1k", 100)
	moved := 0
	for _, k := range keys {
		if ownerOn(nodes[0], k) == "node2" {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("arrangement: no key moved to node2")
	}
	t.Logf("%d of %d keys moved to node2", moved, len(keys))
	w2 := dialRaw(t, nodes[2].addr)
	for _, k := range keys {
		rawSet(t, w2, k, "new", 0)
	}
	neverOld(t, "after node2 joined and every key was set to \"new\" through it", nodes, keys, "old")

	nodes[2].stop(t, true)
	waitConverged(t, nodes)
	neverOld(t, "after node2 left gracefully", nodes, keys, "old")
}

// ---- finding 2 ----

// A write at the new owner during the owner grace (not only a delete) must
// keep the previous owner's older value from being warmed back once the
// written value has expired.
func TestCoherenceOwnerGraceRevivesOverwritten(t *testing.T) {
	const grace = 2 * time.Second
	cases := []struct {
		name string
		val  string
		exp  int // exptime of the overwrite
	}{
		{"ttl-1s", "new", 1},
		{"expired-at-once", "x", -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := clusterOpts{
				picker: ring.PickerConfig{Epsilon: math.Inf(1)},
				tune:   func(_ string, cfg *Config) { cfg.Cluster.OwnerGrace = grace },
			}
			nodes, keys, _ := joinAfterOld(t, o, "c2k", 100)
			joined := time.Now()
			var moved []string
			for _, k := range keys {
				if ownerOn(nodes[2], k) == "node2" {
					moved = append(moved, k)
				}
			}
			if len(moved) == 0 {
				t.Fatal("arrangement: no key moved to node2")
			}
			w2 := dialRaw(t, nodes[2].addr)
			for _, k := range moved {
				rawSet(t, w2, k, tc.val, tc.exp)
			}
			// The overwrites are gone from node2 (expired) ...
			waitFor(t, func() bool {
				for _, k := range moved {
					if _, ok := nodes[2].srv.store.Peek(k); ok {
						return false
					}
				}
				return true
			})
			// ... and the owner grace still runs: reads through the new
			// owner now miss, or they warm the previous owner's "old".
			if since := time.Since(joined); since > grace-200*time.Millisecond {
				t.Skipf("inconclusive: the overwrites expired %v after the join, too close to the %v grace", since, grace)
			}
			var bad []string
			c := dialRaw(t, nodes[2].addr)
			for _, k := range moved {
				if v, hit := rawGetValue(t, c, k); hit && v == "old" {
					bad = append(bad, k)
				}
			}
			if len(bad) > 0 {
				t.Errorf("%d of %d moved keys read \"old\" through their new owner node2 (%v after the join) after `set k 0 %d %s` there expired: the previous owner's overwritten value was warmed back; e.g. %s",
					len(bad), len(moved), time.Since(joined).Round(time.Millisecond), tc.exp, tc.val, strings.Join(bad[:min(5, len(bad))], ", "))
			}
			neverOld(t, "after the overwrites expired, through every node", nodes, moved, "old")
		})
	}
}

// ---- finding 3 ----

// A write that reaches a node's peer port for a key that node does not
// own is refused with "SERVER_ERROR not owner", never stored.
func TestCoherencePeerWriteAtNonOwner(t *testing.T) {
	nodes := startCluster(t, 2, clusterOpts{picker: ring.PickerConfig{Epsilon: math.Inf(1)}})
	cases := []struct {
		name  string
		setup string // stored at the owner first, through its client port
		req   string // %s is the key; sent to node0's peer port
	}{
		{"set", "", "set %s 0 0 1\r\nx\r\n"},
		{"ms", "", "ms %s 1 T0\r\nx\r\n"},
		{"delete", "v", "delete %s\r\n"},
		{"incr", "5", "incr %s 1\r\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := keyOwnedBy(t, nodes[0], "c3"+tc.name, "node1")
			if tc.setup != "" {
				rawSet(t, dialRaw(t, nodes[1].addr), key, tc.setup, 0)
			}
			p := dialRaw(t, nodes[0].peer)
			p.send(fmt.Sprintf(tc.req, key))
			if got := p.line(); !strings.HasPrefix(got, "SERVER_ERROR not owner") {
				t.Errorf("%s of %s (owned by node1) on node0's peer port answered %q, want SERVER_ERROR not owner", tc.name, key, got)
			}
			for _, nd := range nodes {
				v, hit := rawGetValue(t, dialRaw(t, nd.addr), key)
				switch {
				case tc.setup == "" && hit:
					t.Errorf("after the refused %s, %s via %s = %q, want a miss", tc.name, key, nd.srv.ID(), v)
				case tc.setup != "" && (!hit || v != tc.setup):
					t.Errorf("after the refused %s, %s via %s = %q (hit %v), want the owner's %q", tc.name, key, nd.srv.ID(), v, hit, tc.setup)
				}
			}
		})
	}
}

// A node that is leaving refuses writes on its peer port: a forwarded write
// whose bytes arrive after its leave was announced is not acknowledged (it
// would leave with the node).
func TestCoherenceLeavingNodeRefusesPeerWrites(t *testing.T) {
	nodes := startCluster(t, 3, clusterOpts{picker: ring.PickerConfig{Epsilon: math.Inf(1)}})
	key := keyOwnedBy(t, nodes[1], "c3leave", "node0")
	// A write under way on node0's peer port: the line has arrived, the
	// data not yet, so Shutdown waits for it.
	p := dialRaw(t, nodes[0].peer)
	p.send("set " + key + " 0 0 1\r\n")
	waitFor(t, func() bool { return nodes[0].srv.busyConns() > 0 })
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		nodes[0].stop(t, true)
	}()
	t.Cleanup(func() { p.nc.Close(); <-stopped }) // before the nodes' own cleanup
	// node0 has left: the others dropped it, and it closed its listeners.
	waitFor(t, func() bool {
		return ownerOn(nodes[1], key) != "node0" && ownerOn(nodes[2], key) != "node0"
	})
	waitFor(t, func() bool {
		c, err := net.DialTimeout("tcp", nodes[0].addr, time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
	p.send("x\r\n")
	got := p.line()
	<-stopped
	if !strings.HasPrefix(got, "SERVER_ERROR not owner") {
		t.Errorf("set %s on the peer port of node0 after it left answered %q, want SERVER_ERROR not owner (the value left with node0; owner now %s)",
			key, got, ownerOn(nodes[1], key))
	}
}

// ---- finding 4 ----

// versionOrigin is a database whose value of each key can change: a load
// reads the value when it starts, then waits for gate (a slow query).
type versionOrigin struct {
	mu      sync.Mutex
	val     string
	started chan string // one send per load that started
	gate    chan struct{}
}

func (o *versionOrigin) set(v string) {
	o.mu.Lock()
	o.val = v
	o.mu.Unlock()
}

func (o *versionOrigin) Load(ctx context.Context, key string) (store.Item, error) {
	o.mu.Lock()
	v := o.val
	o.mu.Unlock()
	select {
	case o.started <- key:
	default:
	}
	select {
	case <-o.gate:
	case <-ctx.Done():
		return store.Item{}, ctx.Err()
	}
	return store.Item{Key: key, Value: []byte(v)}, nil
}

// An origin fill under way when a delete or flush_all is acknowledged must
// not keep the value it fetched before.
func TestCoherenceOriginFillFencedByDeleteAndFlush(t *testing.T) {
	cases := []struct {
		name, req, reply string
	}{
		{"delete", "delete user1\r\n", "NOT_FOUND"},
		{"flush_all", "flush_all\r\n", "OK"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := &versionOrigin{val: "v1", started: make(chan string, 1), gate: make(chan struct{})}
			addr, _ := startServer(t, Config{Origin: o})
			var once sync.Once
			release := func() { once.Do(func() { close(o.gate) }) }
			t.Cleanup(release)

			r := dialRaw(t, addr)
			r.send("get user1\r\n")
			select {
			case <-o.started:
			case <-time.After(5 * time.Second):
				t.Fatal("the get did not start an origin load")
			}
			o.set("v2") // the database changes, then the cache entry is dropped
			w := dialRaw(t, addr)
			w.send(tc.req)
			if got := w.line(); got != tc.reply {
				t.Fatalf("%s: %q, want %q", strings.TrimSpace(tc.req), got, tc.reply)
			}
			release()
			v, hit := rawGetReply(t, r, "user1")
			t.Logf("the concurrent get returned %q (hit %v)", v, hit)
			for i := range 3 {
				if v, hit := rawGetValue(t, w, "user1"); hit && v != "v2" {
					t.Fatalf("get %d after %s was acknowledged returned %q: the fill that started before it stored the pre-%s value",
						i+1, tc.name, v, tc.name)
				}
			}
		})
	}
}

// rawGetReply reads the reply of a get of key already sent on c.
func rawGetReply(t testing.TB, c *rawConn, key string) (string, bool) {
	t.Helper()
	l := c.line()
	if l == "END" {
		return "", false
	}
	if !strings.HasPrefix(l, "VALUE "+key+" ") {
		t.Fatalf("get %s: unexpected reply %q", key, l)
	}
	v := c.line()
	if end := c.line(); end != "END" {
		t.Fatalf("get %s: %q after the value, want END", key, end)
	}
	return v, true
}

// holdProxy forwards TCP to target; once armed, the first connection that
// sends a request containing match gets its replies held until release.
type holdProxy struct {
	ln     net.Listener
	target atomic.Pointer[string] // set before the first connection
	match  atomic.Pointer[string]
	// drop, if set, makes the proxy drop every request that matches
	// (closing its connection) instead of holding the first one's reply.
	drop    atomic.Bool
	held    chan struct{}
	release chan struct{}
	relOnce sync.Once
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn // guarded by mu
	closed  bool       // guarded by mu
}

func newHoldProxy(t testing.TB) *holdProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln, held: make(chan struct{}, 1), release: make(chan struct{})}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *holdProxy) arm(match string) { p.match.Store(&match) }
func (p *holdProxy) let()             { p.relOnce.Do(func() { close(p.release) }) }

func (p *holdProxy) close() {
	p.let()
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *holdProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", *p.target.Load())
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			u.Close()
			return
		}
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		var hold atomic.Bool
		p.wg.Go(func() { // requests
			defer u.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if m := p.match.Load(); m != nil && p.drop.Load() && bytes.Contains(buf[:n], []byte(*m)) {
						c.Close()
						return
					}
					if m := p.match.Load(); m != nil && bytes.Contains(buf[:n], []byte(*m)) && p.match.CompareAndSwap(m, nil) {
						hold.Store(true)
						p.held <- struct{}{}
					}
					if _, err := u.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
		p.wg.Go(func() { // replies
			defer c.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := u.Read(buf)
				if n > 0 {
					if hold.Load() {
						<-p.release
					}
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
	}
}

// joinBehindProxy is joinAfterOld with node0's peer port behind a
// holdProxy (the others reach it through the proxy); it returns the nodes,
// a key that moved from node0 to node2, and the proxy.
func joinBehindProxy(t *testing.T, prefix string) ([]*testNode, string, *holdProxy) {
	t.Helper()
	proxy := newHoldProxy(t)
	o := clusterOpts{
		picker: ring.PickerConfig{Epsilon: math.Inf(1)},
		tune: func(name string, cfg *Config) {
			if name == "node0" {
				target := cfg.Cluster.Peers.Meta.Peer
				proxy.target.Store(&target)
				cfg.Cluster.Peers.Meta.Peer = proxy.ln.Addr().String()
			}
		},
	}
	nodes, keys, before := joinAfterOld(t, o, prefix, 200)
	for _, k := range keys {
		if before[k] == "node0" && ownerOn(nodes[2], k) == "node2" {
			return nodes, k, proxy
		}
	}
	t.Fatal("arrangement: no key moved from node0 to node2")
	return nil, "", nil
}

// A fill from the previous owner (the new owner's warm read during the
// owner grace) under way when a delete is acknowledged must not keep the
// value it fetched.
func TestCoherenceWarmFillFencedByDelete(t *testing.T) {
	nodes, key, proxy := joinBehindProxy(t, "c4w")
	// node0 hands node2 the keys node2 took from it as node2 joins
	// (handBack, handover.go), in the background: node2 warms them from
	// node0 within milliseconds, and a get that came after that was a hit
	// at node2, with no read through the proxy (1 run in 3 failed so).
	// Let the handover bring the key (node0 hands it over once), then
	// evict it at node2 only, as memory pressure would: node0 still holds
	// it and the grace still runs, so node2's next miss warms it from
	// node0.
	waitFor(t, func() bool { _, ok := nodes[2].srv.store.Peek(key); return ok })
	if err := nodes[2].srv.store.Delete(key); err != nil {
		t.Fatalf("evict %s at node2: %v", key, err)
	}
	if _, ok := nodes[0].srv.store.Peek(key); !ok {
		t.Fatalf("arrangement: node0 no longer holds %s", key)
	}
	proxy.arm("mg " + key + " ")
	r := dialRaw(t, nodes[2].addr)
	r.send("get " + key + "\r\n") // node2 warms it from node0: the reply is held
	select {
	case <-proxy.held:
	case <-time.After(5 * time.Second):
		t.Fatalf("node2 did not read %s from its previous owner node0", key)
	}
	d := dialRaw(t, nodes[2].addr)
	d.send("delete " + key + "\r\n")
	if got := d.line(); got != "DELETED" && got != "NOT_FOUND" {
		t.Fatalf("delete %s: %q", key, got)
	}
	proxy.let()
	v, hit := rawGetReply(t, r, key)
	t.Logf("the concurrent get returned %q (hit %v)", v, hit)
	for _, nd := range nodes {
		if v, hit := rawGetValue(t, dialRaw(t, nd.addr), key); hit {
			t.Errorf("after delete %s was acknowledged, get via %s = %q: the warm fill from node0 that started before it kept the deleted value", key, nd.srv.ID(), v)
		}
	}
}

// A write at a key's new owner that cannot clear the previous owner's item
// (the previous owner is still a member but does not answer) is not
// acknowledged: a later miss here would warm the old value back (found by
// review: a delete was acked, and the next get returned the deleted value).
func TestCoherenceWriteNotAckedUnlessPreviousOwnerCleared(t *testing.T) {
	nodes, key, proxy := joinBehindProxy(t, "c4m")
	proxy.drop.Store(true)
	proxy.arm("md " + key + " ") // node0 never hears that node2 deleted it
	d := dialRaw(t, nodes[2].addr)
	d.send("delete " + key + "\r\n")
	got := d.line()
	if !strings.HasPrefix(got, "SERVER_ERROR") {
		if v, hit := rawGetValue(t, d, key); hit {
			t.Fatalf("delete %s answered %q, then get via node2 = %q: warmed back from node0", key, got, v)
		}
	}
}

// ---- finding 5 ----

// flush_all through a node whose ring still holds a crashed node answers
// the documented error instead of OK.
func TestCoherenceFlushAllReportsUnreachable(t *testing.T) {
	var holding atomic.Bool
	hold := make(chan struct{})
	o := clusterOpts{tune: func(name string, cfg *Config) {
		if name == "node0" {
			cfg.Cluster.viewGate = func([]string) {
				if holding.Load() {
					<-hold
				}
			}
		}
	}}
	nodes := startCluster(t, 3, o)
	holding.Store(true) // node0 keeps node2 in its ring
	t.Cleanup(func() { close(hold) })
	nodes[2].stop(t, false)
	if n := nodes[0].srv.ClusterSize(); n != 3 {
		t.Fatalf("arrangement: node0's ring has %d nodes, want 3", n)
	}
	c := dialRaw(t, nodes[0].addr)
	c.send("flush_all\r\n")
	if got := c.line(); !strings.HasPrefix(got, "SERVER_ERROR flush_all failed on 1 of 3 nodes") {
		t.Errorf("flush_all through node0 with node2 crashed (still in node0's ring) answered %q, want SERVER_ERROR flush_all failed on 1 of 3 nodes", got)
	}
}

// ---- finding 6 ----

// A CAS unique a client got from a key's old owner must not match the value
// a new owner stored since: the cas must answer EXISTS or NOT_FOUND.
func TestCoherenceCASAcrossOwnershipChange(t *testing.T) {
	o := clusterOpts{picker: ring.PickerConfig{Epsilon: math.Inf(1)}}
	nodes := startCluster(t, 2, o)
	keys := keyRange("c6k", 60)
	c0 := dialRaw(t, nodes[0].addr)
	casOld := map[string]uint64{}
	before := map[string]string{}
	for _, k := range keys {
		rawSet(t, c0, k, "old", 0)
		before[k] = ownerOn(nodes[0], k)
	}
	for _, k := range keys {
		_, cas, hit := rawGetsCAS(t, c0, k)
		if !hit {
			t.Fatalf("gets %s: miss", k)
		}
		casOld[k] = cas
	}
	nodes = append(nodes, startNode(t, "node2", nodes, o))
	waitConverged(t, nodes)
	// The moved key with the largest unique from node0.
	key := ""
	for _, k := range keys {
		if before[k] == "node0" && ownerOn(nodes[2], k) == "node2" && (key == "" || casOld[k] > casOld[key]) {
			key = k
		}
	}
	if key == "" {
		t.Fatal("arrangement: no key moved from node0 to node2")
	}
	want := casOld[key]
	// Bring node2's writes up to just below that unique, as a naive
	// per-node counter would be after as many writes.
	c2 := dialRaw(t, nodes[2].addr)
	for i := 0; ; i++ {
		f := keyOwnedBy(t, nodes[2], fmt.Sprintf("c6fill%d-", i), "node2")
		rawSet(t, c2, f, "filler", 0)
		_, cas, _ := rawGetsCAS(t, c2, f)
		if cas+1 >= want || i > 1000 {
			t.Logf("node2's last filler unique %d; the client holds %d for %s", cas, want, key)
			break
		}
	}
	rawSet(t, c2, key, "other", 0) // another client's write at the new owner
	_, casNew, _ := rawGetsCAS(t, c2, key)
	t.Logf("%s: unique %d from node0 (value old), %d at node2 (value other)", key, want, casNew)
	c0.send(fmt.Sprintf("cas %s 0 0 4 %d\r\nmine\r\n", key, want))
	if got := c0.line(); got != "EXISTS" && got != "NOT_FOUND" {
		v, _ := rawGetValue(t, c2, key)
		t.Errorf("cas %s with unique %d from the old owner node0 (value \"old\") answered %q at the new owner node2, whose value \"other\" has unique %d; now %s = %q",
			key, want, got, casNew, key, v)
	}
}

// Items owned by different nodes never show the same CAS unique.
func TestCoherenceCASUniquesClusterWide(t *testing.T) {
	nodes := startCluster(t, 3, clusterOpts{picker: ring.PickerConfig{Epsilon: math.Inf(1)}})
	keys := keyRange("c6u", 100)
	c := dialRaw(t, nodes[0].addr)
	for _, k := range keys {
		rawSet(t, c, k, "v", 0)
	}
	byCAS := map[uint64][]string{}
	for _, k := range keys {
		_, cas, hit := rawGetsCAS(t, c, k)
		if !hit {
			t.Fatalf("gets %s: miss", k)
		}
		byCAS[cas] = append(byCAS[cas], k+"@"+ownerOn(nodes[0], k))
	}
	var dup []string
	for cas, ks := range byCAS {
		if len(ks) > 1 {
			dup = append(dup, fmt.Sprintf("%d: %s", cas, strings.Join(ks, " ")))
		}
	}
	sort.Strings(dup)
	if len(dup) > 0 {
		t.Errorf("%d CAS uniques shared by keys of different owners (unique: key@owner...); first: %s",
			len(dup), strings.Join(dup[:min(3, len(dup))], "; "))
	}
}

// ---- finding 7 ----

// A copy a node keeps of a spilled key expires no later than the owner's
// item, though the owner rounds the remaining TTL it sends to the nearest
// second.
func TestCoherenceCopyExpiryNotPastItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, nodes := startFakeCluster(t, 2, func(c *Config) {
			c.Cluster.CopyTTL = time.Hour // only the item's own expiry bounds the copy
		})
		key := ownedBy(nodes[0], "node0", "c7c", 1)[0]
		w := dialPipe(t, n, nodes[0].client())
		w.send("set " + key + " 0 2 1\r\nv\r\n")
		w.expect("STORED\r\n")
		// The remaining TTL falls to 1.7 s, which the owner rounds up to 2 s.
		time.Sleep(300 * time.Millisecond)
		if got := spillRead(t, n, nodes[1], "node0", key); got != "v" {
			t.Fatalf("spilled read: %q", got)
		}
		synctest.Wait() // ristretto admits the copy on a goroutine of its own
		if _, ok := nodes[1].srv.cl.copies.Peek(key); !ok {
			t.Fatal("node1 kept no copy")
		}
		time.Sleep(1700 * time.Millisecond) // the owner's item has just expired
		if got := spillRead(t, n, nodes[1], "node0", key); !strings.HasPrefix(got, "EN") {
			t.Errorf("node1 served %q after the owner's item expired", got)
		}
	})
}

// gat and touch of a key that moved to this node within the owner grace act
// on the moved value, as the other writes do: gat returns it, and a touch
// that expires it is not undone by the next warm read.
func TestCoherenceTouchGatDuringGrace(t *testing.T) {
	o := clusterOpts{picker: ring.PickerConfig{Epsilon: math.Inf(1)}}
	nodes, keys, before := joinAfterOld(t, o, "c7g", 200)
	var moved []string
	for _, k := range keys {
		if before[k] != "node2" && ownerOn(nodes[2], k) == "node2" {
			moved = append(moved, k)
		}
	}
	cases := []struct {
		name  string
		entry int // node the client talks to
		check func(t *testing.T, c *rawConn, key string)
	}{
		{"gat-at-new-owner", 2, checkGat},
		{"gat-via-other-node", 1, checkGat},
		{"touch-expire-at-new-owner", 2, checkTouchExpire},
		{"touch-expire-via-other-node", 1, checkTouchExpire},
	}
	if len(moved) < len(cases) {
		t.Fatalf("arrangement: %d keys moved to node2, want %d", len(moved), len(cases))
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, dialRaw(t, nodes[tc.entry].addr), moved[i])
		})
	}
}

// checkGat: gat of a moved key the new owner has not warmed returns the
// previous owner's value, and leaves it readable.
func checkGat(t *testing.T, c *rawConn, key string) {
	c.send("gat 100 " + key + "\r\n")
	v, hit := rawGetReply(t, c, key)
	if !hit || v != "old" {
		t.Errorf("gat 100 %s (moved to node2, not yet warmed) = %q (hit %v), want the moved value \"old\"", key, v, hit)
	}
}

// checkTouchExpire: touch with a negative exptime expires a moved key; the
// next read must not warm the previous owner's copy back.
func checkTouchExpire(t *testing.T, c *rawConn, key string) {
	c.send("touch " + key + " -1\r\n")
	if got := c.line(); got != "TOUCHED" {
		t.Errorf("touch %s -1 (moved to node2, not yet warmed) = %q, want TOUCHED", key, got)
	}
	if v, hit := rawGetValue(t, c, key); hit {
		t.Errorf("after touch %s -1 answered, get = %q: the previous owner's item was warmed back", key, v)
	}
}

// A node that crashes and comes back under its name at another address (a
// rescheduled pod) before failure detection is admitted at its new address
// once the old run is declared dead, not refused as a name conflict: every
// node ends up reading its keys through it.
func TestCoherenceRestartAtNewAddress(t *testing.T) {
	nodes := startCluster(t, 3, clusterOpts{})
	nodes[2].stop(t, false) // crash, and back before failure detection
	nodes[2] = startNode(t, "node2", nodes[:2], clusterOpts{})
	keys := keyRange("c9k", 30)
	w := dialRaw(t, nodes[2].addr)
	readers := []*rawConn{dialRaw(t, nodes[0].addr), dialRaw(t, nodes[1].addr), w}
	waitFor(t, func() bool {
		for _, k := range keys {
			rawSet(t, w, k, "v-"+k, 0)
		}
		for _, r := range readers {
			for _, k := range keys {
				if v, ok := rawGetValue(t, r, k); !ok || v != "v-"+k {
					return false
				}
			}
		}
		return true
	})
	// When gossip declares the old run dead, the others keep the new run
	// (found by review: they took the new run's boot for the one that
	// died, dropped its fence, and both sides owned its keys).
	boot := nodes[2].srv.cl.boot
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for _, nd := range nodes[:2] {
			cl := nd.srv.cl
			cl.mu.Lock()
			in, b := cl.view.Load().ring.Has("node2"), cl.boots["node2"]
			cl.mu.Unlock()
			if !in || b != boot {
				t.Fatalf("%s: node2's new run in view %v (boot %s, want %s)", cl.id, in, b, boot)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A write through another node to a node that is leaving gets an answer:
// the leaver refuses and names the entry node, whose own view still names
// the leaver, and the entry node then answers the client with an error
// rather than nothing (found by review: the client waited forever).
func TestCoherenceWriteDuringOwnersLeaveIsAnswered(t *testing.T) {
	nodes := startCluster(t, 2, clusterOpts{})
	key := keyOwnedBy(t, nodes[1], "lv", "node0")
	nodes[0].srv.cl.leave() // node0 owns nothing; node1 has not heard yet
	c := dialRaw(t, nodes[1].addr)
	c.send("set " + key + " 0 0 1\r\nx\r\n")
	if got := c.line(); got != "SERVER_ERROR "+errHandoff.Error() {
		t.Fatalf("set during the owner's leave: %q", got)
	}
	c.send("set " + key + " 0 0 1 noreply\r\nx\r\nmn\r\n")
	if got := c.line(); got != "MN" {
		t.Fatalf("noreply set during the owner's leave, then mn: %q", got)
	}
}

// A fence holds while gossip lags longer than FenceTTL: the joiner fences
// again the members whose gossip has not told them of it (found by
// review: a name back at another address waited ~20 s for gossip, past
// the fence, and two nodes owned its keys).
func TestCoherenceFenceRenewedWhileGossipLags(t *testing.T) {
	const ttl = 200 * time.Millisecond
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	o := clusterOpts{tune: func(name string, cfg *Config) {
		cfg.Cluster.FenceTTL = ttl
		if name == "node0" {
			cfg.Cluster.viewGate = func(members []string) {
				if slices.Contains(members, "node2") {
					<-release // node0's gossip view never gets node2
				}
			}
		}
	}}
	// Two nodes: no third member can name the joiner to node0 again.
	nodes := startCluster(t, 1, o)
	nodes = append(nodes, startNode(t, "node2", nodes, o))
	held := nodes[0].srv.cl
	waitFor(t, func() bool { return held.view.Load().ring.Has("node2") }) // the fence
	deadline := time.Now().Add(5 * ttl)
	for time.Now().Before(deadline) {
		if !held.view.Load().ring.Has("node2") {
			t.Fatal("node0 dropped node2 from its view when the fence lapsed, while its gossip still lagged")
		}
		time.Sleep(10 * time.Millisecond)
	}
	once.Do(func() { close(release) })
}
