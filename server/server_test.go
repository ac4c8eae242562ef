package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the run if goroutines outlive the tests. memberlist's
// Shutdown does not wait for a probe under way, and a copy invalidation
// may still be finishing its peer timeout: let the count settle first.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(10 * time.Second)
		err := goleak.Find()
		for err != nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			err = goleak.Find()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// quietLogger keeps test output readable; failures are reported by the
// tests themselves. SPILLWAY_TEST_LOG=1 sends every node's log, debug
// lines included, to stderr instead, to see what led to a failure.
func quietLogger() *slog.Logger {
	if os.Getenv("SPILLWAY_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startServer runs a node on a loopback port until the test ends and
// returns its address.
func startServer(t testing.TB, cfg Config) (string, *Server) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return ln.Addr().String(), srv
}

// startSpillway is the node the conformance cases run against.
func startSpillway(t testing.TB) string {
	addr, _ := startServer(t, Config{})
	return addr
}

// rawConn is a client speaking raw protocol lines.
type rawConn struct {
	t  testing.TB
	nc net.Conn
	r  *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, r: bufio.NewReader(nc)}
}

func (c *rawConn) send(s string) {
	c.t.Helper()
	c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c.nc, s); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// expect reads exactly len(want) bytes and compares them.
func (c *rawConn) expect(want string) {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(want))
	n, err := io.ReadFull(c.r, got)
	if err != nil {
		c.t.Fatalf("read: %v after %q, want %q", err, got[:n], want)
	}
	if string(got) != want {
		c.t.Fatalf("got %q, want %q", got, want)
	}
}

// line reads one reply line without its "\r\n".
func (c *rawConn) line() string {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	s, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatalf("read line: %v (got %q)", err, s)
	}
	return strings.TrimSuffix(s, "\r\n")
}

// expectClosed waits for the server to close the connection.
func (c *rawConn) expectClosed() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	rest, err := io.ReadAll(c.r)
	if err != nil {
		c.t.Fatalf("want EOF, got %v after %q", err, rest)
	}
	if len(rest) > 0 {
		c.t.Fatalf("unexpected bytes before close: %q", rest)
	}
}

func TestShutdownFinishesInFlightRequests(t *testing.T) {
	srv, err := New(Config{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()

	idle := dialRaw(t, ln.Addr().String())
	busy := dialRaw(t, ln.Addr().String())
	idle.send("version\r\n")
	idle.expect("VERSION " + Version + "\r\n")
	// The busy client has sent half a request when the shutdown begins:
	// it must still be answered.
	// Both connections wait for requests; then only the busy one can
	// become busy.
	waitFor(t, func() bool { return srv.busyConns() == 0 && srv.stats.currConns.Load() == 2 })
	busy.send("set k 0 0 5\r\nhel")
	waitFor(t, func() bool { return srv.busyConns() == 1 })

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- srv.Shutdown(ctx)
	}()
	idle.expectClosed()
	busy.send("lo\r\n")
	busy.expect("STORED\r\n")
	busy.expectClosed()
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-done; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Fatal("listener still accepts after Shutdown")
	}
}

func TestConnLimit(t *testing.T) {
	addr, srv := startServer(t, Config{MaxConns: 2})
	a, b := dialRaw(t, addr), dialRaw(t, addr)
	a.send("version\r\n")
	a.line()
	b.send("version\r\n")
	b.line()
	c := dialRaw(t, addr)
	c.expect("SERVER_ERROR too many open connections\r\n")
	c.expectClosed()
	a.send("quit\r\n")
	a.expectClosed()
	waitFor(t, func() bool { return srv.stats.currConns.Load() == 1 })
	d := dialRaw(t, addr)
	d.send("version\r\n")
	d.expect("VERSION " + Version + "\r\n")
}

// TestBatchAcrossFirstRead: a connection that was waiting reads its
// next bytes into a small buffer of its own (conn.first) before its
// reader's; a pipelined batch longer than that, cut by the first read
// anywhere (in a request line, in a value, in its CRLF) is answered
// whole and in order. The batch goes in one write on loopback, so the
// first read takes the first len(first) bytes of it.
func TestBatchAcrossFirstRead(t *testing.T) {
	addr, _ := startServer(t, Config{})
	first := len(conn{}.first)
	const value = "0123456789abcdefghij0123456789abcdefghij" // 40 bytes
	// The set's request is a 14-byte line, the value and its CRLF: cut
	// is where in it the first read ends.
	for _, cut := range []int{1, 5, 13, 14, 20, 53, 54, 55} {
		// Pad up to the set with mn lines and a get of a missing key
		// whose length takes up the rest: 4q + 6 + r bytes.
		r := 1 + (first-cut-7)%4
		q := (first - cut - 6 - r) / 4
		pad := strings.Repeat("mn\r\n", q) + "get " + strings.Repeat("p", r) + "\r\n"
		if len(pad) != first-cut {
			t.Fatalf("cut %d: pad of %d bytes, want %d", cut, len(pad), first-cut)
		}
		c := dialRaw(t, addr)
		c.send(pad + "set k 0 0 40\r\n" + value + "\r\n" + "get k\r\n")
		c.expect(strings.Repeat("MN\r\n", q) + "END\r\n" + "STORED\r\nVALUE k 0 40\r\n" + value + "\r\nEND\r\n")
	}
}

func TestIdleTimeout(t *testing.T) {
	addr, _ := startServer(t, Config{IdleTimeout: 50 * time.Millisecond})
	c := dialRaw(t, addr)
	c.send("version\r\n")
	c.line()
	c.expectClosed()
}

// busyConns counts connections in the middle of a request.
func (s *Server) busyConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c := range s.conns {
		if !c.idle.Load() {
			n++
		}
	}
	return n
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t testing.TB, cond func() bool) { waitForExplained(t, cond, nil) }

// waitForExplained is waitFor that calls explain, if not nil, before it
// fails, to log what was not reached.
func waitForExplained(t testing.TB, cond func() bool, explain func()) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			if explain != nil {
				explain()
			}
			t.Fatal("condition not reached within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestConformanceSpillway runs the byte-for-byte cases, which
// TestConformanceMemcached proves against a real memcached, against a node.
func TestConformanceSpillway(t *testing.T) {
	runConformance(t, startSpillway(t))
}
