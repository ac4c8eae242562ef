package peers

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/goleak"

	"spillway/ring"
)

// TestMain fails the run if goroutines outlive the tests. memberlist's
// Shutdown does not wait for a probe already under way: that goroutine
// ends by itself within a probe interval (stretched up to 8x while the node
// feels unhealthy), longer than goleak's own retries last, so wait for
// the count to settle first.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(10 * time.Second)
		tick := time.NewTicker(50 * time.Millisecond)
		err := goleak.Find()
		for err != nil && time.Now().Before(deadline) {
			<-tick.C
			err = goleak.Find()
		}
		tick.Stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// waitTimeout bounds every wait for gossip. Failure detection with
// fastTimings takes about a second; the rest converges in milliseconds.
const waitTimeout = 15 * time.Second

// fastTimings shortens memberlist's Local preset so a dead node is found in
// about a second, while staying loose enough for -race on two cores.
func fastTimings(c *memberlist.Config) {
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 100 * time.Millisecond
	c.GossipInterval = 20 * time.Millisecond
	c.PushPullInterval = time.Second
	c.TCPTimeout = 5 * time.Second // only bounds joins and push/pulls; generous for -race
	c.GossipToTheDeadTime = time.Second
}

// quietLogger logs warnings with -v, everything with PEERS_DEBUG=1, and
// nothing otherwise. It writes to stderr, not t.Log: memberlist may still
// log from a goroutine winding down after the test has ended.
func quietLogger(t *testing.T) *slog.Logger {
	level := slog.LevelWarn
	switch {
	case os.Getenv("PEERS_DEBUG") != "":
		level = slog.LevelDebug
	case !testing.Verbose():
		return slog.New(slog.DiscardHandler)
	}
	h := slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})
	return slog.New(h).With("test", t.Name())
}

// recorder keeps every ring onChange delivers.
type recorder struct {
	mu    sync.Mutex
	rings []*ring.Ring
}

func (r *recorder) onChange(rg *ring.Ring) {
	r.mu.Lock()
	r.rings = append(r.rings, rg)
	r.mu.Unlock()
}

func (r *recorder) snapshot() []*ring.Ring {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.rings)
}

type testNode struct {
	p   *Peers
	rec *recorder
	// atJoin is how many rings onChange had received when Join returned.
	atJoin []*ring.Ring
}

// startNode starts a node called name on mn that joins seeds. Its weight is
// weight, its peer address a placeholder that no test dials.
func startNode(t *testing.T, mn *memNet, name string, weight int, seeds ...string) *testNode {
	t.Helper()
	rec := &recorder{}
	p, err := Join(Config{
		Name:      name,
		Join:      seeds,
		Transport: mn.NewTransport(name),
		Meta:      Meta{Client: "c-" + name + ":11211", Peer: "p-" + name + ":11311", Weight: weight},
		Logger:    quietLogger(t),
		Profile:   Local,
		Tune:      fastTimings,
		// Faster than failure detection, so a test that heals a partition
		// does not wait on it.
		ReconnectInterval: 200 * time.Millisecond,
	}, rec.onChange)
	if err != nil {
		t.Fatalf("Join %s: %v", name, err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	return &testNode{p: p, rec: rec, atJoin: rec.snapshot()}
}

// startCluster starts n nodes "n0".."n{n-1}" with weights 1..n, each joining
// through the previous one, so gossip must spread the membership.
func startCluster(t *testing.T, mn *memNet, n int) []*testNode {
	t.Helper()
	nodes := make([]*testNode, n)
	for i := range nodes {
		var seeds []string
		if i > 0 {
			seeds = []string{nodes[i-1].p.GossipAddr()}
		}
		nodes[i] = startNode(t, mn, fmt.Sprintf("n%d", i), i+1, seeds...)
	}
	return nodes
}

// eventually polls cond until it returns "" or waitTimeout passes.
func eventually(t *testing.T, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %s", what, waitTimeout, msg)
		}
		<-tick.C
	}
}

func ringString(r *ring.Ring) string {
	var b strings.Builder
	nodes := r.Nodes()
	slices.SortFunc(nodes, func(a, b ring.Node) int { return strings.Compare(a.ID, b.ID) })
	for _, n := range nodes {
		fmt.Fprintf(&b, "%s/%d ", n.ID, n.Weight)
	}
	return strings.TrimSpace(b.String())
}

