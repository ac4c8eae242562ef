package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"spillway/bench"
)

// sample is what one run of one setup measured.
type sample struct {
	ops       int64
	opsPerSec float64
	// opsPerCPU is ops per CPU-second of the servers: for a single node its
	// own rusage stats, as spillway bench reports it; for a cluster or
	// under memcaslap the CPU of every process of the setup, from /proc.
	opsPerCPU float64
	p50, p99  float64 // µs
	// busiest is the busiest node's requests over the mean, counting at
	// each node the requests it answered itself (see nodeRequests), and
	// busiestCmd the same by cmd_get + cmd_set.
	busiest, busiestCmd float64
	// answered is the nodes' answered requests summed, over the client's
	// ops: 1 when the stats add up.
	answered float64
	// CPU-seconds per second of the run: the load generator's, the
	// servers', and the whole machine's (other work on it included).
	genCores, srvCores, busyCores float64
	errors                        int64
	hitRatio                      float64
	// syscalls and switches are the setup's system calls and context
	// switches per request (counters.go); syscalls is -1 when perf
	// could not count them.
	syscalls, switches float64
	cmds               []string // the deployment's and the generator's command lines
}

// load is one workload of spillway bench: 9:1 get:set (or another mix),
// 100-byte values, connections spread over the entry addresses.
type load struct {
	conns, pipeline, keys int
	zipf                  float64
	// mix is the get:set mix (--ratio), 9:1 if empty.
	mix string
	// wholeSetup counts the CPU of all the setup's processes (from /proc);
	// otherwise the servers' own rusage stats.
	wholeSetup bool
}

func (l load) args(entry []string) []string {
	return []string{"bench", "--servers", strings.Join(entry, ","), "--entry", "spread",
		"--conns", strconv.Itoa(l.conns), "--pipeline", strconv.Itoa(l.pipeline),
		"--zipf", strconv.FormatFloat(l.zipf, 'g', -1, 64), "--keys", strconv.Itoa(l.keys),
		"--ratio", l.ratio(), "--value-size", "100"}
}

// withMix is l with the get:set mix (--ratio) mix.
func (l load) withMix(mix string) load {
	l.mix = mix
	return l
}

// ratio is the load's get:set mix as spillway bench takes it.
func (l load) ratio() string {
	if l.mix != "" {
		return l.mix
	}
	return "9:1"
}

// generatorSlack bounds a load generator's run beyond its own duration:
// connecting, prefilling, reading stats.
const generatorSlack = 60 * time.Second

// runBench prefills d through spillway bench, then runs l against it for
// *duration. The prefill is a run of its own, so that the measured run's
// CPU, the generator's and the servers', is the measured phase's.
func runBench(d *deployment, l load, dir string) (sample, error) {
	var s sample
	args := l.args(d.entry)
	pre, err := start("spillway bench (prefill)", *spillwayBin, slices.Concat(args, []string{"--prefill", "--requests", "1"})...)
	if err != nil {
		return s, err
	}
	if err := pre.wait(generatorSlack); err != nil {
		return s, err
	}

	out := filepath.Join(dir, "bench.json")
	args = append(args, "--duration", duration.String(), "--json", out)
	run, err := generate(d, "spillway bench", *spillwayBin, args, *duration)
	s.cmds = run.cmds
	if err != nil {
		return s, err
	}
	var rep bench.Report
	b, err := os.ReadFile(out)
	if err == nil {
		err = json.Unmarshal(b, &rep)
	}
	if err != nil {
		return s, fmt.Errorf("spillway bench's report: %w", err)
	}

	s.ops, s.opsPerSec, s.errors, s.hitRatio = rep.Ops, rep.OpsPerSec, rep.ErrorCount, rep.HitRatio
	s.p50 = float64(rep.Latency.P50.Nanoseconds()) / 1e3
	s.p99 = float64(rep.Latency.P99.Nanoseconds()) / 1e3
	s.genCores, s.busyCores = run.cores()
	cpu, wall := run.cpu(), run.wall
	if !l.wholeSetup {
		if rep.Load.ServerCPU <= 0 {
			return s, fmt.Errorf("spillway bench reported no server CPU (rusage stats): %+v", rep.Servers)
		}
		cpu, wall = rep.Load.ServerCPU, rep.Elapsed
	}
	s.opsPerCPU = float64(rep.Ops) / cpu
	s.syscalls, s.switches = run.perRequest(rep.Ops)
	s.srvCores = cpu / wall
	s.busiest, s.busiestCmd, s.answered, err = nodeLoads(d, run.before, run.after, rep.Ops)
	return s, err
}

