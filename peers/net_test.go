package peers

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestEncryptedGossip runs real UDP+TCP gossip on 127.0.0.1 (port 0) with a
// secret key: two nodes with the same key form a cluster; a node with another
// key, or with none, cannot join it.
func TestEncryptedGossip(t *testing.T) {
	key := [][]byte{[]byte("0123456789abcdef0123456789abcdef")}
	start := func(name string, keys [][]byte, seeds ...string) (*Peers, error) {
		p, err := Join(Config{
			Name:       name,
			BindAddr:   "127.0.0.1",
			Join:       seeds,
			SecretKeys: keys,
			Meta:       Meta{Peer: "127.0.0.1:1", Weight: 1},
			Logger:     quietLogger(t),
			Profile:    Local,
			Tune:       fastTimings,
		}, nil)
		if err == nil {
			t.Cleanup(func() { _ = p.Shutdown() })
		}
		return p, err
	}
	a, err := start("a", key)
	if err != nil {
		t.Fatal(err)
	}
	seed := a.GossipAddr()
	if !strings.HasPrefix(seed, "127.0.0.1:") || strings.HasSuffix(seed, ":0") {
		t.Fatalf("GossipAddr = %q, want 127.0.0.1 and the port picked", seed)
	}
	b, err := start("b", key, seed)
	if err != nil {
		t.Fatalf("same key: %v", err)
	}
	eventually(t, "encrypted pair converges", func() string {
		for _, p := range []*Peers{a, b} {
			if got := ringString(p.Ring()); got != "a/1 b/1" {
				return p.Self() + " has ring " + got
			}
		}
		return ""
	})

	for _, tt := range []struct {
		name string
		key  [][]byte
	}{
		{"other key", [][]byte{[]byte("fedcba9876543210")}},
		{"no key", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Its seed does not answer it: it runs alone (and retries).
			p, err := start("intruder", tt.key, seed)
			if err != nil {
				t.Fatal(err)
			}
			if got := ringString(p.Ring()); got != "intruder/1" {
				t.Fatalf("joined with %s; ring %s", tt.name, got)
			}
			if got := a.Ring().Len(); got != 2 {
				t.Errorf("a's ring has %d nodes after the failed join", got)
			}
		})
	}
}

// TestReconnectChecksIdentity: reconnect joins a departed member's address
// only if the node answering there is that member — one declared dead, or
// in a cluster with a name a seed that left (the first node of a cluster,
// restarted with only itself for a seed, finds no one). A node of another
// cluster that took the address (a recycled pod IP) is left alone: joining
// it would merge the two clusters, and each would serve the other's keys.
// The member itself, back at its address, is joined again.
func TestReconnectChecksIdentity(t *testing.T) {
	for _, tc := range []struct {
		name              string
		leaves            bool
		cluster, stranger string // cluster names: ours, the other's
	}{
		{"dies", false, "", ""},
		{"dies, named", false, "a", "b"},
		{"leaves, named", true, "a", "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a2 := rebind(t, "a2", tc.cluster, "127.0.0.1:0")
			addr := a2.GossipAddr()
			a1, err := Join(Config{Name: "a1", Cluster: tc.cluster, BindAddr: "127.0.0.1", Join: []string{addr},
				Meta: Meta{Peer: "127.0.0.1:1", Weight: 1}, Logger: quietLogger(t), Profile: Local, Tune: fastTimings,
				ReconnectInterval: 50 * time.Millisecond}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = a1.Shutdown() })
			eventually(t, "a1 joins a2", func() string { return ringIs(a1, "a1/1 a2/1") })
			if tc.leaves {
				leave(t, a2, a1)
			}
			if err := a2.Shutdown(); err != nil {
				t.Fatal(err)
			}
			eventually(t, "a1 sees a2 go", func() string { return ringIs(a1, "a1/1") })

			// Another cluster's node binds the address a2 had.
			b1 := rebind(t, "b1", tc.stranger, addr)
			// Forty reconnect intervals: without the check, the first joins.
			deadline := time.Now().Add(2 * time.Second)
			for time.Now().Before(deadline) {
				if msg := ringIs(a1, "a1/1") + ringIs(b1, "b1/1"); msg != "" {
					t.Fatalf("the clusters merged: %s", msg)
				}
				time.Sleep(20 * time.Millisecond)
			}

			// b1 goes; a2 comes back at its address with only itself for a
			// seed: reconnect finds it there and joins it.
			if err := b1.Shutdown(); err != nil {
				t.Fatal(err)
			}
			back := rebind(t, "a2", tc.cluster, addr, addr)
			eventually(t, "a1 joins a2 again", func() string { return ringIs(a1, "a1/1 a2/1") + ringIs(back, "a1/1 a2/1") })
		})
	}
}