// ringsAre reports "" when every node's current ring, and the last ring its
// onChange received, hold exactly want.
func ringsAre(nodes []*testNode, want string) func() string {
	return func() string {
		for _, n := range nodes {
			if got := ringString(n.p.Ring()); got != want {
				return fmt.Sprintf("%s has ring %q, want %q", n.p.Self(), got, want)
			}
			rs := n.rec.snapshot()
			if len(rs) == 0 || ringString(rs[len(rs)-1]) != want {
				return fmt.Sprintf("%s: onChange has not delivered %q yet", n.p.Self(), want)
			}
		}
		return ""
	}
}

func wantRing(nodes []*testNode) string {
	var parts []string
	for i, n := range nodes {
		parts = append(parts, fmt.Sprintf("%s/%d", n.p.Self(), i+1))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

func TestClusterConverges(t *testing.T) {
	for _, size := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d nodes", size), func(t *testing.T) {
			start := time.Now()
			nodes := startCluster(t, &memNet{}, size)
			want := wantRing(nodes)
			eventually(t, "rings converge", ringsAre(nodes, want))
			t.Logf("%d nodes converged in %v", size, time.Since(start))

			// Same members and weights must mean the same owners everywhere.
			for k := range 200 {
				key := fmt.Sprintf("key-%d", k)
				owner := nodes[0].p.Ring().Owner(key)
				for _, n := range nodes[1:] {
					if got := n.p.Ring().Owner(key); got != owner {
						t.Fatalf("Owner(%q): %s says %s, %s says %s", key, nodes[0].p.Self(), owner, n.p.Self(), got)
					}
				}
			}

			for i, n := range nodes {
				// onChange ran before Join returned, with self (and the seed's view).
				if len(n.atJoin) == 0 {
					t.Fatalf("%s: onChange not called before Join returned", n.p.Self())
				}
				first := ringString(n.atJoin[0])
				if !strings.Contains(first, n.p.Self()+"/") || (i > 0 && !strings.Contains(first, nodes[i-1].p.Self()+"/")) {
					t.Errorf("%s: first ring %q lacks self or seed", n.p.Self(), first)
				}
				// Every later join reached onChange: at least one more ring
				// per node that joined after n.
				if got := len(n.rec.snapshot()); got < size-i {
					t.Errorf("%s: onChange called %d times, want >= %d", n.p.Self(), got, size-i)
				}
				if ms := n.p.ev.cur.Load().nodes; len(ms) != size {
					t.Errorf("%s: %d members, want %d", n.p.Self(), len(ms), size)
				}
				for j, o := range nodes {
					m, ok := n.p.Meta(o.p.Self())
					want := Meta{Client: "c-" + o.p.Self() + ":11211", Peer: "p-" + o.p.Self() + ":11311", Weight: j + 1}
					if !ok || m != want {
						t.Errorf("%s: Meta(%s) = %+v, %v; want %+v", n.p.Self(), o.p.Self(), m, ok, want)
					}
				}
			}
		})
	}
}

// TestDeparture removes a node from a 3-node cluster, gracefully or not,
// and checks every survivor drops it from its ring and records it as left
// or dead.
func TestDeparture(t *testing.T) {
	tests := []struct {
		name  string
		leave bool
		state string
	}{
		{"leave", true, stateLeft},
		{"shutdown without leave", false, stateDead},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes := startCluster(t, &memNet{}, 3)
			eventually(t, "rings converge", ringsAre(nodes, wantRing(nodes)))
			gone, rest := nodes[2], nodes[:2]
			id := gone.p.Self()

			start := time.Now()
			if tt.leave {
				if err := gone.p.Leave(5 * time.Second); err != nil {
					t.Fatalf("Leave: %v", err)
				}
			}
			if err := gone.p.Shutdown(); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			eventually(t, "departure seen", ringsAre(rest, wantRing(rest)))
			t.Logf("%s removed after %v", id, time.Since(start))

			for _, n := range rest {
				if _, ok := n.p.Meta(id); ok {
					t.Errorf("%s: Meta(%s) still reported", n.p.Self(), id)
				}
				ms := n.p.ev.cur.Load().nodes
				if m := ms[id]; len(ms) != 3 || m == nil || m.state != tt.state {
					t.Errorf("%s: members %v, want 3 with %s %s", n.p.Self(), ms, id, tt.state)
				}
				boot, left := n.p.Left(id)
				if want := gone.p.ev.selfMeta.Boot; left != tt.leave || left && boot != want {
					t.Errorf("%s: Left(%s) = %q, %v; want %q, %v", n.p.Self(), id, boot, left, want, tt.leave)
				}
			}
			if err := gone.p.Leave(5 * time.Second); err != ErrClosed {
				t.Errorf("Leave after Shutdown = %v, want ErrClosed", err)
			}
		})
	}
}

