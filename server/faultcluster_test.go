package server

// The fault harness's cluster: real `spillway serve` processes, one per
// network namespace (internal/faultnet), an origin in the root namespace,
// a poller of every node's stats, and the nodes' logs read back for the
// events the checker and the table need. faults_test.go runs the
// scenarios.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"spillway/bench"
	"spillway/internal/faultnet"
)

const (
	faultNodes      = 5
	faultClientPort = 11211
	faultGossipPort = 7946
	benchKeyPrefix  = "bench:"
	benchValueSize  = 100
)

// faultNode is one `spillway serve` process and its restarts.
type faultNode struct {
	h    int    // host number in the network, from 1
	name string // n1 … n5
	addr string // client address
	log  string // path of its log (every run appended)

	mu      sync.Mutex
	cmd     *exec.Cmd     // guarded by mu: the current run, nil when down
	exited  chan struct{} // guarded by mu: closed when the current run ends
	exitErr error         // guarded by mu: how the last run ended
	expect  bool          // guarded by mu: the harness stopped it (a kill or SIGTERM)
	crashes []string      // guarded by mu: runs that ended without the harness asking
}

// faultCluster is the network, the nodes and the origin of one scenario.
type faultCluster struct {
	t      *testing.T
	net    *faultnet.Net
	bin    string
	dir    string // logs
	nodes  []*faultNode
	origin *faultOrigin
	args   []string // extra serve flags
	poll   *statsPoller
}

// faultOrigin is the origin the nodes read through: the checker's keys
// from versionedOrigin, the bench's keys as bench.OriginValue (values the
// bench accepts), every call counted with its time.
type faultOrigin struct {
	vo  *versionedOrigin
	srv *http.Server
	url string

	mu    sync.Mutex
	calls []originCall // guarded by mu
}

type originCall struct {
	at  time.Time
	key string
}

func startFaultOrigin(t *testing.T, ip string) *faultOrigin {
	o := &faultOrigin{vo: &versionedOrigin{versions: map[string]int{}}}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	o.url = "http://" + ln.Addr().String() + "/{key}"
	o.srv = &http.Server{Handler: o, ReadHeaderTimeout: 5 * time.Second}
	go o.srv.Serve(ln)
	t.Cleanup(func() { o.srv.Close() })
	return o
}

func (o *faultOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.URL.Path, "/")
	o.mu.Lock()
	o.calls = append(o.calls, originCall{time.Now(), key})
	o.mu.Unlock()
	if strings.HasPrefix(key, benchKeyPrefix) {
		w.Write(bench.OriginValue(key, benchValueSize))
		return
	}
	o.vo.ServeHTTP(w, r)
}

// between counts the calls in [from, to), all and for bench keys, and the
// distinct bench keys they asked for.
func (o *faultOrigin) between(from, to time.Time) (all, benchCalls, benchKeys int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := map[string]bool{}
	for _, c := range o.calls {
		if c.at.Before(from) || !c.at.Before(to) {
			continue
		}
		all++
		if strings.HasPrefix(c.key, benchKeyPrefix) {
			benchCalls++
			seen[c.key] = true
		}
	}
	return all, benchCalls, len(seen)
}

// newFaultCluster builds the network and starts every node; the cleanup
// stops them and removes the network. impairable are the hosts whose link
// the scenario may slow down.
func newFaultCluster(t *testing.T, bin string, impairable []int, args ...string) *faultCluster {
	n, err := faultnet.Setup(faultnet.Config{Prefix: "spwf", Hosts: faultNodes, Impairable: impairable})
	if err != nil {
		t.Fatal(err)
	}
	c := &faultCluster{t: t, net: n, bin: bin, args: args}
	t.Cleanup(func() {
		c.stopAll()
		if err := n.Close(); err != nil {
			t.Errorf("removing the network: %v", err)
		}
	})
	c.dir, err = os.MkdirTemp("", "spillway-faults-"+strings.ReplaceAll(t.Name(), "/", "-")+"-")
	if err != nil {
		t.Fatal(err)
	}
	// The logs stay when the scenario fails: the report names them.
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(c.dir)
		}
	})
	c.origin = startFaultOrigin(t, n.BridgeIP())
	for h := 1; h <= faultNodes; h++ {
		c.nodes = append(c.nodes, &faultNode{h: h, name: "n" + strconv.Itoa(h),
			addr: net.JoinHostPort(n.IP(h), strconv.Itoa(faultClientPort)),
			log:  filepath.Join(c.dir, fmt.Sprintf("n%d.log", h))})
	}
	for _, nd := range c.nodes {
		if err := c.start(nd); err != nil {
			t.Fatal(err)
		}
	}
	c.poll = startStatsPoller(c)
	t.Cleanup(c.poll.stop)
	if d, err := c.waitConverged(30 * time.Second); err != nil {
		t.Fatalf("the cluster did not form: %v (logs in %s)", err, c.dir)
	} else {
		t.Logf("cluster formed in %v", d.Round(time.Millisecond))
	}
	return c
}

