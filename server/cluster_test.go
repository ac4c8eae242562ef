package server

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/hashicorp/memberlist"

	"spillway/peers"
	"spillway/ring"
	"spillway/store"
)

// testNode is one member of an in-process cluster on loopback ports.
type testNode struct {
	srv    *Server
	addr   string // client port
	peer   string // peer port
	gossip string
	done   chan error
	closed bool
}

// clusterOpts tunes startCluster.
type clusterOpts struct {
	picker  ring.PickerConfig
	origin  Origin
	copyTTL time.Duration
	idle    time.Duration // client idle timeout
	// tune, if set, adjusts each node's Config before it starts (any
	// ClusterConfig field, including test hooks such as viewGate).
	tune func(name string, cfg *Config)
	// clientAddr and peerAddr, if set, are where the node listens (a
	// restart under the same addresses); "" picks a free loopback port.
	clientAddr, peerAddr string
}

// startCluster starts n nodes that gossip over 127.0.0.1 and waits until
// every node sees all of them.
func startCluster(t testing.TB, n int, o clusterOpts) []*testNode {
	t.Helper()
	var nodes []*testNode
	for i := range n {
		nodes = append(nodes, startNode(t, fmt.Sprintf("node%d", i), nodes, o))
	}
	waitConverged(t, nodes)
	return nodes
}