// TestPartitionHeals: two halves that each declared the other dead, and
// whose memberlist has forgotten the dead (GossipToTheDeadTime), merge
// again once the partition heals. memberlist alone never sends them a
// packet again: only reconnect does.
func TestPartitionHeals(t *testing.T) {
	mn := &memNet{}
	nodes := startCluster(t, mn, 4)
	all := wantRing(nodes)
	eventually(t, "rings converge", ringsAre(nodes, all))

	mn.cut("n0", "n1")
	eventually(t, "each side declares the other dead", func() string {
		if msg := ringsAre(nodes[:2], wantRing(nodes[:2]))(); msg != "" {
			return msg
		}
		return ringsAre(nodes[2:], "n2/3 n3/4")()
	})
	// memberlist gossips a death to the dead member for
	// GossipToTheDeadTime (a second here), then never contacts it again:
	// wait that out twice over, so nothing of memberlist's could cross.
	eventually(t, "memberlist stops gossiping to the dead", deathsOlderThan(nodes, 2*time.Second))
	for _, n := range nodes {
		if got := len(n.p.deadMembers(time.Now())); got != 2 {
			t.Fatalf("%s would try %d members again, want 2", n.p.Self(), got)
		}
	}

	mn.heal()
	eventually(t, "the halves merge", ringsAre(nodes, all))
	for _, n := range nodes {
		if got := n.p.deadMembers(time.Now()); len(got) != 0 {
			t.Errorf("%s still tries %v", n.p.Self(), got)
		}
	}
}

// TestLeaveDropsSelf: after Leave, a node's own ring no longer has it, so it
// stops taking keys while it drains.
func TestLeaveDropsSelf(t *testing.T) {
	nodes := startCluster(t, &memNet{}, 2)
	eventually(t, "rings converge", ringsAre(nodes, wantRing(nodes)))
	if err := nodes[1].p.Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, "leaver drops itself", func() string {
		if got := ringString(nodes[1].p.Ring()); got != "n0/1" {
			return fmt.Sprintf("leaver's ring is %q", got)
		}
		return ""
	})
}

// TestLeaveBoundedWithoutGossip: with gossip turned off (Tune may set
// GossipInterval to 0) the leaving meta goes out only on probes, here a
// minute apart. Leave still returns once its timeout is spent instead of
// waiting for them (UpdateNode's wait, five gossip intervals, would be 0:
// no limit).
func TestLeaveBoundedWithoutGossip(t *testing.T) {
	mn := &memNet{}
	noGossip := func(c *memberlist.Config) {
		fastTimings(c)
		c.GossipInterval = 0
		c.ProbeInterval = time.Minute
	}
	var nodes []*Peers
	for i := range 2 {
		name := fmt.Sprintf("n%d", i)
		var seeds []string
		if i > 0 {
			seeds = []string{nodes[0].GossipAddr()}
		}
		nodes = append(nodes, joinTest(t, Config{Name: name, Join: seeds, Transport: mn.NewTransport(name),
			Meta: Meta{Peer: "p-" + name + ":1", Weight: 1}, Tune: noGossip}).p)
	}
	if nodes[1].ml.NumMembers() != 2 {
		t.Fatalf("n1 sees %d members, want 2", nodes[1].ml.NumMembers())
	}
	done := make(chan error, 1)
	go func() { done <- nodes[1].Leave(200 * time.Millisecond) }()
	select {
	case <-done: // an error is expected: the leave message cannot go out either
	case <-time.After(waitTimeout):
		t.Fatalf("Leave(200ms) still waiting after %v", waitTimeout)
	}
}

func TestRunsAlone(t *testing.T) {
	n := startNode(t, &memNet{}, "solo", 1)
	if got := ringString(n.p.Ring()); got != "solo/1" {
		t.Fatalf("ring = %q, want solo alone", got)
	}
	if len(n.atJoin) != 1 {
		t.Fatalf("onChange called %d times before Join returned, want 1", len(n.atJoin))
	}
	if got := n.p.GossipAddr(); got != "127.0.0.1:1" {
		t.Errorf("GossipAddr = %q", got)
	}
	if err := n.p.Leave(5 * time.Second); err != nil { // alone: returns at once
		t.Fatal(err)
	}
}

