package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Clients that send their last requests and close at once: the end of
// the stream arrives with the requests, and a connection that waits
// before it reads (rawio.WrapWaiting) is not woken for it after its
// replies. The port's sweep ends those connections (sweepEnded): each
// client gets every reply, then the end of its stream, and the node's
// connection count comes back down (found by review: 17 of 40 half-closed
// connections stayed open, counted against -c, without the sweep).
func TestHalfClosedClientsClosed(t *testing.T) {
	tests := []struct {
		name  string
		send  func(i int) string
		close func(c *net.TCPConn)
		want  func(i int) string // the replies before the end of stream
	}{
		{"requests, then shutdown(SHUT_WR)",
			func(i int) string { return fmt.Sprintf("set k%d 0 0 1\r\nx\r\nget k%d\r\n", i, i) },
			func(c *net.TCPConn) { c.CloseWrite() },
			func(i int) string { return fmt.Sprintf("STORED\r\nVALUE k%d 0 1\r\nx\r\nEND\r\n", i) }},
		{"noreply set, then close",
			func(i int) string { return fmt.Sprintf("set n%d 0 0 1 noreply\r\nx\r\n", i) },
			func(c *net.TCPConn) { c.Close() },
			nil},
		// A request cut short by the end: a read within a request reads
		// first and sees it at once (found by review: with every read
		// waiting first, these stayed open for good, out of the sweep's
		// sight since they were not idle, and held Shutdown up). No
		// reply, as memcached gives none.
		{"part of a line, then shutdown(SHUT_WR)", func(int) string { return "get k" },
			func(c *net.TCPConn) { c.CloseWrite() }, func(int) string { return "" }},
		{"part of a value, then shutdown(SHUT_WR)", func(int) string { return "set k 0 0 10\r\nabc" },
			func(c *net.TCPConn) { c.CloseWrite() }, func(int) string { return "" }},
		{"part of a binary header, then shutdown(SHUT_WR)", func(int) string { return "\x80\x00\x00\x01" },
			func(c *net.TCPConn) { c.CloseWrite() }, func(int) string { return "" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, srv := startServer(t, Config{sweepEvery: 20 * time.Millisecond})
			const clients = 40
			conns := make([]*net.TCPConn, clients)
			for i := range conns {
				nc, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				conns[i] = nc.(*net.TCPConn)
				defer nc.Close()
			}
			// Every connection waits for its first request before any is
			// sent, so that its bytes and its end come in one wakeup.
			waitIdle(t, srv, clients)
			var wg sync.WaitGroup
			for i, c := range conns {
				wg.Go(func() {
					c.SetDeadline(time.Now().Add(20 * time.Second))
					io.WriteString(c, tt.send(i))
					tt.close(c)
					if tt.want == nil {
						return
					}
					got, err := io.ReadAll(bufio.NewReader(c))
					if err != nil || string(got) != tt.want(i) {
						t.Errorf("client %d: %q %v, want %q then the end of the stream", i, got, err, tt.want(i))
					}
				})
			}
			wg.Wait()
			deadline := time.Now().Add(20 * time.Second)
			for {
				srv.mu.Lock()
				open := srv.clientConns
				srv.mu.Unlock()
				if open == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d closed clients' connections still open", open, clients)
				}
				time.Sleep(10 * time.Millisecond) // polls the node: no event to wait for
			}
			if tt.want == nil { // the noreply sets were stored
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				r := bufio.NewReader(c)
				for i := range clients {
					fmt.Fprintf(c, "get n%d\r\n", i)
					if l, _ := r.ReadString('\n'); !strings.HasPrefix(l, "VALUE") {
						t.Fatalf("get n%d: %q", i, l)
					}
					r.ReadString('\n')
					r.ReadString('\n')
				}
			}
		})
	}
}

// waitIdle waits until n client connections of srv wait for a request.
func waitIdle(t *testing.T, srv *Server, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		idle := 0
		srv.mu.Lock()
		for c := range srv.conns {
			if !c.peer && c.idle.Load() {
				idle++
			}
		}
		srv.mu.Unlock()
		if idle >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections idle", idle, n)
		}
		time.Sleep(time.Millisecond) // polls the node: no event to wait for
	}
}
