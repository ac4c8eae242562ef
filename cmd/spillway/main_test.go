package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"go.uber.org/goleak"

	"spillway/internal/buildtest"
)

func TestHelpListsEveryFlag(t *testing.T) {
	for _, c := range []struct {
		cmd    string
		prefix string
		opts   []option
	}{
		{"serve", "SPILLWAY_", func() []option { f := defaultServeFlags(); return f.options() }()},
		{"bench", "SPILLWAY_BENCH_", func() []option { f := defaultBenchFlags(); return f.options() }()},
	} {
		// Help is asked for, so it goes to stdout (`spillway serve --help | less`).
		var out, errOut bytes.Buffer
		if code := run([]string{c.cmd, "--help"}, &out, &errOut); code != 0 || errOut.Len() > 0 {
			t.Fatalf("%s --help: exit %d, stderr %q", c.cmd, code, errOut.String())
		}
		for _, o := range c.opts {
			if !strings.Contains(out.String(), "--"+o.long) || !strings.Contains(out.String(), o.env(c.prefix)) {
				t.Errorf("%s --help lacks --%s or $%s", c.cmd, o.long, o.env(c.prefix))
			}
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
	_, err := parseOptions("serve", "", f.options(), []string{"-m", "32", "-I", "2m", "-c", "10", "-vv", "--idle-timeout", "1m"}, &bytes.Buffer{})
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
		if _, err := parseOptions("serve", "", f.options(), bad, &bytes.Buffer{}); err == nil {
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

// freeGossip is a loopback address free for gossip (TCP and UDP).
func freeGossip(t *testing.T) string {
	return "127.0.0.1:" + strconv.Itoa(freePort(t, "udp"))
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

// node is a "spillway serve" process.
type node struct {
	cmd    *exec.Cmd
	log    bytes.Buffer // read it only once the process has exited
	client string
	gossip string
	exited chan struct{}
	err    error // the exit, once exited is closed
}

// startNode starts "spillway serve" on free loopback ports (gossip on
// gossip unless that is empty) with args; the test's end kills it if it
// still runs.
func startNode(t *testing.T, name, gossip string, args ...string) *node {
	t.Helper()
	bin, err := buildtest.Binary(".")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{
		client: "127.0.0.1:" + strconv.Itoa(freePort(t, "tcp")),
		gossip: cmp.Or(gossip, freeGossip(t)),
		exited: make(chan struct{}),
	}
	args = append([]string{"serve", "--listen", n.client, "--gossip", n.gossip,
		"--peer-listen", "127.0.0.1:0", "--name", name, "-m", "16"}, args...)
	n.cmd = exec.Command(bin, args...)
	n.cmd.Stderr = &n.log
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		n.err = n.cmd.Wait()
		close(n.exited)
	}()
	t.Cleanup(func() {
		n.cmd.Process.Kill()
		<-n.exited
	})
	return n
}

// stop sends SIGTERM and returns the exit error and the log.
func (n *node) stop() (error, string) {
	n.cmd.Process.Signal(syscall.SIGTERM)
	<-n.exited
	return n.err, n.log.String()
}

// waitNodes waits until every node reports want members, and fails with
// their logs if that takes 30s.
func waitNodes(t *testing.T, want int, nodes ...*node) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range nodes {
		for clusterNodes(n.client) != want {
			if time.Now().After(deadline) {
				fatalWithLogs(t, nodes, "%s never saw %d nodes", n.client, want)
			}
			time.Sleep(20 * time.Millisecond) // polls a process; no event to wait for
		}
	}
}

// fatalWithLogs ends the test with the message, after the logs of nodes:
// it stops them, because a log is read only once its process has exited.
func fatalWithLogs(t *testing.T, nodes []*node, format string, args ...any) {
	t.Helper()
	for _, n := range nodes {
		n.cmd.Process.Kill()
		<-n.exited
		t.Logf("%s log:\n%s", n.client, n.log.String())
	}
	t.Fatalf(format, args...)
}

// TestThreeProcesses runs three "spillway serve" processes joined by gossip
// and drives them with gomemcache.
func TestThreeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	var nodes []*node
	var addrs []string
	for i := range 3 {
		var join []string
		if i > 0 {
			join = []string{"--join", nodes[0].gossip}
		}
		nodes = append(nodes, startNode(t, fmt.Sprintf("p%d", i), "", join...))
		addrs = append(addrs, nodes[i].client)
	}
	waitNodes(t, 3, nodes...)

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

	// SIGTERM: each node leaves the cluster and exits 0, and every line it
	// logs names it (they may share one terminal, as in make run).
	for i, n := range nodes {
		err, log := n.stop()
		if err != nil {
			t.Errorf("node %d exit: %v\n%s", i, err, log)
		}
		self := fmt.Sprintf(" self=p%d", i)
		for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
			if !strings.Contains(line, self) {
				t.Errorf("node %d logged a line without%s: %s", i, self, line)
			}
		}
	}
}

// TestJoinBeforeSeed: a node whose --join seed is not up yet serves alone
// and joins the seed when it comes (issue 15: it exited after 10s), and a
// node may list its own address, so that all can share one --join.
func TestJoinBeforeSeed(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	seed := freeGossip(t)
	b := startNode(t, "b", "", "--join", seed)
	waitNodes(t, 1, b) // it answers clients alone
	a := startNode(t, "a", seed, "--join", seed+","+b.gossip)
	waitNodes(t, 2, a, b)
	for _, n := range []*node{a, b} {
		if err, log := n.stop(); err != nil {
			t.Errorf("%s: %v\n%s", n.client, err, log)
		}
	}
}

// TestThreads: -t sets the threads that run Go code, which the node
// reports as memcached reports its -t, in stat threads.
func TestThreads(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		env  string
		want int
	}{
		{"one", []string{"-t", "1"}, "", 1},
		{"long form", []string{"--threads", "3"}, "", 3},
		// Values no machine's default is likely to be, so that an
		// ignored setting shows.
		{"from the environment", nil, "5", 5},
		{"flag beats environment", []string{"-t", "1"}, "5", 1},
		{"more than the CPUs", []string{"-t", strconv.Itoa(runtime.NumCPU() + 1)}, "", runtime.NumCPU() + 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("SPILLWAY_THREADS", c.env)
			n := startNode(t, "a", "", c.args...)
			deadline := time.Now().Add(30 * time.Second)
			got := statUint(n.client, "threads")
			for got == 0 && time.Now().Before(deadline) {
				select {
				case <-n.exited:
					fatalWithLogs(t, []*node{n}, "node exited: %v", n.err)
				case <-time.After(20 * time.Millisecond): // polls a process; no event to wait for
				}
				got = statUint(n.client, "threads")
			}
			if got != c.want {
				fatalWithLogs(t, []*node{n}, "stat threads = %d, want %d", got, c.want)
			}
			// Threads above the CPUs are allowed, with a warning.
			_, log := n.stop()
			if warned, want := strings.Contains(log, "more threads than CPUs"), c.want > runtime.NumCPU(); warned != want {
				t.Errorf("warned of more threads than CPUs: %v, want %v; log:\n%s", warned, want, log)
			}
		})
	}
}

