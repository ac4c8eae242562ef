package main

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"go.uber.org/goleak"
)

func TestHelpListsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	f := defaultServeFlags()
	if code := run([]string{"serve", "--help"}, &out, &out); code != 0 {
		t.Fatalf("serve --help exit %d", code)
	}
	for _, o := range f.options() {
		if !strings.Contains(out.String(), "--"+o.long) || !strings.Contains(out.String(), o.env("SPILLWAY_")) {
			t.Errorf("serve --help lacks --%s or $%s", o.long, o.env("SPILLWAY_"))
		}
	}
	out.Reset()
	b := defaultBenchFlags()
	if code := run([]string{"bench", "--help"}, &out, &out); code != 0 {
		t.Fatalf("bench --help exit %d", code)
	}
	for _, o := range b.options() {
		if !strings.Contains(out.String(), "--"+o.long) || !strings.Contains(out.String(), o.env("SPILLWAY_BENCH_")) {
			t.Errorf("bench --help lacks --%s or its variable", o.long)
		}
	}
}

func TestTopLevelHelpListsAll(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"--help"}, &out, &out); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	sf, bf := defaultServeFlags(), defaultBenchFlags()
	for _, o := range append(sf.options(), bf.options()...) {
		if !strings.Contains(out.String(), "--"+o.long) {
			t.Errorf("spillway --help lacks --%s", o.long)
		}
	}
}

