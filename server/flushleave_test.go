package server

import (
	"math"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"spillway/ring"
)

// gatedTransport is memberlist's NetTransport whose incoming gossip
// (packets and streams) is held back while gate is set: the node does not
// learn of membership changes, while its peer port works as usual.
type gatedTransport struct {
	*memberlist.NetTransport
	gate *atomic.Bool
	pk   chan *memberlist.Packet
	st   chan net.Conn
	done chan struct{}
}

func newGatedTransport(t testing.TB, gate *atomic.Bool) *gatedTransport {
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}, BindPort: 0})
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedTransport{NetTransport: nt, gate: gate, pk: make(chan *memberlist.Packet, 1024),
		st: make(chan net.Conn, 64), done: make(chan struct{})}
	go forwardGated(g, nt.PacketCh(), g.pk)
	go forwardGated(g, nt.StreamCh(), g.st)
	return g
}

// forwardGated passes what arrives on in to out, holding it while the gate
// is set, until the transport shuts down.
func forwardGated[T any](g *gatedTransport, in <-chan T, out chan<- T) {
	for {
		var v T
		select {
		case v = <-in:
		case <-g.done:
			return
		}
		for g.gate.Load() {
			time.Sleep(time.Millisecond)
		}
		select {
		case out <- v:
		case <-g.done:
			return
		}
	}
}

func (g *gatedTransport) PacketCh() <-chan *memberlist.Packet { return g.pk }
func (g *gatedTransport) StreamCh() <-chan net.Conn           { return g.st }

func (g *gatedTransport) Shutdown() error {
	close(g.done)
	return g.NetTransport.Shutdown()
}

// flush_all acknowledged during a graceful leave, at a node whose view has
// already dropped the leaver, while a third node's view still lists the
// leaver as a member (its gossip held back): once the third node installs
// the view without the leaver, no pre-flush value comes back from the
// leaver, by a warm read in the owner grace or by the handover. (A review
// found 196 of 196 reads stale: the flush reached neither the leaver nor
// the third node's later record of it.)
func TestFlushAllDuringLeaveWithLaggingView(t *testing.T) {
	var holding atomic.Bool
	o := clusterOpts{picker: ring.PickerConfig{Epsilon: math.Inf(1)},
		tune: func(name string, cfg *Config) {
			cfg.Cluster.HotCopies = -1
			cfg.Cluster.Drain = 10 * time.Second
			if name == "node1" {
				cfg.Cluster.Peers.Transport = newGatedTransport(t, &holding)
			}
		}}
	nodes := startCluster(t, 3, o)
	defer holding.Store(false)
	c0 := dialRaw(t, nodes[0].addr)
	without := nodes[0].srv.cl.view.Load().ring.Without("node2")
	var moved []string
	for _, k := range keyRange("r2f", 600) {
		rawSet(t, c0, k, "preflush", 0)
		if ownerOn(nodes[0], k) == "node2" && without.Owner(k) == "node1" {
			moved = append(moved, k)
		}
	}
	if len(moved) < 20 {
		t.Fatalf("arrangement: only %d keys move node2 -> node1", len(moved))
	}
	holding.Store(true) // node1 hears no gossip for now: node2 stays in its ring
	stopped := make(chan struct{})
	go func() { nodes[2].stop(t, true); close(stopped) }()
	// Keep node2 draining: reads at node1 of node2's keys are forwarded to
	// it (peer requests), as client traffic would.
	c1 := dialRaw(t, nodes[1].addr)
	waitFor(t, func() bool {
		rawGetValue(t, c1, moved[0])
		return nodes[0].srv.cl.view.Load().ring.Len() == 2
	})
	if n := nodes[1].srv.cl.view.Load().ring.Len(); n != 3 {
		t.Fatalf("arrangement: node1's ring has %d nodes, want 3", n)
	}
	c0.send("flush_all\r\n")
	if got := c0.line(); got != "OK" {
		t.Fatalf("flush_all via node0: %q", got)
	}
	// flush_all is acknowledged: every hit from now on must be a later write.
	holding.Store(false)
	waitFor(t, func() bool {
		rawGetValue(t, c1, moved[0])
		return nodes[1].srv.cl.view.Load().ring.Len() == 2
	})
	held := 0
	for _, k := range moved {
		if _, ok := nodes[1].srv.store.Peek(k); ok {
			held++
		}
	}
	t.Logf("node1 holds %d of %d moved keys right after installing (warmed by the handover)", held, len(moved))
	var stale []string
	for _, nd := range nodes[:2] {
		c := dialRaw(t, nd.addr)
		for _, k := range moved {
			if v, hit := rawGetValue(t, c, k); hit {
				stale = append(stale, nd.srv.ID()+":"+k+"="+v)
			}
		}
	}
	if len(stale) > 0 {
		t.Errorf("after an acknowledged flush_all, %d of %d reads hit a pre-flush value (first: %v)",
			len(stale), 2*len(moved), stale[:min(5, len(stale))])
	}
	select {
	case <-stopped:
	case <-time.After(15 * time.Second):
		t.Error("node2's Shutdown did not return")
	}
}