// generated is a load generator's run against a deployment.
type generated struct {
	before, after observation // of the deployment
	gen           *proc
	wall          float64  // seconds
	cmds          []string // the deployment's command lines, then the generator's
	// syscalls is the deployment's system calls during the run, or -1
	// if they could not be counted (syscallsUncounted says why).
	syscalls int64
}

// generate runs a load generator, bin with args, that loads dep for dur;
// it is killed after dur + generatorSlack. dep is observed before and after.
func generate(dep *deployment, name, bin string, args []string, dur time.Duration) (generated, error) {
	r := generated{cmds: slices.Concat(dep.cmds, []string{bin + " " + strings.Join(args, " ")})}
	var err error
	if r.before, err = observe(dep); err != nil {
		return r, err
	}
	count := countSyscalls(dep)
	t0 := time.Now()
	if r.gen, err = start(name, bin, args...); err != nil {
		count.stop()
		return r, err
	}
	err = r.gen.wait(dur + generatorSlack)
	r.wall = time.Since(t0).Seconds()
	var uncounted error
	if r.syscalls, uncounted = count.stop(); uncounted != nil {
		r.syscalls = -1
		syscallsUncounted.CompareAndSwap(nil, &uncounted)
	}
	if err != nil {
		return r, err
	}
	r.after, err = observe(dep)
	return r, err
}

// syscallsUncounted is why the first run whose system calls were not
// counted was not, for the report.
var syscallsUncounted atomic.Pointer[error]

// perRequest is the deployment's system calls (-1 if not counted) and
// context switches over the run, per request of ops.
func (r generated) perRequest(ops int64) (syscalls, switches float64) {
	n := float64(max(ops, 1))
	syscalls = -1
	if r.syscalls >= 0 {
		syscalls = float64(r.syscalls) / n
	}
	return syscalls, float64(r.after.switches-r.before.switches) / n
}

// cpu is the CPU-seconds the deployment's processes used during the run.
func (r generated) cpu() float64 { return (r.after.cpu - r.before.cpu).Seconds() }

// cores is the generator's CPU and the machine's busy time over the run's
// wall time.
func (r generated) cores() (gen, busy float64) {
	c, _ := r.gen.cpu()
	return c.Seconds() / r.wall, (r.after.busy - r.before.busy).Seconds() / r.wall
}

// observation is a deployment at one moment: its processes' CPU summed,
// each node's stats, and the machine's busy time.
type observation struct {
	cpu, busy time.Duration
	switches  int64 // context switches of the processes' threads
	stats     []map[string]string
}

func observe(d *deployment) (observation, error) {
	var o observation
	if err := d.alive(); err != nil {
		return o, err
	}
	var err error
	if o.busy, err = machineBusy(); err != nil {
		return o, err
	}
	for _, p := range d.procs {
		c, err := p.cpu()
		if err != nil {
			return o, fmt.Errorf("%s: %w", p.name, err)
		}
		o.cpu += c
		n, err := p.switches()
		if err != nil {
			return o, err
		}
		o.switches += n
	}
	for _, n := range d.nodes {
		s, err := stats(n)
		if err != nil {
			return o, fmt.Errorf("stats of %s: %w", n, err)
		}
		o.stats = append(o.stats, s)
	}
	return o, nil
}

// nodeLoads returns the busiest node's requests over the mean, by what the
// nodes answered themselves and by cmd_get + cmd_set, and the answered
// requests summed over the client's ops.
func nodeLoads(d *deployment, before, after observation, ops int64) (busiest, busiestCmd, answered float64, err error) {
	var ans, cmd []float64
	var sum float64
	for i := range d.nodes {
		a, c, err := nodeRequests(before.stats[i], after.stats[i], d.spillway)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("%s: %w", d.nodes[i], err)
		}
		ans, cmd = append(ans, a), append(cmd, c)
		sum += a
	}
	return maxOverMean(ans), maxOverMean(cmd), sum / float64(max(ops, 1)), nil
}

