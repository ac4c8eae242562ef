package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Bounds on what a client can make a node hold.

// A client that pipelines gets and never reads their replies is cut after
// the write timeout, its connection and what it held freed.
func TestWriteTimeoutCutsNonReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, srv := startPipeServer(t, Config{WriteTimeout: time.Second})
		c := dialPipe(t, n, "client")
		v := strings.Repeat("x", 100<<10)
		c.send("set k 0 0 102400\r\n" + v + "\r\n")
		c.expect("STORED\r\n")
		c.send(strings.Repeat("get k\r\n", 100)) // never read
		time.Sleep(time.Second)
		synctest.Wait()
		if got := srv.stats.currConns.Load(); got != 0 {
			t.Fatalf("%d connections open a write timeout after the client stopped reading", got)
		}
	})
}

// The peer port has a connection limit and an idle timeout of its own.
func TestPeerPortLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, nodes := startFakeCluster(t, 1, func(c *Config) {
			c.IdleTimeout = time.Hour
			c.Cluster.PeerMaxConns = 2
			c.Cluster.PeerIdleTimeout = time.Minute
		})
		a, b := dialPipe(t, n, nodes[0].peer()), dialPipe(t, n, nodes[0].peer())
		over := dialPipe(t, n, nodes[0].peer())
		over.expect("SERVER_ERROR too many open connections\r\n")
		over.expectClosed()
		a.send("mn\r\n")
		a.expect("MN\r\n")
		time.Sleep(time.Minute)
		a.expectClosed()
		b.expectClosed()
	})
}

// A client that trickles a request byte by byte is cut by the idle
// timeout, counted from when it was last answered, not kept alive by
// each byte.
func TestIdleTimeoutCutsSlowloris(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, srv := startPipeServer(t, Config{IdleTimeout: time.Second})
		c := dialPipe(t, n, "client")
		start := time.Now()
		for i := 0; i < 50; i++ {
			c.nc.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := c.nc.Write([]byte("g")); err != nil {
				break // closed
			}
			time.Sleep(300 * time.Millisecond)
		}
		synctest.Wait()
		if got := srv.stats.currConns.Load(); got != 0 {
			t.Fatalf("a slow client still connected after %v", time.Since(start))
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("the slow client was cut after %v; the idle timeout is 1s", took)
		}
	})
}

// Noise on either port gets error lines or a closed connection, never a
// crash or a hang, and the node serves the next client.
func TestNoiseOnPorts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, nodes := startFakeCluster(t, 1, nil)
		r := rand.New(rand.NewPCG(1, 2))
		for _, addr := range []string{nodes[0].client(), nodes[0].peer()} {
			for round := range 20 {
				noise := make([]byte, 1+r.IntN(4096))
				for i := range noise {
					noise[i] = byte(r.IntN(256))
					if round%2 == 0 && noise[i] == 0x80 {
						noise[i] = 0 // half the rounds: text noise only
					}
				}
				nc, err := n.dial(context.Background(), addr)
				if err != nil {
					t.Fatal(err)
				}
				go func() {
					nc.Write(noise)
					nc.Write([]byte("\r\n"))
				}()
				nc.SetReadDeadline(time.Now().Add(10 * time.Second))
				replies, err := io.ReadAll(bufio.NewReader(io.LimitReader(nc, 1<<20)))
				if errors.Is(err, os.ErrDeadlineExceeded) {
					// Waiting for the rest of a request it cannot know is
					// over (a data block, a binary body): fine, if the
					// node is still well.
					err = nil
				}
				nc.Close()
				if err != nil {
					t.Fatalf("%s round %d: %v", addr, round, err)
				}
				for _, l := range strings.Split(strings.TrimSuffix(string(replies), "\r\n"), "\r\n") {
					if l != "" && !strings.HasPrefix(l, "ERROR") && !strings.HasPrefix(l, "CLIENT_ERROR") && !strings.HasPrefix(l, "SERVER_ERROR") && l[0] != 0x81 {
						t.Errorf("%s round %d: reply %q to noise", addr, round, l)
					}
				}
			}
			c := dialPipe(t, n, addr)
			c.send("version\r\n")
			if got := c.line(); !strings.HasPrefix(got, "VERSION ") {
				t.Fatalf("%s after the noise: %q", addr, got)
			}
		}
	})
}

// A write that fails (NOT_FOUND, EXISTS, NOT_STORED ...) for a client
// that stopped reading never waits for that client while it holds the
// key's ownership lock: a view change waits for that lock, and writes of
// every key behind it (a review saw one wait the whole write timeout).
//
// Runs on the in-process network in real time (not synctest: a goroutine
// blocked on a mutex is not durably blocked, so the bubble's clock would
// not reach the write timeout).
func TestFailedWriteReplyOutsideKeyLock(t *testing.T) {
	const writeTimeout = 3 * time.Second
	tune := func(c *Config) { c.WriteTimeout = writeTimeout }
	n, nodes := startFakeCluster(t, 2, tune)
	node0 := nodes[0]
	stripe := func(k string) uint64 { return xxhash.Sum64String(k) % keyLockStripes }
	own := ownedBy(node0, node0.name, "kl", 200)
	attackKey, victimKey := own[0], ""
	for _, k := range own[1:] {
		if stripe(k) == stripe(attackKey) {
			victimKey = k
			break
		}
	}
	if victimKey == "" {
		t.Skip("no second key in the stripe")
	}
	// A value whose get reply leaves 2 bytes free in the 64 KiB writer.
	w := dialPipe(t, n, node0.client())
	big := "g" // key
	size := 65534 - len(fmt.Sprintf("VALUE %s 0 65510\r\n", big)) - 2 - len("END\r\n")
	w.send(fmt.Sprintf("set %s 0 0 %d\r\n%s\r\n", big, size, strings.Repeat("x", size)))
	w.expect("STORED\r\n")
	if o := node0.srv.cl.view.Load().ring.Owner(big); o != node0.name {
		// Served from another node it still fills the writer the same way.
		t.Logf("(%s is owned by %s)", big, o)
	}

	// The slow client: a get that fills the writer, then an incr of a
	// missing key it owns, and it reads nothing.
	slow := dialPipe(t, n, node0.client())
	slow.send(fmt.Sprintf("get %s\r\nincr %s 1\r\n", big, attackKey))
	time.Sleep(200 * time.Millisecond)

	// A node joins: node0's view change waits for the stripe.
	start := time.Now()
	joined := make(chan *fakeNode, 1)
	go func() { joined <- startFakeNode(t, n, "node2", tune) }()
	time.Sleep(200 * time.Millisecond)

	// An unrelated client's write of another key of that stripe.
	v := dialPipe(t, n, node0.client())
	v.send("set " + victimKey + " 0 0 1\r\nv\r\n")
	reply := v.line()
	took := time.Since(start)
	t.Logf("victim set of %s (stripe %d) answered %q after %v (write timeout %v)", victimKey, stripe(victimKey), reply, took.Round(10*time.Millisecond), writeTimeout)
	if took > writeTimeout/2 {
		t.Errorf("a write of an unrelated key waited %v behind a client that stopped reading", took.Round(10*time.Millisecond))
	}
	<-joined
}