// TestJoinRetriesSeeds: a node none of whose seeds answers yet runs alone
// and keeps trying them in the background, as Consul and Serf do, so nodes
// may start in any order (issue 15: it used to give up and fail).
func TestJoinRetriesSeeds(t *testing.T) {
	t.Run("seed starts later", func(t *testing.T) {
		mn := &memNet{}
		// memNet numbers addresses in order: b gets 127.0.0.1:1, a :2.
		b := startNode(t, mn, "b", 1, "127.0.0.1:2")
		if got := ringString(b.p.Ring()); got != "b/1" || len(b.atJoin) != 1 {
			t.Fatalf("b: ring %q and %d onChange calls when Join returned, want b alone and 1", got, len(b.atJoin))
		}
		a := startNode(t, mn, "a", 1) // a seed with no seeds of its own: only b's retries find it
		eventually(t, "b joins a", ringsAre([]*testNode{a, b}, "a/1 b/1"))
	})
	t.Run("one list shared by every node", func(t *testing.T) {
		// Each node lists all three addresses, its own included: the
		// first one up answers its own join, which must not count as
		// having joined anything.
		mn := &memNet{}
		all := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}
		var nodes []*testNode
		for i := range 3 {
			nodes = append(nodes, startNode(t, mn, fmt.Sprintf("n%d", i), 1, all...))
		}
		eventually(t, "rings converge", ringsAre(nodes, "n0/1 n1/1 n2/1"))
	})
	t.Run("leave gives up", func(t *testing.T) {
		b := startNode(t, &memNet{}, "b", 1, "127.0.0.1:2")
		select {
		case <-b.p.joinDone:
			t.Fatal("no background join while the seed is missing")
		default:
		}
		if err := b.p.Leave(time.Second); err != nil {
			t.Fatal(err)
		}
		select {
		case <-b.p.joinDone:
		case <-time.After(waitTimeout):
			t.Fatalf("the background join still runs %v after Leave", waitTimeout)
		}
	})
}

func TestJoinFails(t *testing.T) {
	mn := &memNet{}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"short key", Config{SecretKeys: [][]byte{make([]byte, 16), make([]byte, 15)}}, "secret key is 15 bytes"},
		{"long key", Config{SecretKeys: [][]byte{make([]byte, 33)}}, "secret key is 33 bytes"},
		{"negative weight", Config{Meta: Meta{Weight: -1}}, "negative weight"},
		{"bad peer address", Config{Meta: Meta{Peer: "nohostport"}}, "peer address"},
		{"meta too large", Config{Meta: Meta{Client: strings.Repeat("x", 600)}}, "meta larger"},
		{"bad port", Config{BindPort: 70000}, "bad port"},
		{"negative vnodes", Config{VNodes: -1}, "negative"},
		{"unknown profile", Config{Profile: 9}, "unknown profile"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("bad%d", i)
			tt.cfg.Name = name
			tt.cfg.Transport = mn.NewTransport(name)
			tt.cfg.Logger = quietLogger(t)
			tt.cfg.Profile = max(tt.cfg.Profile, Local)
			called := false
			p, err := Join(tt.cfg, func(*ring.Ring) { called = true })
			if err == nil {
				_ = p.Shutdown()
				t.Fatal("Join succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to mention %q", err, tt.want)
			}
			if called {
				t.Error("onChange called by a failed Join")
			}
		})
	}
}

