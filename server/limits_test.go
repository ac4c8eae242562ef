package server

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"
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
