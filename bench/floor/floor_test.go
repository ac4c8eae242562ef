package main

import (
	"bufio"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var models = []string{"goroutine", "epoll"}

// startFloor serves model on a free loopback port until the test ends.
func startFloor(t *testing.T, model string) string {
	t.Helper()
	srv := startServer(t, model)
	t.Cleanup(func() { srv.Close() })
	return srv.Addr().String()
}

func startServer(t *testing.T, model string) server {
	t.Helper()
	srv, err := start(model, "127.0.0.1:0", 2)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// TestCloseEndsConnections: Close ends every connection, one that never
// sent a byte and one that has.
func TestCloseEndsConnections(t *testing.T) {
	for _, model := range models {
		t.Run(model, func(t *testing.T) {
			srv := startServer(t, model)
			var conns []net.Conn
			for i := range 2 {
				c, err := net.Dial("tcp", srv.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if i == 1 {
					io.WriteString(c, "version\r\n")
					if got := readN(t, c, len("VERSION floor\r\n")); got != "VERSION floor\r\n" {
						t.Fatalf("got %q", got)
					}
				}
				conns = append(conns, c)
			}
			srv.Close()
			for i, c := range conns {
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if n, err := c.Read(make([]byte, 1)); err != io.EOF {
					t.Errorf("connection %d after Close: %d, %v; want io.EOF", i, n, err)
				}
			}
		})
	}
}

// TestGoroutinesForgetClosedConnections: a connection that ends leaves
// the goroutine model's set of connections to close.
func TestGoroutinesForgetClosedConnections(t *testing.T) {
	srv := startServer(t, "goroutine")
	defer srv.Close()
	g := srv.(*goroutines)
	for range 10 {
		if got := exchange(t, srv.Addr().String(), "version\r\n"); got != "VERSION floor\r\n" {
			t.Fatalf("got %q", got)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		n := len(g.conns)
		g.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d closed connections still in the set", n)
		}
		runtime.Gosched()
	}
}

func readN(t *testing.T, c net.Conn, n int) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// exchange writes req on a new connection, closes its side and reads
// until the server closes its own: all the server answered.
func exchange(t *testing.T, addr, req string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil && !strings.Contains(err.Error(), "reset by peer") {
		t.Fatal(err) // a deadline: the server did not close
	}
	return string(got)
}

func TestRequests(t *testing.T) {
	cases := []struct {
		name, req, want string
	}{
		// The first set of each model's fresh server: CAS unique 1.
		{"gets", "set g 0 0 1\r\nq\r\ngets g\r\n", "STORED\r\nVALUE g 0 1 1\r\nq\r\nEND\r\n"},
		{"set then get", "set k 5 0 2\r\nhi\r\nget k\r\n", "STORED\r\nVALUE k 5 2\r\nhi\r\nEND\r\n"},
		{"miss", "get nope\r\n", "END\r\n"},
		{"several keys, one missing", "set a 0 0 1\r\n1\r\nset b 0 0 1\r\n2\r\nget a x b\r\n",
			"STORED\r\nSTORED\r\nVALUE a 0 1\r\n1\r\nVALUE b 0 1\r\n2\r\nEND\r\n"},
		{"noreply", "set k 0 0 1 noreply\r\nz\r\nget k\r\n", "VALUE k 0 1\r\nz\r\nEND\r\n"},
		{"newline alone", "set k 0 0 1\nz\r\nget k\n", "STORED\r\nVALUE k 0 1\r\nz\r\nEND\r\n"},
		{"empty value", "set k 0 0 0\r\n\r\nget k\r\n", "STORED\r\nVALUE k 0 0\r\n\r\nEND\r\n"},
		{"unknown command", "incr k 1\r\nversion\r\n", "ERROR\r\nVERSION floor\r\n"},
		{"get of nothing", "get\r\n", "ERROR\r\n"},
		{"quit closes", "quit\r\nversion\r\n", ""},
		{"bad length closes", "set k 0 0 x\r\nversion\r\n", "CLIENT_ERROR bad command line format\r\n"},
		{"too large closes", "set k 0 0 1048577\r\nversion\r\n", "CLIENT_ERROR bad command line format\r\n"},
		{"bad chunk closes", "set k 0 0 1\r\nzz\r\nversion\r\n", "CLIENT_ERROR bad data chunk\r\n"},
		{"wrong arguments close", "set k 0 0\r\nversion\r\n", "ERROR\r\n"},
		{"line too long closes", strings.Repeat("x", 3000), "CLIENT_ERROR line too long\r\n"},
	}
	for _, model := range models {
		addr := startFloor(t, model)
		for _, tc := range cases {
			t.Run(model+"/"+tc.name, func(t *testing.T) {
				if got := exchange(t, addr, tc.req); got != tc.want {
					t.Errorf("got %q, want %q", got, tc.want)
				}
			})
		}
	}
}

// TestClient drives each model with a real memcached client, values
// larger than a connection's first buffer included, and reads its stats.
func TestClient(t *testing.T) {
	for _, model := range models {
		t.Run(model, func(t *testing.T) {
			addr := startFloor(t, model)
			mc := memcache.New(addr)
			defer mc.Close()
			big := strings.Repeat("v", 60<<10) // more than a connection's first buffer
			for i, v := range []string{"small", big} {
				key := "key" + string(rune('a'+i))
				if err := mc.Set(&memcache.Item{Key: key, Value: []byte(v), Flags: 7}); err != nil {
					t.Fatal(err)
				}
				it, err := mc.Get(key)
				if err != nil {
					t.Fatal(err)
				}
				if string(it.Value) != v || it.Flags != 7 {
					t.Fatalf("%s: got %d bytes, flags %d", key, len(it.Value), it.Flags)
				}
			}
			if _, err := mc.Get("missing"); err != memcache.ErrCacheMiss {
				t.Fatalf("missing key: %v", err)
			}
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, "stats\r\n")
			stats := map[string]string{}
			r := bufio.NewReader(c)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				if line == "END\r\n" {
					break
				}
				f := strings.Fields(line)
				stats[f[1]] = f[2]
			}
			for name, want := range map[string]string{"cmd_get": "3", "cmd_set": "2", "get_hits": "2", "get_misses": "1"} {
				if stats[name] != want {
					t.Errorf("stat %s = %q, want %s", name, stats[name], want)
				}
			}
			for _, name := range []string{"pid", "rusage_user", "rusage_system"} {
				if stats[name] == "" {
					t.Errorf("no stat %s", name)
				}
			}
		})
	}
}
