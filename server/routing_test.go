package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"spillway/store"
)

// Routing on an in-process cluster (fakecluster_test.go), in synctest
// bubbles: what the read and write paths do across nodes, with time that
// passes only when the test waits for it.

// A multi-key get at an entry node answers every key, in the client's
// order, duplicates included, whichever node serves each; the keys it
// does not hold go to their nodes, one batch per node.
func TestRoutingMultiKeyOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := &countingOrigin{}
		n, nodes := startFakeCluster(t, 3, func(c *Config) { c.Origin = origin })
		var keys []string
		for i := range 3 {
			keys = append(keys, ownedBy(nodes[0], nodes[i].name, fmt.Sprintf("k%d-", i), 3)...)
		}
		// Interleave the owners and ask for one key twice.
		order := []string{keys[3], keys[0], keys[6], keys[4], keys[1], keys[7], keys[3], keys[8], keys[2], keys[5]}
		c := dialPipe(t, n, nodes[0].client())
		c.send("get " + strings.Join(order, " ") + "\r\n")
		c.expect(originValues(order...))
		// Six keys live elsewhere: node1's three and node2's three, the
		// repeated one asked for twice. One origin load per distinct key.
		if got := nodes[0].srv.counters[ctrForwarded].Load(); got != 7 {
			t.Errorf("forwarded %d keys, want 7", got)
		}
		if got := origin.total.Load(); got != 9 {
			t.Errorf("origin loads: %d, want 9", got)
		}
	})
}

// A node that stops answering costs a multi-key get one fetch timeout,
// not one per key, and its keys miss meanwhile: not the origin's values,
// read past the owner, which may be newer than a copy another node still
// serves (the owner could not invalidate it).
func TestRoutingDeadPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := &countingOrigin{}
		n, nodes := startFakeCluster(t, 2, func(c *Config) { c.Origin = origin })
		keys := ownedBy(nodes[0], nodes[1].name, "d", 8)
		n.hang(nodes[1].peer())
		defer n.resume(nodes[1].peer())
		c := dialPipe(t, n, nodes[0].client())
		start := time.Now()
		c.send("get " + strings.Join(keys, " ") + "\r\n")
		c.expect("END\r\n")
		if got := origin.total.Load(); got != 0 {
			t.Errorf("origin loads: %d, want 0", got)
		}
		if took, limit := time.Since(start), nodes[0].srv.cl.fetchTimeout; took != limit {
			t.Errorf("the get took %v; want one fetch timeout, %v", took, limit)
		}
		if got := nodes[0].srv.counters[ctrPeerErrors].Load(); got != 1 {
			t.Errorf("peer errors: %d, want 1 (one batch)", got)
		}
	})
}

// spillRead asks node nd to serve a read of key that entry node `from`
// routed to it (the fwd tag), as the bounded-load picker does when the
// key's owner is busy, and returns nd's answer.
func spillRead(t *testing.T, n *fakeNet, nd *fakeNode, from, key string) string {
	t.Helper()
	c := dialPipe(t, n, nd.peer())
	c.send(fmt.Sprintf("mg %s v O%s%s\r\n", key, tagForward, strconv.FormatUint(idHash(from), 36)))
	line := c.line()
	if !strings.HasPrefix(line, "VA ") {
		return line
	}
	return c.line()
}

// withCopy starts a fake cluster of two nodes, in a synctest bubble, where
// the owner's key (named with prefix) is v1, written on w, and the other
// node, the holder, keeps a copy of it, read through as a spilled key.
// tune, if not nil, adjusts both nodes' configs (a countingOrigin by
// default).
func withCopy(t *testing.T, prefix string, tune func(*Config)) (n *fakeNet, owner, holder *fakeNode, key string, w *rawConn) {
	t.Helper()
	n, nodes := startFakeCluster(t, 2, func(c *Config) {
		c.Origin = &countingOrigin{}
		if tune != nil {
			tune(c)
		}
	})
	owner, holder = nodes[0], nodes[1]
	key = ownedBy(owner, owner.name, prefix, 1)[0]
	w = dialPipe(t, n, owner.client())
	w.send("set " + key + " 0 0 2\r\nv1\r\n")
	w.expect("STORED\r\n")
	if got := spillRead(t, n, holder, owner.name, key); got != "v1" {
		t.Fatalf("spilled read at the holder: %q", got)
	}
	synctest.Wait() // ristretto admits the copy on a goroutine of its own
	if _, ok := holder.srv.cl.copies.Peek(key); !ok {
		t.Fatal("the holder kept no copy")
	}
	return n, owner, holder, key, w
}

