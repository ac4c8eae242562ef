package server

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"spillway/internal/memcachedtest"
	"spillway/peers/wire"
)

// With peer secrets, nodes that share one work as a cluster, and a
// connection to the peer port that does not authenticate is closed before
// any request is read.
func TestPeerSecrets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, nodes := startFakeCluster(t, 2, func(c *Config) {
			c.Cluster.PeerSecrets = [][]byte{[]byte("s3cret")}
		})
		key := ownedBy(nodes[0], nodes[1].name, "sec", 1)[0]
		c := dialPipe(t, n, nodes[0].client())
		c.send("set " + key + " 0 0 1\r\nv\r\n") // forwarded to node1
		c.expect("STORED\r\n")
		c.send("get " + key + "\r\n")
		c.expect("VALUE " + key + " 0 1\r\nv\r\nEND\r\n")

		intruder := dialPipe(t, n, nodes[1].peer())
		if got := intruder.line(); !strings.HasPrefix(got, "SPILLWAY-AUTH ") {
			t.Fatalf("the peer port opened with %q, want a challenge", got)
		}
		intruder.send("md " + key + " O" + tagWarm + "1\r\n")
		intruder.expectClosed()
		c.send("get " + key + "\r\n")
		c.expect("VALUE " + key + " 0 1\r\nv\r\nEND\r\n")
	})
}

// Client authentication answers exactly as memcached -Y does, byte for
// byte, checked against a real memcached. (memcached 1.6.18 loses the
// reply to a request pipelined behind a failed attempt; Spillway answers
// both, so no case pipelines after a failure.)
func TestAuthAgainstMemcached(t *testing.T) {
	file, users := writeAuthFile(t, "alice:wonder\nbob:builder\n")
	cases := []struct{ name, send, want string }{
		{"get before auth", "get k\r\n", "CLIENT_ERROR unauthenticated\r\n"},
		{"unknown command before auth", "bogus\r\n", "CLIENT_ERROR unauthenticated\r\n"},
		{"one token", "set a 0 0 5\r\nalice\r\n", "CLIENT_ERROR bad authentication token format\r\n"},
		{"wrong password", "set a 0 0 9\r\nalice bad\r\n", "CLIENT_ERROR authentication failure\r\n"},
		{"unknown user", "set a 0 0 9\r\ncarol abc\r\n", "CLIENT_ERROR authentication failure\r\n"},
		{"bad termination", "set a 0 0 3\r\nabcde", "CLIENT_ERROR bad command line termination\r\n"},
		{"then works", "set a 0 0 12\r\nalice wonder\r\nset k 0 0 1\r\nv\r\nget k\r\n", "STORED\r\nSTORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n"},
		{"noreply does not hide it", "set a 0 0 12 noreply\r\nalice wonder\r\nversion\r\n", "STORED\r\nVERSION "},
	}
	addr, _ := startServer(t, Config{Users: users})
	targets := map[string]string{"spillway": addr}
	targets["memcached"] = memcachedtest.Start(t, "-Y", file)
	for name, target := range targets {
		for _, tc := range cases {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				c := dialRaw(t, target)
				c.send(tc.send)
				c.expect(tc.want)
			})
		}
	}
}

// Connections that have not authenticated cannot fill the peer port: a
// new one over maxUnauthed ends the oldest, and a node with the secret
// still gets in while an intruder keeps connections open.
func TestPeerUnauthenticatedLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, nodes := startFakeCluster(t, 1, func(c *Config) {
			c.Cluster.PeerSecrets = [][]byte{[]byte("s3cret")}
			c.Cluster.PeerMaxConns = 4
		})
		var intruders []*rawConn
		for range maxUnauthed + 1 {
			c := dialPipe(t, n, nodes[0].peer())
			if got := c.line(); !strings.HasPrefix(got, "SPILLWAY-AUTH ") {
				t.Fatalf("challenge: %q", got)
			}
			intruders = append(intruders, c)
		}
		intruders[0].expectClosed() // the oldest made room
		pc := wire.New(wire.Config{Addr: nodes[0].peer(), Dial: n.dial, Secrets: wire.Secrets{[]byte("s3cret")}})
		defer pc.Close()
		if r, err := pc.Exchange(time.Second, []byte("mn"), nil); err != nil || string(r.Line) != "MN" {
			t.Fatalf("a node with the secret, while intruders hold connections: %q, %v", r.Line, err)
		}
	})
}

// A real client authenticates the way memcached -Y expects, with a set
// whose value is "user password", then works; before that it is refused.
func TestAuthPymemcache(t *testing.T) {
	python := requirePythonModule(t, "pymemcache", "python3-pymemcache")
	_, users := writeAuthFile(t, "alice:wonder\n")
	addr, _ := startServer(t, Config{Users: users})
	host, port, _ := net.SplitHostPort(addr)
	script := `
import sys
from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheClientError
c = Client((sys.argv[1], int(sys.argv[2])), connect_timeout=5, timeout=5)
try:
    c.get("k")
    raise SystemExit("a get before authenticating was answered")
except MemcacheClientError as e:
    assert "unauthenticated" in str(e), e
c.close()
c = Client((sys.argv[1], int(sys.argv[2])), connect_timeout=5, timeout=5)
assert c.set("auth", "alice wonder", noreply=False)
assert c.set("k", b"v", noreply=False)
assert c.get("k") == b"v"
print("pymemcache auth ok")
`
	out, err := exec.Command(python, "-c", script, host, port).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "pymemcache auth ok") {
		t.Fatalf("pymemcache with -Y: %v\n%s", err, out)
	}
}

// writeAuthFile writes an auth file of lines and reads it as the server
// does.
func writeAuthFile(t *testing.T, lines string) (file string, users map[string]string) {
	t.Helper()
	file = filepath.Join(t.TempDir(), "auth")
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	users, err := ReadAuthFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return file, users
}