// TestReadsDuringChurn reads the snapshot from several goroutines, and from
// inside onChange itself, while members come and go: -race checks the
// snapshot swap, and a deadlock would hang onChange (memberlist calls it
// holding its node lock).
func TestReadsDuringChurn(t *testing.T) {
	mn := &memNet{}
	var self atomic.Pointer[Peers]
	var inCallback atomic.Int64
	p, err := Join(Config{
		Name: "n0", Transport: mn.NewTransport("n0"), Meta: Meta{Peer: "p-n0:1"},
		Logger: quietLogger(t), Profile: Local, Tune: fastTimings,
	}, func(r *ring.Ring) {
		if p := self.Load(); p != nil {
			_ = p.GossipAddr()
			_, _ = p.Meta("n1")
			_ = p.Ring().Owner("k")
			inCallback.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	self.Store(p)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	for range 4 {
		wg.Go(func() {
			// A read per millisecond is enough for -race to see any
			// unsynchronised access, and leaves the CPU to gossip.
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if m, ok := p.Meta("n1"); ok && m.Peer != "p-n1:11311" {
					t.Errorf("Meta(n1) = %+v", m)
				}
				if r := p.Ring(); r.Len() == 0 {
					t.Error("empty ring while n0 is alive")
				}
				_ = p.GossipAddr()
				reads.Add(1)
			}
		})
	}

	n1 := startNode(t, mn, "n1", 1, p.GossipAddr())
	n2 := startNode(t, mn, "n2", 1, p.GossipAddr())
	eventually(t, "three members", func() string {
		if got := ringString(p.Ring()); got != "n0/1 n1/1 n2/1" {
			return got
		}
		return ""
	})
	_ = n1.p.Shutdown() // found by failure detection, n2 confirming
	eventually(t, "n1 gone", func() string {
		if got := ringString(p.Ring()); got != "n0/1 n2/1" {
			return got
		}
		return ""
	})
	if err := n2.p.Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	_ = n2.p.Shutdown()
	eventually(t, "alone again", func() string {
		if got := ringString(p.Ring()); got != "n0/1" {
			return got
		}
		return ""
	})
	close(stop)
	wg.Wait()
	if inCallback.Load() < 4 {
		t.Errorf("onChange read the snapshot %d times, want a call per change", inCallback.Load())
	}
	t.Logf("%d concurrent reads, %d onChange calls", reads.Load(), inCallback.Load())
}

// BenchmarkMeta: reading a member's addresses takes no lock and allocates
// nothing, so a caller may do it per request.
func BenchmarkMeta(b *testing.B) {
	mn := &memNet{}
	a, err := Join(Config{Name: "a", Transport: mn.NewTransport("a"), Meta: Meta{Peer: "a:1"}, Logger: slog.New(slog.DiscardHandler), Profile: Local}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Shutdown()
	c, err := Join(Config{Name: "b", Join: []string{a.GossipAddr()}, Transport: mn.NewTransport("b"), Meta: Meta{Peer: "b:1"}, Logger: slog.New(slog.DiscardHandler), Profile: Local}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Shutdown()
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := a.Meta("b"); !ok {
			b.Fatal("no meta")
		}
	}
}

// deathsOlderThan is a condition for eventually: every death the nodes
// saw is older than d (memberlist gossips to a dead member for
// GossipToTheDeadTime, then never contacts it again).
func deathsOlderThan(nodes []*testNode, d time.Duration) func() string {
	return func() string {
		for _, n := range nodes {
			for id, m := range n.p.ev.cur.Load().nodes {
				if m.state == stateDead && time.Since(m.died) < d {
					return fmt.Sprintf("%s saw %s die %v ago", n.p.Self(), id, time.Since(m.died))
				}
			}
		}
		return ""
	}
}

// udpGate is a memTransport whose packets (memberlist's UDP) can be
// dropped, all of them, while its streams (TCP) still flow.
type udpGate struct {
	*memTransport
	blocked *atomic.Bool
}

func (g udpGate) WriteTo(b []byte, addr string) (time.Time, error) {
	return g.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (g udpGate) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if g.blocked.Load() {
		return time.Now(), nil
	}
	return g.memTransport.WriteToAddress(b, a)
}

// TestNamedClusterHealsWithoutUDP: reconnect pings a dead member before
// it joins it, over UDP only, unless the cluster has a name (which keeps
// other clusters out instead). A named cluster whose UDP is blocked
// (memberlist probes over TCP then) still merges after a partition.
func TestNamedClusterHealsWithoutUDP(t *testing.T) {
	mn := &memNet{}
	var blocked atomic.Bool
	var nodes []*testNode
	for i := range 4 {
		name := fmt.Sprintf("n%d", i)
		var seeds []string
		if i > 0 {
			seeds = []string{nodes[i-1].p.GossipAddr()}
		}
		rec := &recorder{}
		p, err := Join(Config{Name: name, Cluster: "c", Join: seeds, Transport: udpGate{mn.NewTransport(name), &blocked},
			Meta: Meta{Peer: "p-" + name + ":1", Weight: 1}, Logger: quietLogger(t), Profile: Local, Tune: fastTimings,
			ReconnectInterval: 200 * time.Millisecond}, rec.onChange)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Shutdown() })
		nodes = append(nodes, &testNode{p: p, rec: rec})
	}
	all := "n0/1 n1/1 n2/1 n3/1"
	eventually(t, "rings converge", ringsAre(nodes, all))
	blocked.Store(true)
	mn.cut("n0", "n1")
	eventually(t, "each side declares the other dead", func() string {
		return ringsAre(nodes[:2], "n0/1 n1/1")() + ringsAre(nodes[2:], "n2/1 n3/1")()
	})
	eventually(t, "memberlist stops gossiping to the dead", deathsOlderThan(nodes, 2*time.Second))
	mn.heal()
	eventually(t, "the halves merge over TCP", ringsAre(nodes, all))
}