// serveArgs are a node's flags: the defaults a user gets, but for the
// addresses, JSON logs, and a shutdown timeout that fits the scenarios.
func (c *faultCluster) serveArgs(nd *faultNode) []string {
	ip := c.net.IP(nd.h)
	var join []string
	for h := 1; h <= faultNodes; h++ {
		join = append(join, net.JoinHostPort(c.net.IP(h), strconv.Itoa(faultGossipPort)))
	}
	args := []string{"serve",
		"--listen", nd.addr,
		"--gossip", net.JoinHostPort(ip, strconv.Itoa(faultGossipPort)),
		"--name", nd.name,
		"--join", strings.Join(join, ","),
		"--origin", c.origin.url,
		"--log-format", "json",
		"--shutdown-timeout", "5s",
	}
	return append(args, c.args...)
}

// start runs nd in its namespace, its output appended to its log.
func (c *faultCluster) start(nd *faultNode) error {
	f, err := os.OpenFile(nd.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close() // the child has its own copy
	cmd := c.net.Command(nd.h, c.bin, c.serveArgs(nd)...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", nd.name, err)
	}
	exited := make(chan struct{})
	nd.mu.Lock()
	nd.cmd, nd.exited, nd.expect = cmd, exited, false
	nd.mu.Unlock()
	go func() {
		err := cmd.Wait()
		nd.mu.Lock()
		nd.exitErr = err
		if !nd.expect {
			nd.crashes = append(nd.crashes, fmt.Sprintf("%s exited by itself at %s: %v", nd.name,
				time.Now().Format("15:04:05.000"), err))
		}
		if nd.cmd == cmd {
			nd.cmd = nil
		}
		nd.mu.Unlock()
		close(exited)
	}()
	// Wait until it accepts clients (bounded: a node that cannot start
	// says why in its log).
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", nd.addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited at start: %v; log %s:\n%s", nd.name, nd.exitErr, nd.log, tail(nd.log, 20))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not accept clients after 10s; log %s", nd.name, nd.log)
		}
	}
}

// signal sends sig to nd and waits up to wait for it to exit; it returns
// how long that took.
func (c *faultCluster) signal(nd *faultNode, sig syscall.Signal, wait time.Duration) (time.Duration, error) {
	nd.mu.Lock()
	cmd, exited := nd.cmd, nd.exited
	nd.expect = true
	nd.mu.Unlock()
	if cmd == nil {
		return 0, nil
	}
	began := time.Now()
	if err := cmd.Process.Signal(sig); err != nil {
		return 0, err
	}
	select {
	case <-exited:
	case <-time.After(wait):
		cmd.Process.Kill()
		<-exited
		return time.Since(began), fmt.Errorf("%s did not exit within %v of %v; killed", nd.name, wait, sig)
	}
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if sig == syscall.SIGTERM && nd.exitErr != nil {
		return time.Since(began), fmt.Errorf("%s on SIGTERM: %v", nd.name, nd.exitErr)
	}
	return time.Since(began), nil
}

func (c *faultCluster) stopAll() {
	var wg sync.WaitGroup
	for _, nd := range c.nodes {
		wg.Go(func() { c.signal(nd, syscall.SIGKILL, 5*time.Second) })
	}
	wg.Wait()
}

// crashes lists the runs that ended without the harness asking.
func (c *faultCluster) crashes() []string {
	var out []string
	for _, nd := range c.nodes {
		nd.mu.Lock()
		out = append(out, nd.crashes...)
		nd.mu.Unlock()
	}
	return out
}

func (nd *faultNode) up() bool {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.cmd != nil
}

