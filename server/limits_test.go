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