// A holder that does not answer an invalidation delays a write by the
// invalidation timeout, no more; the loss is counted, and the stale copy
// it keeps is served until the copy TTL, never after.
func TestRoutingInvalidationTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, owner, holder, key, w := withCopy(t, "h", nil)

		n.hang(holder.peer())
		start := time.Now()
		w.send("set " + key + " 0 0 2\r\nv2\r\n")
		w.expect("STORED\r\n")
		if took := time.Since(start); took != DefaultInvalidateTimeout {
			t.Errorf("the write waited %v; want the invalidation timeout, %v", took, DefaultInvalidateTimeout)
		}
		if got := owner.srv.counters[ctrLostInvalidations].Load(); got != 1 {
			t.Errorf("lost invalidations: %d, want 1", got)
		}
		// The delete waits on its shared connection for the peer timeout;
		// had the connection been reset before, the delete would have been
		// sent once more, and the copy dropped at once.
		time.Sleep(DefaultPeerTimeout)
		n.resume(holder.peer())

		// The copy lives on, stale, for what is left of its TTL.
		if got := spillRead(t, n, holder, owner.name, key); got != "v1" {
			t.Fatalf("holder's copy before the copy TTL: %q, want the stale v1", got)
		}
		time.Sleep(DefaultCopyTTL - time.Since(start))
		if got := spillRead(t, n, holder, owner.name, key); got != "v2" {
			t.Fatalf("holder after the copy TTL: %q, want v2", got)
		}
	})
}

// A node that joins reads the keys it gains from their previous owners
// for the owner grace, not from the origin; a write there acts on the
// value it finds at the previous owner; and the previous owners hand it
// every key it gains (handover.go), so the keys nobody read within the
// grace are there after it too.
func TestRoutingOwnerGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := &countingOrigin{}
		tune := func(c *Config) { c.Origin = origin }
		n, nodes := startFakeCluster(t, 2, tune)
		w := dialPipe(t, n, nodes[0].client())
		var keys []string
		for i := range 60 {
			k := fmt.Sprintf("g%d", i)
			keys = append(keys, k)
			w.send("set " + k + " 0 0 3\r\nold\r\n")
			w.expect("STORED\r\n")
		}
		nodes = append(nodes, startFakeNode(t, n, "node2", tune))
		settle(t, nodes)
		var gained []string
		for _, k := range keys {
			if nodes[2].srv.cl.view.Load().ring.Owner(k) == "node2" {
				gained = append(gained, k)
			}
		}
		if len(gained) < 3 {
			t.Fatalf("node2 gained %d of %d keys", len(gained), len(keys))
		}
		c := dialPipe(t, n, nodes[2].client())
		c.send("get " + gained[0] + "\r\n")
		c.expect("VALUE " + gained[0] + " 0 3\r\nold\r\nEND\r\n")
		c.send("append " + gained[1] + " 0 0 1\r\n+\r\n")
		c.expect("STORED\r\n")
		c.send("get " + gained[1] + "\r\n")
		c.expect("VALUE " + gained[1] + " 0 4\r\nold+\r\nEND\r\n")
		if got := origin.total.Load(); got != 0 {
			t.Errorf("origin loads within the grace: %d, want 0", got)
		}

		time.Sleep(DefaultOwnerGrace)
		for _, k := range gained[2:] {
			c.send("get " + k + "\r\n")
			c.expect("VALUE " + k + " 0 3\r\nold\r\nEND\r\n")
		}
		if got := origin.total.Load(); got != 0 {
			t.Errorf("origin loads after the grace: %d, want 0 (every gained key handed back)", got)
		}
	})
}

// originValues is the reply to a get of keys that countingOrigin served.
func originValues(keys ...string) string {
	var b strings.Builder
	for _, k := range keys {
		v := "value-of-" + k
		fmt.Fprintf(&b, "VALUE %s 0 %d\r\n%s\r\n", k, len(v), v)
	}
	b.WriteString("END\r\n")
	return b.String()
}

// A get of thousands of keys owned by another node returns every one of
// them: the entry node writes its requests to the owner while it reads
// the replies, over a network with no buffers at all (net.Pipe), where
// writing all before reading any would stall both nodes.
func TestRoutingLargeMultiGet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := &countingOrigin{}
		n, nodes := startFakeCluster(t, 2, func(c *Config) { c.Origin = origin })
		keys := ownedBy(nodes[0], nodes[1].name, "big", 3000)
		c := dialPipe(t, n, nodes[0].client())
		c.send("get " + strings.Join(keys, " ") + "\r\n")
		c.expect(originValues(keys...))
		if got := nodes[0].srv.counters[ctrPeerErrors].Load(); got != 0 {
			t.Errorf("peer errors: %d", got)
		}
	})
}

