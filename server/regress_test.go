package server

import (
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"spillway/peers/wire"
	"spillway/ring"
	"spillway/store"
)

// gateOrigin blocks every load until release is closed.
type gateOrigin struct{ release chan struct{} }

func (o gateOrigin) Load(ctx context.Context, key string) (store.Item, error) {
	select {
	case <-o.release:
	case <-ctx.Done():
		return store.Item{}, ctx.Err()
	}
	return store.Item{Key: key, Value: []byte("from-origin")}, nil
}

// An origin fill that started before a set must not overwrite the set's
// value: the client's write wins.
func TestRegressOriginFillClobbersSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := gateOrigin{make(chan struct{})}
		n, _ := startPipeServer(t, Config{Origin: o})
		r := dialPipe(t, n, "client")
		r.send("get k\r\n")
		synctest.Wait() // the get misses and waits in the origin
		w := dialPipe(t, n, "client")
		w.send("set k 0 0 7\r\nwritten\r\n")
		w.expect("STORED\r\n")
		close(o.release)
		// The fill finds the client's value and serves that.
		r.expect("VALUE k 0 7\r\nwritten\r\nEND\r\n")
		w.send("get k\r\n")
		if got := w.line(); got != "VALUE k 0 7" {
			t.Fatalf("after STORED, get k returns %q: the origin fill overwrote the client's set", got)
		}
	})
}

// With an origin configured (or in a cluster), mg on a stale item the node
// owns still hands out the W token once.
func TestRegressNoWinTokenWhenRouted(t *testing.T) {
	for _, withOrigin := range []bool{false, true} {
		cfg := Config{}
		if withOrigin {
			cfg.Origin = &countingOrigin{}
		}
		addr, _ := startServer(t, cfg)
		c := dialRaw(t, addr)
		c.send("set k 0 0 1\r\nx\r\nmd k I\r\nmg k\r\nmg k\r\n")
		c.expect("STORED\r\nHD\r\n")
		first, second := c.line(), c.line()
		t.Logf("origin=%v: mg after md I: %q then %q", withOrigin, first, second)
		if !strings.Contains(first, "W") {
			t.Errorf("origin=%v: first mg of an invalidated item got no W token: %q", withOrigin, first)
		}
	}
}

// A base64 (b flag) key can hold any byte: sent to a peer, it must not
// become a second request whose reply another client would read.
func TestRegressBinaryKeyInjection(t *testing.T) {
	nodes := startCluster(t, 2, clusterOpts{picker: ring.PickerConfig{Epsilon: math.Inf(1)}})
	owner := func(k string) string { return nodes[0].srv.cl.view.Load().ring.Owner(k) }
	var evilKey string
	for i := 0; ; i++ {
		k := fmt.Sprintf("x%d v\r\nmg evil", i)
		if owner(k) == "node1" {
			evilKey = k
			break
		}
	}
	victim := ""
	for i := 0; ; i++ {
		if k := fmt.Sprintf("victim%d", i); owner(k) == "node1" {
			victim = k
			break
		}
	}
	admin := dialRaw(t, nodes[1].addr)
	admin.send("set evil 0 0 6\r\npwned!\r\nset " + victim + " 0 0 4\r\ngood\r\n")
	admin.expect("STORED\r\nSTORED\r\n")

	attacker := dialRaw(t, nodes[0].addr)
	attacker.send("mg " + base64.StdEncoding.EncodeToString([]byte(evilKey)) + " b v\r\n")
	t.Logf("attacker got %q", attacker.line())

	honest := dialRaw(t, nodes[0].addr)
	honest.send("get " + victim + "\r\n")
	got := honest.line()
	if got != "VALUE "+victim+" 0 4" {
		rest := honest.line()
		t.Fatalf("honest client's get %s returned %q %q: another client's injected reply", victim, got, rest)
	}
}

// The client idle timeout does not close peer connections, and a pooled
// connection the owner closed is redialled: a forwarded write succeeds.
func TestRegressIdlePeerConnFailsWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, nodes := startFakeCluster(t, 2, func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
		key := ownedBy(nodes[0], "node1", "k", 1)[0]
		c := dialPipe(t, n, nodes[0].client())
		c.send("set " + key + " 0 0 1\r\na\r\n")
		c.expect("STORED\r\n")
		time.Sleep(600 * time.Millisecond) // past the idle timeout: c is closed
		c2 := dialPipe(t, n, nodes[0].client())
		c2.send("set " + key + " 0 0 1\r\nb\r\n")
		if got := c2.line(); got != "STORED" {
			t.Fatalf("forwarded set to a healthy owner: %q", got)
		}
	})
}

// A delete at the new owner during the grace after a join deletes the
// key (and at the previous owner), so no later get brings it back.
func TestRegressDeleteDuringGraceResurrects(t *testing.T) {
	o := clusterOpts{picker: ring.PickerConfig{Epsilon: math.Inf(1)}}
	nodes := startCluster(t, 2, o)
	c := dialRaw(t, nodes[0].addr)
	for i := range 200 {
		c.send(fmt.Sprintf("set gk%d 0 0 3\r\nold\r\n", i))
		c.expect("STORED\r\n")
	}
	nodes = append(nodes, startNode(t, "node2", nodes, o))
	waitConverged(t, nodes)
	var key string
	for i := range 200 {
		if k := fmt.Sprintf("gk%d", i); nodes[0].srv.cl.view.Load().ring.Owner(k) == "node2" {
			key = k
			break
		}
	}
	if key == "" {
		t.Skip("no key moved")
	}
	c.send("delete " + key + "\r\n")
	del := c.line()
	c.send("get " + key + "\r\n")
	got := c.line()
	if del != "DELETED" || got != "END" {
		if got != "END" {
			c.line()
			c.line()
		}
		t.Fatalf("delete %s -> %q, then get -> %q", key, del, got)
	}
}