func TestFlagsAndEnvironment(t *testing.T) {
	t.Setenv("SPILLWAY_MEMORY_LIMIT", "128")
	t.Setenv("SPILLWAY_PORT", "22122")
	f := defaultServeFlags()
	err := parseOptions("serve", "", f.options(), []string{"-m", "32", "-I", "2m", "-c", "10", "-vv", "--idle-timeout", "1m"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		got, want int64
	}{
		{"flag beats env", f.memoryBytes, 32 << 20},
		{"env when no flag", int64(f.port), 22122},
		{"size suffix", f.maxItemSize, 2 << 20},
		{"conn limit", int64(f.connLimit), 10},
		{"-vv", int64(f.verbose), 2},
		{"duration", int64(f.idleTimeout), int64(time.Minute)},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s: got %d, want %d", c.name, c.got, c.want)
		}
	}
	if got := f.addr(); got != "127.0.0.1:22122" {
		t.Errorf("addr = %s", got)
	}
	for _, bad := range [][]string{{"-m", "lots"}, {"--port", "-1"}, {"--nope"}, {"extra"}} {
		f := defaultServeFlags()
		if err := parseOptions("serve", "", f.options(), bad, &bytes.Buffer{}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// freePort returns a loopback port that is free now for TCP and, with
// network "udp", for UDP too (memberlist binds both on the gossip port).
// It picks below the kernel's ephemeral range (32768 up): a port from
// there could be handed to an outgoing connection of a test running
// alongside between this check and the node's bind.
func freePort(t *testing.T, network string) int {
	t.Helper()
	for range 200 {
		port := 20000 + rand.IntN(12000)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		if network == "udp" {
			c, err := net.ListenPacket("udp", addr)
			if err != nil {
				ln.Close()
				continue
			}
			c.Close()
		}
		ln.Close()
		return port
	}
	t.Fatal("no free port below the ephemeral range")
	return 0
}

// roundRobin is the ServerSelector README recommends: every request to the
// next node, so a hot key's reads spread over the cluster.
type roundRobin struct {
	addrs []net.Addr
	next  atomic.Uint64
}

func (r *roundRobin) PickServer(string) (net.Addr, error) {
	return r.addrs[r.next.Add(1)%uint64(len(r.addrs))], nil
}

func (r *roundRobin) Each(f func(net.Addr) error) error {
	for _, a := range r.addrs {
		if err := f(a); err != nil {
			return err
		}
	}
	return nil
}

// TestThreeProcesses runs three "spillway serve" processes joined by gossip
// and drives them with gomemcache.
func TestThreeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	bin := filepath.Join(t.TempDir(), "spillway")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var addrs []string
	var procs []*exec.Cmd
	var logs []*bytes.Buffer
	seed := ""
	for i := range 3 {
		client := freePort(t, "tcp")
		gossip := freePort(t, "udp")
		addr := "127.0.0.1:" + strconv.Itoa(client)
		args := []string{"serve", "--listen", addr, "--gossip", "127.0.0.1:" + strconv.Itoa(gossip),
			"--peer-listen", "127.0.0.1:0", "--name", fmt.Sprintf("p%d", i), "-m", "16"}
		if seed != "" {
			args = append(args, "--join", seed)
		} else {
			seed = "127.0.0.1:" + strconv.Itoa(gossip)
		}
		cmd := exec.Command(bin, args...)
		var log bytes.Buffer
		cmd.Stderr = &log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd)
		logs = append(logs, &log)
		addrs = append(addrs, addr)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			for _, p := range procs {
				p.Process.Kill()
				p.Wait()
			}
		}
	})
	// Wait until every node reports three members.
	deadline := time.Now().Add(30 * time.Second)
	for _, a := range addrs {
		for clusterNodes(a) != 3 {
			if time.Now().After(deadline) {
				for i, l := range logs {
					t.Logf("node %d log:\n%s", i, l)
				}
				t.Fatalf("%s never saw 3 nodes", a)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	rr := &roundRobin{}
	for _, a := range addrs {
		tcp, _ := net.ResolveTCPAddr("tcp", a)
		rr.addrs = append(rr.addrs, tcp)
	}
	for _, mc := range []*memcache.Client{memcache.New(addrs...), memcache.NewFromSelector(rr)} {
		mc.Timeout = 5 * time.Second
		for i := range 200 {
			k := fmt.Sprintf("proc-key-%d", i)
			if err := mc.Set(&memcache.Item{Key: k, Value: []byte(k)}); err != nil {
				t.Fatal(err)
			}
		}
		for round := range 3 {
			for i := range 200 {
				k := fmt.Sprintf("proc-key-%d", i)
				it, err := mc.Get(k)
				if err != nil || string(it.Value) != k {
					t.Fatalf("round %d get %s: %v %v", round, k, it, err)
				}
			}
		}
		mc.Close()
	}

	// SIGTERM: each node leaves the cluster and exits 0.
	stopped = true
	for i, p := range procs {
		p.Process.Signal(syscall.SIGTERM)
		if err := p.Wait(); err != nil {
			t.Errorf("node %d exit: %v\n%s", i, err, logs[i])
		}
	}
}

// clusterNodes reads cluster_nodes from a node's stats (0 if unreachable).
func clusterNodes(addr string) int {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "stats\r\n")
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		line := sc.Text()
		if line == "END" {
			break
		}
		if v, ok := strings.CutPrefix(line, "STAT cluster_nodes "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The peer port listens where the other nodes are told to reach it, never
// on every interface unless --peer-listen says so.
func TestPeerAddr(t *testing.T) {
	for _, tc := range []struct {
		client, advertise, peerListen string
		want                          string // "" for an error
	}{
		{client: "127.0.0.1:11211", want: "127.0.0.1:21211"},
		{client: "10.0.0.7:11211", advertise: "10.0.0.7", want: "10.0.0.7:21211"},
		{client: "0.0.0.0:11211", want: ""},
		{client: "0.0.0.0:11211", advertise: "10.1.2.3", want: "10.1.2.3:21211"},
		{client: "[::]:11211", advertise: "10.1.2.3:7946", want: "10.1.2.3:21211"},
		{client: "0.0.0.0:11211", peerListen: "0.0.0.0:21000", want: "0.0.0.0:21000"},
		{client: "127.0.0.1:60000", want: "127.0.0.1:0"},
	} {
		f := serveFlags{advertise: tc.advertise, peerListen: tc.peerListen}
		addr, err := net.ResolveTCPAddr("tcp", tc.client)
		if err != nil {
			t.Fatal(err)
		}
		got, err := f.peerAddr(addr)
		if tc.want == "" {
			if err == nil {
				t.Errorf("%+v: peer port on %s, want an error", tc, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%+v: %q, %v; want %q", tc, got, err, tc.want)
		}
	}
}
