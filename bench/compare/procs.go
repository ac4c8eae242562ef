package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"spillway/bench"
)

// proc is a child process: a server, a proxy or a load generator.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *tail         // its stdout and stderr, the end of them
	done chan struct{} // closed once it has exited and been reaped
	err  error         // cmd.Wait's, once done is closed
}

// live holds every child not yet reaped, so that killAll can end them on
// an error or a signal.
var live struct {
	mu     sync.Mutex
	procs  map[*proc]bool
	closed bool // killAll was called: start no more
}

// start starts bin with args. The child is killed if this process dies
// (Pdeathsig), so not even a kill -9 of bench-compare leaves servers
// behind.
func start(name, bin string, args ...string) (*proc, error) {
	p := &proc{name: name, cmd: exec.Command(bin, args...), out: new(tail), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	live.mu.Lock()
	defer live.mu.Unlock()
	if live.closed {
		return nil, fmt.Errorf("%s: not started: stopping", name)
	}
	if live.procs == nil {
		live.procs = make(map[*proc]bool)
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	live.procs[p] = true
	go func() {
		p.err = p.cmd.Wait()
		live.mu.Lock()
		delete(live.procs, p)
		live.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// stop kills p and waits until it is reaped.
func (p *proc) stop() {
	p.cmd.Process.Kill()
	<-p.done
}

// wait waits for p to exit, for at most d; then it kills p. It returns an
// error, with the end of p's output, unless p exited with status 0.
func (p *proc) wait(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("%s: %w; its output ends:\n%s", p.name, p.err, p.out)
		}
		return nil
	case <-t.C:
		p.stop()
		return fmt.Errorf("%s: still running after %s, killed; its output ends:\n%s", p.name, d, p.out)
	}
}

// exited returns an error if p is no longer running.
func (p *proc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (%v); its output ends:\n%s", p.name, p.err, p.out)
	default:
		return nil
	}
}

// cpu is the CPU time p has used so far, from /proc; once p has exited,
// from its rusage.
func (p *proc) cpu() (time.Duration, error) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime(), nil
	default:
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	return parseProcStat(b)
}

// killAll kills every live child and waits for each to be reaped. No
// child starts after it.
func killAll() {
	live.mu.Lock()
	live.closed = true
	ps := make([]*proc, 0, len(live.procs))
	for p := range live.procs {
		ps = append(ps, p)
	}
	live.mu.Unlock()
	for _, p := range ps {
		p.stop()
	}
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go runs on.
const clockTicks = 100

// parseProcStat returns utime + stime from the contents of
// /proc/<pid>/stat:
//
//	<pid> (<comm>) <state> <ppid> ... <utime> <stime> ...   (fields 14 and 15)
//
// comm may itself hold spaces and parentheses, so the fields are counted
// from the last ')'.
func parseProcStat(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat: no ')' in %q", b)
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3, state
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after comm, want 13 or more", len(f))
	}
	var ticks uint64
	for _, s := range f[11:13] {
		n, err := strconv.ParseUint(string(s), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// machineBusy is the CPU time all cores have spent not idle since boot,
// from /proc/stat.
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseMachineStat(b)
}

// parseMachineStat returns the busy time of the first line of /proc/stat,
// all cores summed:
//
//	cpu  <user> <nice> <system> <idle> <iowait> <irq> <softirq> <steal> <guest> <guest_nice>
//
// Busy is everything but idle and iowait; guest time is already in user.
func parseMachineStat(b []byte) (time.Duration, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 9 || string(f[0]) != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var ticks uint64
	for i, s := range f[1:9] {
		n, err := strconv.ParseUint(string(s), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		if i != 3 && i != 4 { // idle, iowait
			ticks += n
		}
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// tail keeps the last tailSize bytes written to it, or a little more.
// It is safe for concurrent use.
type tail struct {
	mu sync.Mutex
	b  []byte
}

const tailSize = 4 << 10

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 2*tailSize {
		t.b = append(t.b[:0], t.b[len(t.b)-tailSize:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// freePorts returns n distinct free TCP ports on 127.0.0.1, holding each
// until all are found. Another process may still take one before our
// child binds it; the child then fails to start, and says so.
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// Bounds on waiting for servers.
const (
	readyTimeout = 20 * time.Second // a server answers stats, or a proxy accepts
	joinTimeout  = 60 * time.Second // every node of a cluster sees every other
	pollEvery    = 20 * time.Millisecond
	statsTimeout = 5 * time.Second
)

// poll calls ready every pollEvery until it returns true, p exits, or
// timeout passes.
func poll(p *proc, timeout time.Duration, what string, ready func() bool) error {
	for deadline := time.Now().Add(timeout); !ready(); time.Sleep(pollEvery) {
		if err := p.exited(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not %s after %s; its output ends:\n%s", p.name, what, timeout, p.out)
		}
	}
	return nil
}

// stats reads a server's stats.
func stats(addr string) (map[string]string, error) {
	return bench.ReadStats(context.Background(), addr, statsTimeout)
}

// answersStats waits until the server p at addr answers `stats`.
func answersStats(p *proc, addr string) error {
	return poll(p, readyTimeout, "answering stats on "+addr, func() bool {
		_, err := stats(addr)
		return err == nil
	})
}

// accepts waits until p accepts connections on addr.
func accepts(p *proc, addr string) error {
	return poll(p, readyTimeout, "accepting connections on "+addr, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// statUint is stats field name as a number.
func statUint(s map[string]string, name string) (uint64, error) {
	v, ok := s[name]
	if !ok {
		return 0, fmt.Errorf("no stat %q", name)
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat %s: %w", name, err)
	}
	return n, nil
}