// nodeRequests is the requests a node answered between two stats, and its
// cmd_get + cmd_set. They differ on a Spillway node: a read it forwards
// counts in cmd_get at the entry node and again at the node that serves
// it (a peer read is a get), and a forwarded write in cmd_set at both.
// What it answered is then served (reads it served, whoever the entry
// node) + cmd_set − forwarded_writes (writes it stored, its clients' and
// other nodes'). On memcached both are cmd_get + cmd_set.
func nodeRequests(before, after map[string]string, spillway bool) (answered, cmd float64, err error) {
	delta := func(name string) float64 {
		b, err1 := statUint(before, name)
		a, err2 := statUint(after, name)
		err = errors.Join(err, err1, err2)
		return float64(a) - float64(b)
	}
	cmd = delta("cmd_get") + delta("cmd_set")
	answered = cmd
	if spillway {
		answered = delta("served") + delta("cmd_set") - delta("forwarded_writes")
	}
	return answered, cmd, err
}

// maxOverMean is the largest of xs over their mean: 1 when even.
func maxOverMean(xs []float64) float64 {
	var sum, top float64
	for _, x := range xs {
		sum += x
		top = max(top, x)
	}
	if sum <= 0 {
		return 0
	}
	return top / (sum / float64(len(xs)))
}

// memcaslap's window is the keys each of its connections works on.
const memcaslapWindow = "2k"

// runMemcaslap runs libmemcached's memcaslap against d for *duration:
// threads threads, conns connections in all (each thread's to one entry
// address, thread i to address i mod n), uniform keys, 100-byte values,
// its default 9:1 get:set, one request in flight per connection.
func runMemcaslap(d *deployment, threads, conns int) (sample, error) {
	var s sample
	secs := max(int(duration.Seconds()+0.5), 1)
	args := []string{"-s", strings.Join(d.entry, ","), "-T", strconv.Itoa(threads), "-c", strconv.Itoa(conns),
		"-w", memcaslapWindow, "-X", "100", "-t", strconv.Itoa(secs) + "s"}
	run, err := generate(d, "memcaslap", *memcaslapBin, args, time.Duration(secs)*time.Second)
	s.cmds = run.cmds
	if err != nil {
		return s, err
	}
	ops, secsRun, err := parseMemcaslap(run.gen.out.String())
	if err != nil {
		return s, err
	}
	s.ops, s.opsPerSec, s.opsPerCPU = ops, float64(ops)/secsRun, float64(ops)/run.cpu()
	s.syscalls, s.switches = run.perRequest(ops)
	s.genCores, s.busyCores = run.cores()
	s.srvCores = run.cpu() / run.wall
	s.busiest, s.busiestCmd, s.answered, err = nodeLoads(d, run.before, run.after, ops)
	return s, err
}

// memcaslapResult is memcaslap's last line:
//
//	Run time: 6.0s Ops: 1203456 TPS: 200576 Net_rate: 47.4M/s
var memcaslapResult = regexp.MustCompile(`(?m)^Run time: ([0-9.]+)s Ops: ([0-9]+) TPS: ([0-9]+)`)

// parseMemcaslap returns the ops and run time of memcaslap's output.
func parseMemcaslap(out string) (ops int64, secs float64, err error) {
	m := memcaslapResult.FindStringSubmatch(out)
	if m == nil {
		return 0, 0, fmt.Errorf("memcaslap: no result line in its output:\n%s", out)
	}
	secs, err1 := strconv.ParseFloat(m[1], 64)
	ops, err2 := strconv.ParseInt(m[2], 10, 64)
	if err := errors.Join(err1, err2); err != nil || secs <= 0 {
		return 0, 0, fmt.Errorf("memcaslap: bad result line %q (%v)", m[0], err)
	}
	return ops, secs, nil
}