// A forwarded mg with q answers exactly as the owner does (hits shown).
func TestRegressQuietMgForwarded(t *testing.T) {
	nodes := startCluster(t, 2, clusterOpts{})
	var key string
	for i := 0; ; i++ {
		if k := fmt.Sprintf("q%d", i); nodes[0].srv.cl.view.Load().ring.Owner(k) == "node1" {
			key = k
			break
		}
	}
	local := dialRaw(t, nodes[1].addr)
	local.send("set " + key + " 0 0 1\r\nx\r\nmg " + key + " T60 q\r\nmn\r\n")
	local.expect("STORED\r\n")
	l := local.line()
	remote := dialRaw(t, nodes[0].addr)
	remote.send("mg " + key + " T60 q\r\nmn\r\n")
	r := remote.line()
	if l != r {
		t.Fatalf("mg T60 q on a hit: owner answers %q, entry node answers %q", l, r)
	}
}

// A slow origin load at the owner does not make the entry node give up
// and load the key from the origin a second time.
func TestRegressSlowOriginDoubleLoad(t *testing.T) {
	origin := &countingOrigin{gate: make(chan struct{})}
	nodes := startCluster(t, 2, clusterOpts{origin: origin, picker: ring.PickerConfig{Epsilon: math.Inf(1)}})
	var key string
	for i := 0; ; i++ {
		if k := fmt.Sprintf("s%d", i); nodes[0].srv.cl.view.Load().ring.Owner(k) == "node1" {
			key = k
			break
		}
	}
	time.AfterFunc(1500*time.Millisecond, func() { close(origin.gate) })
	c := dialRaw(t, nodes[0].addr)
	start := time.Now()
	c.send("get " + key + "\r\n")
	t.Logf("reply %q after %v", c.line(), time.Since(start))
	if n := origin.count(key); n != 1 {
		t.Fatalf("one get of one key: %d origin loads", n)
	}
}

var _ = strings.Contains

// The node hash in peer tags is the same in every process, so the owner
// finds the copy holder and invalidates it.
func TestRegressInvalidationAcrossProcesses(t *testing.T) {
	nodes := startCluster(t, 2, clusterOpts{copyTTL: time.Hour})
	var key string
	for i := 0; ; i++ {
		if k := fmt.Sprintf("i%d", i); nodes[0].srv.cl.view.Load().ring.Owner(k) == "node0" {
			key = k
			break
		}
	}
	w := dialRaw(t, nodes[0].addr)
	w.send("set " + key + " 0 0 2\r\nv1\r\n")
	w.expect("STORED\r\n")
	p := dialRaw(t, nodes[1].peer) // a read routed to node1: it keeps a copy
	p.send("mg " + key + " v Ofwd.1\r\n")
	p.line()
	p.line()
	w.send("set " + key + " 0 0 2\r\nv2\r\n")
	w.expect("STORED\r\n")
	r := dialRaw(t, nodes[1].addr)
	r.send("get " + key + "\r\n")
	r.line()
	if v := r.line(); v != "v2" {
		t.Fatalf("read after STORED at node1: %q (invalidations sent: %d)", v, nodes[0].srv.counters[ctrInvalidations].Load())
	}
}

// A multi-key get whose target does not answer costs one peer timeout,
// not one per key.
func TestRegressDeadPeerSerialFallback(t *testing.T) {
	nodes := startCluster(t, 2, clusterOpts{picker: ring.PickerConfig{Epsilon: math.Inf(1)}})
	hole, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer hole.Close()
	v := *nodes[0].srv.cl.view.Load()
	v.clients = map[string]*wire.Client{"node1": wire.New(wire.Config{Addr: hole.Addr().String(), MaxIdle: 4})}
	nodes[0].srv.cl.view.Store(&v)
	var keys []string
	for i := 0; len(keys) < 8; i++ {
		if k := fmt.Sprintf("d%d", i); v.ring.Owner(k) == "node1" {
			keys = append(keys, k)
		}
	}
	c := dialRaw(t, nodes[0].addr)
	start := time.Now()
	c.send("get " + strings.Join(keys, " ") + "\r\n")
	c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	l, _ := c.r.ReadString('\n')
	t.Logf("get of %d keys on an unresponsive owner: %q after %v", len(keys), l, time.Since(start))
	if d := time.Since(start); d > 2*nodes[0].srv.cl.fetchTimeout {
		t.Fatalf("client waited %v", d)
	}
}

// A set over the item size limit deletes the old value at the key's
// owner, as memcached deletes it.
func TestRegressTooLargeSetKeepsOldValueAtOwner(t *testing.T) {
	nodes := startCluster(t, 2, clusterOpts{})
	var key string
	for i := 0; ; i++ {
		if k := fmt.Sprintf("t%d", i); nodes[0].srv.cl.view.Load().ring.Owner(k) == "node1" {
			key = k
			break
		}
	}
	c := dialRaw(t, nodes[0].addr)
	c.send("set " + key + " 0 0 3\r\nold\r\n")
	c.expect("STORED\r\n")
	big := strings.Repeat("x", DefaultMaxItemSize+1)
	c.send(fmt.Sprintf("set %s 0 0 %d\r\n%s\r\n", key, len(big), big))
	t.Logf("too-large set: %q", c.line())
	c.send("get " + key + "\r\n")
	if got := c.line(); got != "END" {
		t.Fatalf("after a refused set, get returns %q (memcached: the old value is gone)", got)
	}
}