// noreply means no reply, also when the owner cannot be reached: a line
// the client does not expect would be read as the answer to its next
// request, and every later reply would be off by one.
func TestRoutingNoreplyWithOwnerDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, nodes := startFakeCluster(t, 2, nil)
		key := ownedBy(nodes[0], nodes[1].name, "nr", 1)[0]
		n.hang(nodes[1].peer())
		defer n.resume(nodes[1].peer())
		c := dialPipe(t, n, nodes[0].client())
		for _, cmd := range []string{
			"set %s 0 0 1 noreply\r\nx\r\n",
			"add %s 0 0 1 noreply\r\nx\r\n",
			"replace %s 0 0 1 noreply\r\nx\r\n",
			"append %s 0 0 1 noreply\r\nx\r\n",
			"prepend %s 0 0 1 noreply\r\nx\r\n",
			"cas %s 0 0 1 1 noreply\r\nx\r\n",
			"delete %s noreply\r\n",
			"incr %s 1 noreply\r\n",
			"decr %s 1 noreply\r\n",
			"touch %s 10 noreply\r\n",
		} {
			req := fmt.Sprintf(cmd, key)
			c.send(req + "version\r\n")
			if got := c.line(); !strings.HasPrefix(got, "VERSION ") {
				t.Errorf("%q with the owner down: the client read %q where it expects the version", req, got)
				c.line() // resynchronise
			}
		}
	})
}

// A read-through of a key the owner does not have registers no copy
// holder: the registry holds only copies that exist.
func TestRoutingMissRegistersNoHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, nodes := startFakeCluster(t, 2, nil)
		keys := ownedBy(nodes[0], nodes[0].name, "miss", 50)
		for _, k := range keys {
			if got := spillRead(t, n, nodes[1], "node0", k); !strings.HasPrefix(got, "EN") {
				t.Fatalf("spilled read of a missing key: %q", got)
			}
		}
		if k, _ := nodes[0].srv.cl.holders.stats(); k != 0 {
			t.Errorf("%d keys registered with holders after reads that all missed", k)
		}
	})
}

// A node that shuts down hands the keys it owned over to their new owners
// and keeps answering its peers while they warm them (the drain): a
// rolling restart costs no origin loads, for the keys read meanwhile or
// not. A write at the new owner clears what the leaver holds, so no later
// warm read brings an older value back.
func TestRoutingDrainWarmsNewOwners(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := &countingOrigin{}
		_, _, w, keys, stopped := startDrain(t, func(c *Config) { c.Origin = origin }, 20)
		// Half the keys are read, a quarter written, while it drains.
		for i, k := range keys[:10] {
			w.send("get " + k + "\r\n")
			w.expect("VALUE " + k + " 0 3\r\nold\r\nEND\r\n")
			if i%2 == 0 {
				w.send("set " + k + " 0 0 3\r\nnew\r\n")
				w.expect("STORED\r\n")
			}
		}
		if got := origin.total.Load(); got != 0 {
			t.Errorf("origin loads during the drain: %d, want 0", got)
		}
		if err := <-stopped; err != nil {
			t.Fatalf("shutdown: %v", err)
		}
		// Drained: the keys not read were handed over, and the written
		// keys keep their new value.
		for i, k := range keys {
			want := "VALUE " + k + " 0 3\r\nold\r\nEND\r\n"
			if i < 10 && i%2 == 0 {
				want = "VALUE " + k + " 0 3\r\nnew\r\nEND\r\n"
			}
			w.send("get " + k + "\r\n")
			w.expect(want)
		}
		if got := origin.total.Load(); got != 0 {
			t.Errorf("origin loads after the drain: %d, want 0", got)
		}
	})
}

