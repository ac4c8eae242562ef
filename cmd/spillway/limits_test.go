package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// idleConnBudget is what README states an idle client connection costs a
// node: its goroutine and a few hundred bytes; its read and write buffers
// go back to a pool while it waits.
const idleConnBudget = 20 << 10

// 10,000 idle client connections, each of which has read a 10 KiB value,
// cost a node at most idleConnBudget each, and the one past --conn-limit
// gets memcached's error at once.
func TestIdleConnectionMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process and 10,000 connections")
	}
	const conns = 10_000
	n := startNode(t, "idle", "", "-c", strconv.Itoa(conns))
	waitNodes(t, 1, n)
	setBig(t, dialLine(t, n.client), 10<<10).Close()
	before := rss(t, n.cmd.Process.Pid)
	open := make([]net.Conn, 0, conns)
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for range conns {
		c := dialLine(t, n.client)
		open = append(open, c)
		fmt.Fprint(c, "get big\r\n")
		if got := readLine(t, c); !strings.HasPrefix(got, "VALUE big") {
			t.Fatalf("get: %q", got)
		}
		readLine(t, c) // the value
		readLine(t, c) // END
	}
	after := rss(t, n.cmd.Process.Pid)
	per := (after - before) / conns
	t.Logf("%d idle connections: RSS %d -> %d KiB, %d bytes each", conns, before>>10, after>>10, per)
	if per > idleConnBudget {
		t.Errorf("an idle connection costs %d bytes, over the %d stated", per, idleConnBudget)
	}
	over := dialLine(t, n.client)
	defer over.Close()
	if got := readLine(t, over); got != "SERVER_ERROR too many open connections" {
		t.Errorf("connection past --conn-limit: %q", got)
	}
}

// setBig stores size bytes under the key "big" over c and returns c.
func setBig(t *testing.T, c *lineConn, size int) *lineConn {
	t.Helper()
	fmt.Fprintf(c, "set big 0 0 %d\r\n%s\r\n", size, strings.Repeat("v", size))
	if got := readLine(t, c); got != "STORED" {
		t.Fatalf("set: %q", got)
	}
	return c
}

// lineConn is a connection whose replies are read a line at a time.
type lineConn struct {
	net.Conn
	r *bufio.Reader
}

func dialLine(t *testing.T, addr string) *lineConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return &lineConn{Conn: c, r: bufio.NewReaderSize(c, 512)}
}

func readLine(t *testing.T, c *lineConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	l, err := c.r.ReadString('\n')
	if err != nil {
		t.Fatalf("read: %v (got %q)", err, l)
	}
	return strings.TrimSuffix(l, "\r\n")
}

// rss is a process's resident set, in bytes.
func rss(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// Clients that pipeline gets of a 1 MiB value and never read hold their
// own connection back, not the node's memory: each costs about what the
// socket buffers hold, and the node answers everyone else meanwhile.
func TestUnreadPipelinedGetsStayBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	n := startNode(t, "unread", "", "-m", "64")
	waitNodes(t, 1, n)
	const size = 1<<20 - 512
	setup := setBig(t, dialLine(t, n.client), size)
	defer setup.Close()
	before := rss(t, n.cmd.Process.Pid)
	const conns, gets = 8, 2000
	var open []*lineConn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for range conns {
		c := dialLine(t, n.client)
		open = append(open, c)
		go fmt.Fprint(c, strings.Repeat("get big\r\n", gets)) // blocks once the node stops reading
	}
	// Wait until the node has written all it can and its memory settled:
	// every connection is blocked on a full socket buffer.
	last, deadline := 0, time.Now().Add(20*time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond) // polls a process's memory
		r := rss(t, n.cmd.Process.Pid)
		if r == last {
			break
		}
		last = r
	}
	// The node keeps serving: a fresh client is answered at once.
	fmt.Fprint(setup, "get big\r\n")
	if got := readLine(t, setup); !strings.HasPrefix(got, "VALUE big") {
		t.Fatalf("get while others do not read: %q", got)
	}
	setup.r.Discard(size + 2)
	readLine(t, setup) // END
	after := rss(t, n.cmd.Process.Pid)
	per := (after - before) / conns
	t.Logf("%d clients each pipelining %d gets of a 1 MiB value, reading nothing: RSS %d -> %d KiB, %d KiB each",
		conns, gets, before>>10, after>>10, per>>10)
	if per > 4<<20 {
		t.Errorf("a client that does not read costs the node %d KiB", per>>10)
	}
}