func startNode(t testing.TB, name string, seeds []*testNode, o clusterOpts) *testNode {
	t.Helper()
	ln, err := net.Listen("tcp", cmp.Or(o.clientAddr, "127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	pln, err := net.Listen("tcp", cmp.Or(o.peerAddr, "127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	var join []string
	for _, s := range seeds {
		if !s.closed {
			join = append(join, s.gossip)
		}
	}
	cfg := Config{
		Logger:      quietLogger().With("node", name),
		Origin:      o.origin,
		IdleTimeout: o.idle,
		Cluster: &ClusterConfig{
			Peers: peers.Config{
				Name:     name,
				BindAddr: "127.0.0.1",
				Join:     join,
				Profile:  peers.Local,
				Logger:   quietLogger().With("node", name),
				Tune:     fastGossip,
				Meta:     peers.Meta{Client: ln.Addr().String(), Peer: pln.Addr().String()},
			},
			Picker:  o.picker,
			CopyTTL: o.copyTTL,
		},
	}
	if o.tune != nil {
		o.tune(name, &cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nd := &testNode{srv: srv, addr: ln.Addr().String(), peer: pln.Addr().String(),
		gossip: srv.cl.peers.GossipAddr(), done: make(chan error, 2)}
	go func() { nd.done <- srv.Serve(ln) }()
	go func() { nd.done <- srv.ServePeers(pln) }()
	t.Cleanup(func() { nd.stop(t, false) })
	return nd
}

// fastGossip makes failure detection take about a second, so that tests of
// node death wait for events rather than for LAN timeouts.
func fastGossip(c *memberlist.Config) {
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 100 * time.Millisecond
	c.GossipInterval = 50 * time.Millisecond
	c.SuspicionMult = 2
}

// stop closes the node: gracefully (leave the cluster) or as a crash.
func (nd *testNode) stop(t testing.TB, graceful bool) {
	if nd.closed {
		return
	}
	nd.closed = true
	if graceful {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		nd.srv.Shutdown(ctx)
	} else {
		nd.srv.Close()
	}
	for range 2 {
		if err := <-nd.done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	}
}

func waitConverged(t testing.TB, nodes []*testNode) {
	t.Helper()
	live := 0
	for _, nd := range nodes {
		if !nd.closed {
			live++
		}
	}
	converged := func() bool {
		for _, nd := range nodes {
			if nd.closed {
				continue
			}
			v := nd.srv.cl.view.Load()
			if v.ring.Len() != live {
				return false
			}
			select {
			case <-v.done: // the hand-off fence completed
			default:
				return false
			}
		}
		return true
	}
	// On failure, say which node is behind, and how: its ring, or its
	// hand-off fence.
	waitForExplained(t, converged, func() {
		for _, nd := range nodes {
			if !nd.closed {
				v := nd.srv.cl.view.Load()
				t.Logf("%s: ring %v, hand-off complete %v", nd.srv.ID(), v.ring.Nodes(), isClosed(v.done))
			}
		}
	})
}

// countingOrigin serves "value-of-<key>" for keys without "missing" and
// counts its loads per key.
type countingOrigin struct {
	mu    sync.Mutex
	loads map[string]int
	total atomic.Int64
	gate  chan struct{} // if set, loads wait for it, to make fills overlap
}

func (o *countingOrigin) Load(ctx context.Context, key string) (store.Item, error) {
	o.total.Add(1)
	o.mu.Lock()
	if o.loads == nil {
		o.loads = map[string]int{}
	}
	o.loads[key]++
	o.mu.Unlock()
	if o.gate != nil {
		select {
		case <-o.gate:
		case <-ctx.Done():
			return store.Item{}, ctx.Err()
		}
	}
	if bytes.Contains([]byte(key), []byte("missing")) {
		return store.Item{}, ErrOriginMiss
	}
	return store.Item{Key: key, Value: []byte("value-of-" + key)}, nil
}

func (o *countingOrigin) count(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.loads[key]
}

func TestClusterIsOneCache(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(strconv.Itoa(n)+"nodes", func(t *testing.T) {
			nodes := startCluster(t, n, clusterOpts{})
			clients := make([]*memcache.Client, n)
			for i, nd := range nodes {
				clients[i] = newClient(t, nd.addr)
			}
			// Every key written through one node reads the same through
			// every node, whichever node owns it.
			for k := range 60 {
				key := fmt.Sprintf("key-%d", k)
				w := clients[k%n]
				val := []byte(fmt.Sprintf("v%d", k))
				if err := w.Set(&memcache.Item{Key: key, Value: val, Flags: uint32(k)}); err != nil {
					t.Fatal(err)
				}
				for i, c := range clients {
					it, err := c.Get(key)
					if err != nil {
						t.Fatalf("node %d get %s: %v", i, key, err)
					}
					if !bytes.Equal(it.Value, val) || it.Flags != uint32(k) {
						t.Fatalf("node %d get %s = %q/%d, want %q/%d", i, key, it.Value, it.Flags, val, k)
					}
				}
			}
			// Multi-key gets are answered in the client's order.
			keys := []string{"key-5", "nokey", "key-1", "key-17", "key-2"}
			m, err := clients[0].GetMulti(keys)
			if err != nil {
				t.Fatal(err)
			}
			if len(m) != 4 {
				t.Fatalf("GetMulti = %d items", len(m))
			}
			c := dialRaw(t, nodes[1].addr)
			c.send("get key-5 nokey key-1\r\n")
			c.expect("VALUE key-5 5 2\r\nv5\r\nVALUE key-1 1 2\r\nv1\r\nEND\r\n")

			// Writes of every kind reach the owner.
			if err := clients[1].Delete("key-3"); err != nil {
				t.Fatal(err)
			}
			for i, c := range clients {
				if _, err := c.Get("key-3"); !errors.Is(err, memcache.ErrCacheMiss) {
					t.Fatalf("node %d after delete: %v", i, err)
				}
			}
			clients[2%n].Set(&memcache.Item{Key: "ctr", Value: []byte("0")})
			for i := range 30 {
				if _, err := clients[i%n].Increment("ctr", 1); err != nil {
					t.Fatal(err)
				}
			}
			it, err := clients[0].Get("ctr")
			if err != nil || string(it.Value) != "30" {
				t.Fatalf("ctr = %v %v", it, err)
			}

			// gets on one node, cas on another.
			it, err = clients[0].Get("key-7")
			if err != nil {
				t.Fatal(err)
			}
			it.Value = []byte("swapped")
			// gomemcache keeps the CAS unique inside the item; send the
			// cas through another node with a raw client instead.
			cas := casOf(t, nodes[0].addr, "key-7")
			rc := dialRaw(t, nodes[n-1].addr)
			rc.send(fmt.Sprintf("cas key-7 0 0 7 %d\r\nswapped\r\n", cas))
			rc.expect("STORED\r\n")
			rc.send(fmt.Sprintf("cas key-7 0 0 4 %d\r\nlost\r\n", cas))
			rc.expect("EXISTS\r\n")
			for i, c := range clients {
				got, err := c.Get("key-7")
				if err != nil || string(got.Value) != "swapped" {
					t.Fatalf("node %d key-7 = %v %v", i, got, err)
				}
			}

			// flush_all reaches every node.
			if err := clients[0].FlushAll(); err != nil {
				t.Fatal(err)
			}
			for i, c := range clients {
				if _, err := c.Get("key-9"); !errors.Is(err, memcache.ErrCacheMiss) {
					t.Fatalf("node %d after flush_all: %v", i, err)
				}
			}
		})
	}
}

// casOf reads key's CAS unique with a raw gets.
func casOf(t testing.TB, addr, key string) uint64 {
	t.Helper()
	c := dialRaw(t, addr)
	c.send("gets " + key + "\r\n")
	var k string
	var flags, n int
	var cas uint64
	if _, err := fmt.Sscanf(c.line(), "VALUE %s %d %d %d", &k, &flags, &n, &cas); err != nil {
		t.Fatalf("gets %s: %v", key, err)
	}
	c.line()
	c.line()
	return cas
}

// hotReads sends count gets of key spread round-robin over the nodes and
// checks every value with check.
func hotReads(t testing.TB, nodes []*testNode, key string, count int, check func([]byte) error) {
	t.Helper()
	var clients []*memcache.Client
	for _, nd := range nodes {
		if !nd.closed {
			clients = append(clients, newClient(t, nd.addr))
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < count; i += 8 {
				it, err := clients[i%len(clients)].Get(key)
				if err == nil {
					err = check(it.Value)
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestHotKeySpillsWithOneOriginLoad: a hot key read through every node
// spills from its owner to others, which read it through from the owner;
// the origin sees it once.
func TestHotKeySpillsWithOneOriginLoad(t *testing.T) {
	origin := &countingOrigin{}
	nodes := startCluster(t, 3, clusterOpts{
		origin: origin,
		picker: ring.PickerConfig{Epsilon: 0.1},
	})
	want := []byte("value-of-hot")
	hotReads(t, nodes, "hot", 3000, func(v []byte) error {
		if !bytes.Equal(v, want) {
			return fmt.Errorf("hot = %q", v)
		}
		return nil
	})
	if got := origin.count("hot"); got != 1 {
		t.Fatalf("origin loads of the hot key = %d, want 1", got)
	}
	servedBy := 0
	var spilled uint64
	for _, nd := range nodes {
		if nd.srv.counters[ctrServed].Load() > 0 {
			servedBy++
		}
		spilled += nd.srv.counters[ctrSpilledServed].Load()
	}
	if servedBy < 2 || spilled == 0 {
		t.Fatalf("hot key served by %d nodes, %d spilled fills: want it spread", servedBy, spilled)
	}
	t.Logf("hot key: served by %d nodes, %d spilled fills, 1 origin load", servedBy, spilled)
}

// TestWritesInvalidateCopies: after a write through any node, no node
// serves the old value from a copy.
func TestWritesInvalidateCopies(t *testing.T) {
	nodes := startCluster(t, 3, clusterOpts{
		picker:  ring.PickerConfig{Epsilon: 0.05},
		copyTTL: time.Hour, // only invalidation can make this test pass
	})
	w := newClient(t, nodes[0].addr)
	for round := range 5 {
		val := []byte("v" + strconv.Itoa(round))
		if round%2 == 1 {
			// A delete must invalidate too.
			if err := w.Delete("k"); err != nil && round > 0 {
				t.Fatal(err)
			}
			for _, nd := range nodes {
				if _, err := newClient(t, nd.addr).Get("k"); !errors.Is(err, memcache.ErrCacheMiss) {
					t.Fatalf("round %d: stale read after delete: %v", round, err)
				}
			}
		}
		if err := newClient(t, nodes[round%3].addr).Set(&memcache.Item{Key: "k", Value: val}); err != nil {
			t.Fatal(err)
		}
		hotReads(t, nodes, "k", 600, func(v []byte) error {
			if !bytes.Equal(v, val) {
				return fmt.Errorf("round %d: stale read %q, want %q", round, v, val)
			}
			return nil
		})
	}
	copies := 0
	for _, nd := range nodes {
		copies += int(nd.srv.counters[ctrInvalidations].Load())
	}
	if copies == 0 {
		t.Fatal("no invalidation was ever sent: the test did not make copies")
	}
}

// TestNodeDeathMidLoad: a crashed node costs no wrong value, and reads of
// its keys work again within the failure-detection time.
func TestNodeDeathMidLoad(t *testing.T) {
	origin := &countingOrigin{}
	nodes := startCluster(t, 3, clusterOpts{origin: origin})
	keys := make([]string, 50)
	for i := range keys {
		keys[i] = fmt.Sprintf("dk-%d", i)
	}
	// Readers on the two surviving nodes read every key in a loop while
	// the third node dies. Errors are allowed until failure detection
	// removes it; a wrong value never is.
	stop := make(chan struct{})
	var wrong atomic.Value
	var reads, failed atomic.Int64
	var wg sync.WaitGroup
	for _, nd := range nodes[:2] {
		c := newClient(t, nd.addr)
		wg.Go(func() {
			deadline := time.Now().Add(30 * time.Second)
			for i := 0; time.Now().Before(deadline); i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := keys[i%len(keys)]
				it, err := c.Get(k)
				reads.Add(1)
				switch {
				case err != nil:
					failed.Add(1)
				case string(it.Value) != "value-of-"+k:
					wrong.Store(fmt.Sprintf("%s = %q", k, it.Value))
				}
			}
		})
	}
	waitFor(t, func() bool { return reads.Load() > 200 })
	nodes[2].stop(t, false)
	waitFor(t, func() bool {
		return nodes[0].srv.cl.view.Load().ring.Len() == 2 && nodes[1].srv.cl.view.Load().ring.Len() == 2
	})
	after := reads.Load()
	waitFor(t, func() bool { return reads.Load() > after+200 })
	close(stop)
	wg.Wait()
	if w := wrong.Load(); w != nil {
		t.Fatalf("wrong value while a node died: %v", w)
	}
	t.Logf("%d reads, %d failed while the dead node was still in the ring", reads.Load(), failed.Load())
	// Once the others have noticed, every key reads.
	for _, nd := range nodes[:2] {
		c := newClient(t, nd.addr)
		for _, k := range keys {
			it, err := c.Get(k)
			if err != nil || string(it.Value) != "value-of-"+k {
				t.Fatalf("after failure detection, %s: %v %v", k, it, err)
			}
		}
	}
}

// TestJoinWarmsFromPreviousOwners: a new node reads keys it now owns from
// their previous owners, not from the origin.
func TestJoinWarmsFromPreviousOwners(t *testing.T) {
	origin := &countingOrigin{}
	o := clusterOpts{origin: origin, picker: ring.PickerConfig{Epsilon: math.Inf(1)}}
	nodes := startCluster(t, 3, o)
	c := newClient(t, nodes[0].addr)
	const n = 300
	for i := range n {
		if _, err := c.Get(fmt.Sprintf("wk-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	before := origin.total.Load()
	if before != n {
		t.Fatalf("origin loads = %d, want %d", before, n)
	}
	nodes = append(nodes, startNode(t, "node3", nodes, o))
	waitConverged(t, nodes)
	moved := 0
	for i := range n {
		k := fmt.Sprintf("wk-%d", i)
		if nodes[0].srv.cl.view.Load().ring.Owner(k) == "node3" {
			moved++
		}
		it, err := c.Get(k)
		if err != nil || string(it.Value) != "value-of-"+k {
			t.Fatalf("get %s after join: %v %v", k, it, err)
		}
	}
	extra := origin.total.Load() - before
	t.Logf("join: %d of %d keys moved to the new node; %d origin loads", moved, n, extra)
	if moved == 0 {
		t.Fatal("no key moved to the new node")
	}
	if extra > int64(moved/20) {
		t.Fatalf("join caused %d origin loads for %d moved keys", extra, moved)
	}
}

// A key another node owns, read often at one node, is kept there as a
// copy (hot.go): its reads stop going to the owner, and a write still
// reaches the copy, which is dropped before the write answers.
func TestHotCopies(t *testing.T) {
	nodes := startCluster(t, 2, clusterOpts{picker: ring.PickerConfig{Epsilon: math.Inf(1)}})
	entry := nodes[0]
	key := keyOwnedBy(t, entry, "hot:", nodes[1].srv.ID())
	c := dialRaw(t, entry.addr)
	c.send("set " + key + " 0 0 2\r\nv1\r\n")
	c.expect("STORED\r\n")
	get := func(want string) {
		t.Helper()
		c.send("get " + key + "\r\n")
		c.expect("VALUE " + key + " 0 2\r\n" + want + "\r\nEND\r\n")
	}
	for range DefaultHotCopies + 50 {
		get("v1")
	}
	if got := entry.srv.counters[ctrForwarded].Load(); got >= DefaultHotCopies+2 {
		t.Errorf("%d of %d reads went to the owner, want fewer than %d", got, DefaultHotCopies+50, DefaultHotCopies+2)
	}
	if _, ok := entry.srv.cl.copies.Get(key); !ok {
		t.Fatal("no copy of the hot key at the node that reads it")
	}
	c.send("set " + key + " 0 0 2\r\nv2\r\n")
	c.expect("STORED\r\n")
	get("v2")
	// Through the owner too: the copy's invalidation came from there.
	o := dialRaw(t, nodes[1].addr)
	o.send("set " + key + " 0 0 2\r\nv3\r\n")
	o.expect("STORED\r\n")
	get("v3")
}

// A node that does not advertise shared reads (one of before them, in a
// cluster being upgraded) is read the older way: a key it would fill from
// the origin is filled, not missed as an unknown request would be.
func TestSharedReadsOnlyToNodesThatAdvertiseThem(t *testing.T) {
	origin := OriginFunc(func(_ context.Context, key string) (store.Item, error) {
		return store.Item{Key: key, Value: []byte("from-origin")}, nil
	})
	nodes := startCluster(t, 2, clusterOpts{origin: origin, picker: ring.PickerConfig{Epsilon: math.Inf(1)},
		tune: func(name string, cfg *Config) {
			cfg.Cluster.noSharedReads = name == "node1"
			cfg.Cluster.HotCopies = -1
		}})
	c := dialRaw(t, nodes[0].addr)
	for i := range 20 {
		key := keyOwnedBy(t, nodes[0], fmt.Sprintf("cold%d:", i), nodes[1].srv.ID())
		c.send("get " + key + "\r\n")
		c.expect("VALUE " + key + " 0 11\r\nfrom-origin\r\nEND\r\n")
	}
}

// The read-through of a spilled or hot key asks its owner on the
// connections shared reads use (the hgt tag), which the owner answers as
// a fetch (get) when it holds the key — the reader registered as a holder
// first — and at once otherwise: EN where a fetch would miss, NS where a
// fetch would wait for a write round or fill the key.
func TestSharedFetchAnswers(t *testing.T) {
	origin := &countingOrigin{}
	nodes := startCluster(t, 2, clusterOpts{origin: origin, picker: ring.PickerConfig{Epsilon: math.Inf(1)},
		tune: func(_ string, cfg *Config) {
			cfg.Cluster.InvalidateTimeout = time.Minute
			cfg.Cluster.HotCopies = -1
		}})
	reader, owner := nodes[0], nodes[1]
	held := keyOwnedBy(t, reader, "held:", owner.srv.ID())
	cold := keyOwnedBy(t, reader, "cold:", owner.srv.ID())
	writing := keyOwnedBy(t, reader, "writing:", owner.srv.ID())
	notOwned := keyOwnedBy(t, reader, "mine:", reader.srv.ID())
	w := dialRaw(t, owner.addr)
	for _, k := range []string{held, writing, notOwned} {
		w.send("set " + k + " 0 0 1\r\nv\r\n")
		w.expect("STORED\r\n")
	}
	_, round := owner.srv.cl.holders.begin(writing) // a write whose invalidations have not ended
	defer round.end()
	p := dialRaw(t, owner.peer)
	ask := func(key string, from uint64) string {
		t.Helper()
		p.send("mg " + key + " v O" + tagHeldGet + strconv.FormatUint(from, 36) + "\r\n")
		code, _, _ := strings.Cut(p.line(), " ") // a miss echoes the tag
		if code == "VA" {
			return p.line()
		}
		return code
	}
	me := idHash(reader.srv.ID())
	cases := []struct {
		name, key string
		from      uint64
		want      string
		holder    bool // the reader is registered as the key's holder after
	}{
		{"held", held, me, "v", true},
		{"not held, the origin would fill it", cold, me, "NS", false},
		{"a write round open", writing, me, "NS", false},
		{"not owned here", notOwned, me, "EN", false},
		{"asked by a node not in the view", held, idHash("stranger"), "EN", false},
	}
	for _, tc := range cases {
		if got := ask(tc.key, tc.from); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		took := owner.srv.cl.holders.take(tc.key, time.Now())
		if got := slices.Contains(took, me); got != tc.holder {
			t.Errorf("%s: reader registered as a holder: %v, want %v", tc.name, got, tc.holder)
		}
	}
	if got := origin.total.Load(); got != 0 {
		t.Errorf("origin loads for shared fetches: %d, want 0 (a fill is asked for with get)", got)
	}
}

// A read-through that its owner answers NS on the shared connections is
// asked again with get, on a connection of its own: the key is filled
// and kept as a copy. A node of before shared fetches is asked with get
// only: it does not know the hgt tag, and would serve the request as a
// client's mg, from its store, without registering the reader as a
// holder. (The test's stand-in for such a node, noSharedReads, answers
// hgt with a miss, which the test sees.)
func TestSharedFetchFallsBack(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(fmt.Sprintf("owner of before=%v", old), func(t *testing.T) {
			nodes := startCluster(t, 2, clusterOpts{origin: &countingOrigin{}, picker: ring.PickerConfig{Epsilon: math.Inf(1)},
				tune: func(name string, cfg *Config) {
					cfg.Cluster.noSharedReads = old && name == "node1"
					cfg.Cluster.HotCopies = 1 // the first read of a key is read through
				}})
			reader, owner := nodes[0], nodes[1]
			c := dialRaw(t, reader.addr)
			for i := range 5 {
				stored := keyOwnedBy(t, reader, fmt.Sprintf("stored%d:", i), owner.srv.ID())
				o := dialRaw(t, owner.addr)
				o.send("set " + stored + " 0 0 6\r\nstored\r\n")
				o.expect("STORED\r\n")
				cold := keyOwnedBy(t, reader, fmt.Sprintf("cold%d:", i), owner.srv.ID())
				for _, kv := range [][2]string{{stored, "stored"}, {cold, "value-of-" + cold}} {
					c.send("get " + kv[0] + "\r\n")
					c.expect(fmt.Sprintf("VALUE %s 0 %d\r\n%s\r\nEND\r\n", kv[0], len(kv[1]), kv[1]))
					waitFor(t, func() bool { _, ok := reader.srv.cl.copies.Peek(kv[0]); return ok })
				}
			}
			// Each cold key was answered NS on the shared connections
			// first, unless the owner is one of before (asked with get).
			want := "5"
			if old {
				want = "0"
			}
			if got := statOf(t, reader.addr, "peer_reads_streamed"); got != want {
				t.Errorf("peer_reads_streamed: %s, want %s", got, want)
			}
		})
	}
}

// A shared read never waits at the node that serves it: a write round of
// its key under way (which a read there waits for, so that no client sees
// the new value and then a copy's old one) is answered NS, and the read
// goes on a connection of its own; the reads of other keys that share the
// connection go on meanwhile.
func TestSharedReadsDoNotWaitForWriteRounds(t *testing.T) {
	nodes := startCluster(t, 2, clusterOpts{picker: ring.PickerConfig{Epsilon: math.Inf(1)},
		tune: func(_ string, cfg *Config) {
			cfg.Cluster.InvalidateTimeout = time.Minute
			cfg.Cluster.HotCopies = -1
		}})
	entry, owner := nodes[0], nodes[1]
	slow := keyOwnedBy(t, entry, "slow:", owner.srv.ID())
	other := keyOwnedBy(t, entry, "other:", owner.srv.ID())
	w := dialRaw(t, entry.addr)
	for _, k := range []string{slow, other} {
		w.send("set " + k + " 0 0 1\r\nv\r\n")
		w.expect("STORED\r\n")
	}
	// A write of slow at its owner whose invalidations have not ended.
	_, round := owner.srv.cl.holders.begin(slow)
	slowDone := make(chan struct{})
	go func() {
		defer close(slowDone)
		c := dialRaw(t, entry.addr)
		c.send("get " + slow + "\r\n")
		c.expect("VALUE " + slow + " 0 1\r\nv\r\nEND\r\n")
	}()
	r := dialRaw(t, entry.addr)
	for range 8 { // on both shared connections
		r.send("get " + other + "\r\n")
		r.expect("VALUE " + other + " 0 1\r\nv\r\nEND\r\n")
	}
	// The read of slow was answered NS on a shared connection and asked
	// again on a stream, where it waits for the round. (The round must not
	// end before the read has reached the owner: it would be answered at
	// once, on the shared connection.)
	waitFor(t, func() bool { return statOf(t, entry.addr, "peer_reads_streamed") == "1" })
	select {
	case <-slowDone:
		t.Error("the read of a key with a write round open answered before the round ended")
	default:
	}
	round.end()
	<-slowDone
	if got := statOf(t, entry.addr, "peer_reads_streamed"); got != "1" {
		t.Errorf("peer_reads_streamed: %s, want 1 (the read of slow); peer_errors %s", got, statOf(t, entry.addr, "peer_errors"))
	}
}

// A node that leaves gracefully hands its keys over: once it is gone, the
// nodes that took them hold them all, read or not while it drained.
func TestHandoverOnLeave(t *testing.T) {
	nodes := startCluster(t, 3, clusterOpts{picker: ring.PickerConfig{Epsilon: math.Inf(1)},
		tune: func(_ string, cfg *Config) { cfg.Cluster.HotCopies = -1 }})
	keys := keyRange("ho", 300)
	w := dialRaw(t, nodes[0].addr)
	leaving := 0
	for _, k := range keys {
		w.send("set " + k + " 3 0 2\r\nv1\r\n")
		w.expect("STORED\r\n")
		if ownerOn(nodes[0], k) == nodes[2].srv.ID() {
			leaving++
		}
	}
	if leaving < 50 {
		t.Fatalf("only %d of %d keys on the node that leaves", leaving, len(keys))
	}
	nodes[2].stop(t, true)
	waitConverged(t, nodes)
	for i, nd := range nodes[:2] {
		c := dialRaw(t, nd.addr)
		missing := 0
		for _, k := range keys {
			c.send("get " + k + "\r\n")
			if l := c.line(); l == "END" {
				missing++
				continue
			}
			c.expect("v1\r\nEND\r\n")
		}
		if missing > 0 {
			t.Errorf("node%d: %d of %d keys missing after the leave (%d were the leaver's)", i, missing, len(keys), leaving)
		}
	}
}

// A node that comes back empty (a restart) gets its keys handed back by
// the nodes that held them meanwhile: every key is at it at once, read or
// not within the owner grace.
func TestHandBackOnRejoin(t *testing.T) {
	o := clusterOpts{picker: ring.PickerConfig{Epsilon: math.Inf(1)},
		tune: func(_ string, cfg *Config) { cfg.Cluster.HotCopies = -1 }}
	nodes := startCluster(t, 3, o)
	keys := keyRange("hb", 300)
	w := dialRaw(t, nodes[0].addr)
	for _, k := range keys {
		w.send("set " + k + " 0 0 2\r\nv1\r\n")
		w.expect("STORED\r\n")
	}
	leaver := nodes[2]
	o.clientAddr, o.peerAddr = leaver.addr, leaver.peer
	leaver.stop(t, true) // hands its keys over to node0 and node1
	back := startNode(t, "node2", nodes[:2], o)
	nodes[2] = back
	waitConverged(t, nodes)
	var owned []string
	for _, k := range keys {
		if ownerOn(back, k) == "node2" {
			owned = append(owned, k)
		}
	}
	if len(owned) < 50 {
		t.Fatalf("only %d keys owned by the node that came back", len(owned))
	}
	waitFor(t, func() bool {
		n := 0
		for _, k := range owned {
			if _, ok := back.srv.store.Peek(k); ok {
				n++
			}
		}
		return n == len(owned)
	})
}
