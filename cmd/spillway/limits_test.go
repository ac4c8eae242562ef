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
	setup := dialLine(t, n.client)
	value := strings.Repeat("v", 10<<10)
	fmt.Fprintf(setup, "set big 0 0 %d\r\n%s\r\n", len(value), value)
	if got := readLine(t, setup); got != "STORED" {
		t.Fatalf("set: %q", got)
	}
	setup.Close()
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