// TestDepartedSeedTakenByAStranger: in a cluster without a name, a seed
// that departed and whose address another cluster's node took since is
// not joined: not by reconnect when it left (the stranger may even have
// its name: a retired machine's hostname:port), and not by the seeds'
// rejoin when DNS still lists its address.
func TestDepartedSeedTakenByAStranger(t *testing.T) {
	for _, tc := range []struct {
		name, stranger string
		leaves, byName bool
	}{
		{"left, its name reused", "s", true, false},
		{"left, a name seed", "b1", true, true},
		{"died, a name seed", "b1", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := rebind(t, "s", "", "127.0.0.1:0")
			addr := s.GossipAddr()
			seed, dns := addr, Resolver(nil)
			if tc.byName {
				_, p, _ := net.SplitHostPort(addr)
				seed, dns = "seed.test:"+p, &fakeDNS{hosts: map[string][]string{"seed.test": {"127.0.0.1"}}}
			}
			a, err := Join(Config{Name: "a", BindAddr: "127.0.0.1", Join: []string{seed}, Resolver: dns,
				Meta: Meta{Peer: "127.0.0.1:1", Weight: 1}, Logger: quietLogger(t), Profile: Local, Tune: fastTimings,
				JoinRetryMax: 50 * time.Millisecond, ReconnectInterval: 50 * time.Millisecond}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = a.Shutdown() })
			eventually(t, "a joins s", func() string { return ringIs(a, "a/1 s/1") })
			if tc.leaves {
				leave(t, s, a)
			}
			if err := s.Shutdown(); err != nil {
				t.Fatal(err)
			}
			eventually(t, "a sees s go", func() string { return ringIs(a, "a/1") })
			// Past memberlist's gossip to the dead (GossipToTheDeadTime, a
			// second here): only a cluster name closes that window.
			time.Sleep(1500 * time.Millisecond)
			b := rebind(t, tc.stranger, "", addr)
			deadline := time.Now().Add(2 * time.Second)
			for time.Now().Before(deadline) {
				if msg := ringIs(a, "a/1") + ringIs(b, tc.stranger+"/1"); msg != "" {
					t.Fatalf("the clusters merged: %s", msg)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestClusterName: nodes of two clusters with names never merge: not
// through a seed, and not when the other cluster's node that took a dead
// member's address has the member's name too (pods of two namespaces'
// StatefulSets do), which reconnect's ping by name cannot tell apart.
func TestClusterName(t *testing.T) {
	start := func(name, cluster string, seeds ...string) *Peers {
		t.Helper()
		p, err := Join(Config{Name: name, Cluster: cluster, BindAddr: "127.0.0.1", Join: seeds,
			Meta: Meta{Peer: "127.0.0.1:1", Weight: 1}, Logger: quietLogger(t), Profile: Local, Tune: fastTimings,
			ReconnectInterval: 50 * time.Millisecond}, nil)
		if err != nil {
			t.Fatalf("Join %s: %v", name, err)
		}
		t.Cleanup(func() { _ = p.Shutdown() })
		return p
	}
	n := start("spillway-1", "a")
	a1 := start("a1", "a", n.GossipAddr())
	eventually(t, "cluster a converges", func() string { return ringIs(a1, "a1/1 spillway-1/1") })

	if b := start("b0", "b", a1.GossipAddr()); ringString(b.Ring()) != "b0/1" {
		t.Fatalf("a node of cluster b joined cluster a through a seed: %s", ringString(b.Ring()))
	}

	addr := n.GossipAddr()
	if err := n.Shutdown(); err != nil { // dies: no leave
		t.Fatal(err)
	}
	eventually(t, "a1 declares spillway-1 dead", func() string { return ringIs(a1, "a1/1") })
	b1 := start("b1", "b")
	rebind(t, "spillway-1", "b", addr, b1.GossipAddr())
	eventually(t, "cluster b converges", func() string { return ringIs(b1, "b1/1 spillway-1/1") })
	// Forty reconnect intervals.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if msg := ringIs(a1, "a1/1") + ringIs(b1, "b1/1 spillway-1/1"); msg != "" {
			t.Fatalf("the clusters merged: %s", msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leave makes p leave, and waits until other holds it as leaving. A
// member whose leaving meta other did not get before the leave itself is
// one it holds dead (under load, gossip and Leave's push may come too
// late): that is another case than the one under test, which is skipped.
func leave(t *testing.T, p, other *Peers) {
	t.Helper()
	if err := p.Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		m := other.ev.cur.Load().nodes[p.Self()]
		switch {
		case m != nil && m.state == stateLeft:
			return
		case m != nil && m.state == stateDead:
			t.Skipf("%s took %s's leave for a death: its leaving meta came too late", other.Self(), p.Self())
		case time.Now().After(deadline):
			t.Fatalf("%s does not hold %s as leaving: %+v", other.Self(), p.Self(), m)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rebind starts a node called name, of cluster (Config.Cluster), on addr
// (HOST:PORT), which a node that has just shut down held: it tries until
// the port is free again.
func rebind(t *testing.T, name, cluster, addr string, seeds ...string) *Peers {
	t.Helper()
	var p *Peers
	eventually(t, name+" binds "+addr, func() string {
		var err error
		p, err = Join(Config{Name: name, Cluster: cluster, BindAddr: "127.0.0.1", BindPort: port(t, addr), Join: seeds,
			Meta: Meta{Peer: "127.0.0.1:1", Weight: 1}, Logger: quietLogger(t), Profile: Local, Tune: fastTimings}, nil)
		if err != nil {
			return err.Error()
		}
		return ""
	})
	t.Cleanup(func() { _ = p.Shutdown() })
	return p
}

// port returns the port of addr (HOST:PORT).
func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// ringIs returns "" if p's ring is want, else what it is.
func ringIs(p *Peers, want string) string {
	if got := ringString(p.Ring()); got != want {
		return p.Self() + " has ring " + got
	}
	return ""
}
