package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Where a request's CPU goes, beside how much it is: the system calls and
// the context switches of a setup's processes per request. The first says
// whether a setup makes more trips into the kernel than another; the second
// how often its threads sleep and are woken, which costs CPU on both sides
// of a loopback socket without showing as work of either.

// perfBin is perf (Debian's linux-perf), which counts system calls; without
// it that column is "—".
var perfBin = lookPerf()

func lookPerf() string {
	p, err := exec.LookPath("perf")
	if err != nil {
		return ""
	}
	return p
}

// syscallCount counts the system calls of a deployment's processes from
// its start until stop, with perf stat on their PIDs.
type syscallCount struct {
	p   *proc
	err error // why there is no count
}

// countSyscalls starts counting the system calls of d's processes.
func countSyscalls(d *deployment) *syscallCount {
	if perfBin == "" {
		return &syscallCount{err: errors.New("perf is not installed")}
	}
	pids := make([]string, len(d.procs))
	for i, p := range d.procs {
		pids[i] = strconv.Itoa(p.cmd.Process.Pid)
	}
	p, err := start("perf stat", perfBin, "stat", "-x", ",", "-e", "raw_syscalls:sys_enter", "-p", strings.Join(pids, ","))
	if err != nil {
		return &syscallCount{err: err}
	}
	return &syscallCount{p: p}
}

// stop ends the count and returns it.
func (c *syscallCount) stop() (int64, error) {
	if c.p == nil {
		return 0, c.err
	}
	// perf stat prints its counts when interrupted.
	c.p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-c.p.done:
	case <-time.After(5 * time.Second):
		c.p.stop()
		return 0, errors.New("perf stat did not stop when interrupted")
	}
	return parsePerfCount(c.p.out.String(), "raw_syscalls:sys_enter")
}

// parsePerfCount returns the count of event in perf stat -x , output:
//
//	736559,,raw_syscalls:sys_enter,4001234567,100.00,,
func parsePerfCount(out, event string) (int64, error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ",")
		if len(f) < 3 || f[2] != event {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("perf stat counted no %s (%q): is tracing allowed here (perf_event_paranoid)?", event, f[0])
		}
		return n, nil
	}
	return 0, fmt.Errorf("perf stat: no %s line in its output:\n%s", event, out)
}

// switches is the context switches of p's threads so far, voluntary and
// not, from /proc: a thread that exited is no longer counted.
func (p *proc) switches() (int64, error) {
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", p.cmd.Process.Pid))
	if err != nil || len(files) == 0 {
		return 0, fmt.Errorf("%s: no threads in /proc (%v)", p.name, err)
	}
	var n int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread exited meanwhile
		}
		c, err := parseSwitches(b)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", f, err)
		}
		n += c
	}
	return n, nil
}

// parseSwitches sums the voluntary_ctxt_switches and
// nonvoluntary_ctxt_switches lines of a /proc status file.
func parseSwitches(status []byte) (int64, error) {
	var n int64
	found := 0
	for line := range bytes.Lines(status) {
		name, val, ok := bytes.Cut(line, []byte(":"))
		if !ok || !bytes.HasSuffix(name, []byte("ctxt_switches")) {
			continue
		}
		c, err := strconv.ParseInt(string(bytes.TrimSpace(val)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bad %s line: %w", name, err)
		}
		n += c
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("want voluntary and nonvoluntary context switches, found %d lines", found)
	}
	return n, nil
}