// A fence drops the copies of the node it reaches, and the copy fills
// under way there, but not the fills of keys that node owns: when a
// member leaves, the new owners fence each other while they warm its
// keys, and a fence between a warm read and its answer made the new owner
// keep none of them (TestRoutingDrainWarmsNewOwners failed about once in
// six runs: the keys nobody read were loaded from the origin).
func TestRoutingFenceKeepsOwnedFills(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := startFakeCluster(t, 2, nil)
		s, other := nodes[0].srv, nodes[1].srv
		owned := ownedBy(nodes[0], nodes[0].name, "own", 1)[0]
		copied := ownedBy(nodes[0], nodes[1].name, "cp", 1)[0]
		v := s.cl.view.Load()
		ownedGen, copiedGen := s.gens.current(owned), s.gens.current(copied)

		// The fills are under way: node1 fences node0.
		other.cl.mu.Lock()
		fence, _ := other.cl.fenceForLocked(other.cl.view.Load(), s.cl.id, s.cl.boot)
		other.cl.mu.Unlock()
		s.cl.control("fence", fence)
		if s.cl.view.Load() != v {
			t.Fatal("a fence from a member changed the view")
		}

		res := s.keepOwned(readResult{store.Item{Key: owned, Value: []byte("warm")}, true}, v, ownedGen)
		if !res.found || string(res.it.Value) != "warm" {
			t.Errorf("owned fill across a fence: %+v, want it kept", res)
		}
		if it, ok := s.store.Get(owned); !ok || string(it.Value) != "warm" {
			t.Errorf("owned key after a fill across a fence: %q %v, want it stored", it.Value, ok)
		}
		s.putCopy(store.Item{Key: copied, Value: []byte("stale")}, time.Now(), copiedGen)
		synctest.Wait() // ristretto admits on a goroutine of its own
		if _, ok := s.cl.copies.Peek(copied); ok {
			t.Error("a copy fill across a fence kept its copy")
		}
	})
}

// An acknowledged flush_all is not undone by a leaver that drains: the
// new owners stop warming from departed owners, which the flush did not
// reach (a review found 20 of 20 reads served the pre-flush value).
func TestRoutingFlushAllDuringDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, nodes, w, keys, stopped := startDrain(t, nil, 10)
		// Keep the drain going (as the new owners' warm reads do under load).
		w.send("get " + keys[0] + "\r\n")
		w.expect("VALUE " + keys[0] + " 0 3\r\nold\r\nEND\r\n")

		w.send("flush_all\r\n")
		w.expect("OK\r\n")
		stale := 0
		for _, k := range keys {
			for _, nd := range nodes[:2] {
				c := dialPipe(t, n, nd.client())
				c.send("get " + k + "\r\n")
				if got := c.line(); got != "END" {
					stale++
					t.Errorf("%s: get %s after an acknowledged flush_all: %q (want a miss)", nd.name, k, got)
					c.line()
					c.line()
				}
			}
		}
		t.Logf("%d of %d reads after flush_all served the pre-flush value", stale, 2*len(keys))
		<-stopped
	})
}

// startDrain starts three nodes, sets count keys node2 owns to "old"
// through node0 (w), and shuts node2 down; it returns once the others
// have installed the view without it, node2 draining. stopped reports its
// Shutdown.
func startDrain(t *testing.T, tune func(*Config), count int) (n *fakeNet, nodes []*fakeNode, w *rawConn, keys []string, stopped chan error) {
	t.Helper()
	n, nodes = startFakeCluster(t, 3, tune)
	keys = ownedBy(nodes[0], nodes[2].name, "dr", count)
	w = dialPipe(t, n, nodes[0].client())
	for _, k := range keys {
		w.send("set " + k + " 0 0 3\r\nold\r\n")
		w.expect("STORED\r\n")
	}
	stopped = make(chan error, 1)
	go func() { stopped <- nodes[2].srv.Shutdown(context.Background()) }()
	settle(t, nodes[:2])
	return n, nodes, w, keys, stopped
}

// A read at the owner that looks in the store after a write stored its
// value, the write's round having opened after any look for one before
// the read, must not answer before the round ends: the holder that the
// write is still invalidating would serve the value before it to a later
// read (new, then old). Here the holder does not answer, so the round
// ends at the invalidation timeout, and the read with it.
func TestRoutingOwnedReadWaitsForRoundItFound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, owner, holder, key, w := withCopy(t, "r", nil)
		n.hang(holder.peer())

		// The write lands between the read's start and its look in the
		// store: it opens its round, stores v2 and waits for the holder.
		var once sync.Once
		owner.srv.cl.cfg.beforeOwnedRead = func(k string) {
			if k == key {
				once.Do(func() {
					w.send("set " + key + " 0 0 2\r\nv2\r\n")
					synctest.Wait()
				})
			}
		}
		r := dialPipe(t, n, owner.client())
		start := time.Now()
		r.send("get " + key + "\r\n")
		r.expect("VALUE " + key + " 0 2\r\nv2\r\nEND\r\n")
		if took := time.Since(start); took != DefaultInvalidateTimeout {
			t.Errorf("the read found v2 and answered after %v; want the end of the write's round, %v", took, DefaultInvalidateTimeout)
		}
		w.expect("STORED\r\n")
		n.resume(holder.peer())
	})
}