// clusterNodes reads cluster_nodes from a node's stats (0 if unreachable).
func clusterNodes(addr string) int { return statUint(addr, "cluster_nodes") }

// statUint reads the stat called name from the stats of the node at addr:
// 0 if it has none or does not answer.
func statUint(addr, name string) int {
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
		if v, ok := strings.CutPrefix(line, "STAT "+name+" "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

func TestMain(m *testing.M) {
	code := m.Run()
	buildtest.Cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
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

// TestBenchEntryGets: on a cluster, each node's cmd_get also counts the
// reads other nodes forwarded to it; the bench's entry gets count only
// what the bench sent it, and add up to the bench's gets (issue 15).
func TestBenchEntryGets(t *testing.T) {
	b, stdout := benchReport(t, "--local", "3", "--requests", "3000", "--keys", "300", "--conns", "6")
	var rep struct {
		Gets    int64
		Servers []struct {
			EntryGets uint64 `json:"entry_gets"`
			CmdGet    uint64 `json:"cmd_get"`
		}
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	var entry, cmdGet uint64
	for _, s := range rep.Servers {
		entry += s.EntryGets
		cmdGet += s.CmdGet
	}
	if entry != uint64(rep.Gets) || cmdGet <= entry {
		t.Errorf("gets %d, entry gets %d, cmd_get %d: want entry gets = gets < cmd_get", rep.Gets, entry, cmdGet)
	}
	if !strings.Contains(stdout, "entry gets") {
		t.Errorf("no entry gets column:\n%s", stdout)
	}
}

// TestREADMEFlags: README's tables list every flag of serve and bench,
// with the words of its --help (README may say more, and gives a default
// the help puts in its words in the default column).
func TestREADMEFlags(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	sf, bf := defaultServeFlags(), defaultBenchFlags()
	for _, o := range append(sf.options(), bf.options()...) {
		var help bytes.Buffer
		printUsage(&help, "", "", []option{o})
		// "  -l, --listen VALUE\n      usage (default ...) [$VAR]"
		lines := strings.Split(help.String(), "\n")
		names := strings.TrimSpace(lines[len(lines)-3])
		usage, _, _ := strings.Cut(o.usage, " (default: ")
		row := "| `" + names + "` | " + usage
		i := bytes.Index(readme, []byte(row))
		if i < 0 {
			t.Errorf("README lacks a row beginning %q", row)
			continue
		}
		line, _, _ := bytes.Cut(readme[i:], []byte("\n"))
		cells := strings.Split(string(line), " | ")
		if d := o.value.String(); d != "" && d != "0" && d != "false" && cells[len(cells)-2] != "`"+d+"`" {
			t.Errorf("README's default of %s is %s; --help's %s", names, cells[len(cells)-2], d)
		}
	}
}

// benchReport runs spillway bench with args, its report written with
// --json, and returns the report and what the bench printed.
func benchReport(t *testing.T, args ...string) (report []byte, stdout string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "report.json")
	var o, e bytes.Buffer
	if code := run(append(append([]string{"bench"}, args...), "--json", out), &o, &e); code != 0 {
		t.Fatalf("spillway bench %s: exit %d: %s", strings.Join(args, " "), code, e.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b, o.String()
}