// waitConverged waits until every running node counts all running nodes
// in its ring, and returns how long that took.
func (c *faultCluster) waitConverged(limit time.Duration) (time.Duration, error) {
	began := time.Now()
	deadline := began.Add(limit)
	for {
		live, seen := 0, map[string]string{}
		for _, nd := range c.nodes {
			if nd.up() {
				live++
			}
		}
		ok := true
		for _, nd := range c.nodes {
			if !nd.up() {
				continue
			}
			st, err := readNodeStats(nd.addr, time.Second)
			n, _ := strconv.Atoi(st["cluster_nodes"])
			if err != nil || n != live {
				ok = false
				seen[nd.name] = fmt.Sprintf("%s (%v)", st["cluster_nodes"], err)
			}
		}
		if ok {
			return time.Since(began), nil
		}
		if time.Now().After(deadline) {
			return time.Since(began), fmt.Errorf("after %v, ring sizes (want %d): %v", limit, live, seen)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readNodeStats sends `stats` and collects the STAT lines.
func readNodeStats(addr string, timeout time.Duration) (map[string]string, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte("stats\r\n")); err != nil {
		return nil, err
	}
	st := map[string]string{}
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		line := sc.Text()
		if line == "END" {
			return st, nil
		}
		if f := strings.Fields(line); len(f) == 3 && f[0] == "STAT" {
			st[f[1]] = f[2]
		}
	}
	if sc.Err() != nil {
		return st, sc.Err()
	}
	return st, errors.New("stats: no END")
}

// statsPoller reads every running node's stats every statsEvery, and keeps
// the last reading of each node's run (counters of a killed run are
// otherwise lost) and when each node's ring size changed.
type statsPoller struct {
	c    *faultCluster
	done chan struct{}
	wg   sync.WaitGroup

	mu sync.Mutex
	// last is the latest reading per node and boot (pid), so that the
	// runs of a restarted node add up.
	last map[string]map[string]string // guarded by mu
}

const statsEvery = 250 * time.Millisecond

func startStatsPoller(c *faultCluster) *statsPoller {
	p := &statsPoller{c: c, done: make(chan struct{}), last: map[string]map[string]string{}}
	p.wg.Go(func() {
		tick := time.NewTicker(statsEvery)
		defer tick.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-tick.C:
			}
			p.once()
		}
	})
	return p
}

func (p *statsPoller) once() {
	var wg sync.WaitGroup
	for _, nd := range p.c.nodes {
		if !nd.up() {
			continue
		}
		wg.Go(func() {
			st, err := readNodeStats(nd.addr, time.Second)
			if err != nil {
				return
			}
			p.mu.Lock()
			p.last[nd.name+"/"+st["pid"]] = st
			p.mu.Unlock()
		})
	}
	wg.Wait()
}

func (p *statsPoller) stop() {
	select {
	case <-p.done:
	default:
		close(p.done)
	}
	p.wg.Wait()
}

// total adds a counter over every run of every node, as last read.
func (p *statsPoller) total(name string) uint64 {
	p.once()
	p.mu.Lock()
	defer p.mu.Unlock()
	var sum uint64
	for _, st := range p.last {
		n, _ := strconv.ParseUint(st[name], 10, 64)
		sum += n
	}
	return sum
}

// perNode adds a counter over the runs of each node, as last read.
func (p *statsPoller) perNode(name string) map[string]uint64 {
	p.once()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]uint64{}
	for id, st := range p.last {
		node, _, _ := strings.Cut(id, "/")
		n, _ := strconv.ParseUint(st[name], 10, 64)
		out[node] += n
	}
	return out
}

// nodeEvent is a log line the harness reads back.
type nodeEvent struct {
	at     time.Time
	node   string // whose log
	msg    string
	key    string // lost invalidation: the key, or "fence"
	member string // membership: the member
}

// events reads every node's log for lost invalidations, membership
// changes, declared-dead drops and panics.
func (c *faultCluster) events() []nodeEvent {
	var out []nodeEvent
	for _, nd := range c.nodes {
		f, err := os.Open(nd.log)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			var rec struct {
				Time   time.Time `json:"time"`
				Msg    string    `json:"msg"`
				Key    string    `json:"key"`
				Member string    `json:"member"`
			}
			if json.Unmarshal(line, &rec) != nil {
				if strings.HasPrefix(string(line), "panic:") || strings.HasPrefix(string(line), "fatal error:") {
					out = append(out, nodeEvent{node: nd.name, msg: string(line)})
				}
				continue
			}
			out = append(out, nodeEvent{at: rec.Time, node: nd.name, msg: rec.Msg, key: rec.Key, member: rec.Member})
		}
		f.Close()
	}
	return out
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// faultBench runs the bench against every node with Observe recording each
// request, and reports when its measured phase began.
type faultBench struct {
	began chan struct{} // closed at the first measured request
	once  sync.Once
	rep   *bench.Report
	err   error
	done  chan struct{}

	mu  sync.Mutex
	obs []bench.Observation // guarded by mu
}

func startFaultBench(ctx context.Context, servers []string, cfg bench.Config) *faultBench {
	b := &faultBench{began: make(chan struct{}), done: make(chan struct{})}
	cfg.Servers = servers
	cfg.KeyPrefix = benchKeyPrefix
	cfg.ValueSize = bench.Size{Min: benchValueSize, Max: benchValueSize}
	cfg.Observe = func(o bench.Observation) {
		b.once.Do(func() { close(b.began) })
		b.mu.Lock()
		b.obs = append(b.obs, o)
		b.mu.Unlock()
	}
	go func() {
		defer close(b.done)
		defer b.once.Do(func() { close(b.began) }) // a run that failed before measuring
		b.rep, b.err = bench.Run(ctx, cfg)
	}()
	return b
}

func (b *faultBench) observations() []bench.Observation {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]bench.Observation(nil), b.obs...)
}
