// Command compare runs Spillway side by side with memcached and with
// twemproxy, under the same load, and prints the table of issue 12 ("The
// hop and the node") with ratios (`make bench-compare`).
//
// Every cell is the median of -runs runs of -duration. Runs alternate
// between the two setups of a row (reference, Spillway, reference,
// Spillway...), each run on fresh processes on free loopback ports:
//
//   - memcached -t N -m 1024 -U 0, against spillway serve -m 1024, N
//     being the cores this process may use (GOMAXPROCS), Spillway's
//     default;
//   - memcached against bench/floor, a map behind get and set in Go and
//     nothing else, served with a goroutine per connection (as Spillway
//     serves) and on N epoll loops (as memcached does): how much of a node's
//     cost per request is Go's, which no work of Spillway's can remove;
//   - twemproxy (nutcracker, ketama) in front of three memcached,
//     against three spillway serve -m 1024 joined into one cluster, every
//     memcached and node with its share of the cores (-t, --threads:
//     max(1, N/3)); nutcracker is single-threaded (ready
//     once every node's cluster_nodes stat is 3, and the owner grace of
//     the join, set to 5 s, is over: the runs measure the cluster as it
//     runs, not as it forms).
//
// The load is spillway bench, the same for every server: 9:1 get:set
// (and, in rows of the three-node setups, gets only, 19:1 and 4:1: a
// write costs the cluster its copies, so the ratio turns on the mix),
// 100-byte values, every key set once first (a run of its own, so that the
// measured run's CPU is the measured phase's), every value read back
// checked. On a single node the figure is ops per server CPU-second, the
// server's rusage stats before and after (as spillway bench reports it):
// the load generator shares the machine's cores, so ops/s alone would
// mostly measure it. For the three-node setups it is ops per CPU-second of
// the whole setup, every process's CPU from /proc (nutcracker has no
// rusage stat), nutcracker's included.
//
// Then libmemcached's memcaslap, a generator we did not write, cross-checks
// the same pairs, and memcached against the two floors, on its own
// workload (uniform keys, one request in flight per connection; it has no
// Zipf and no pipelining).
//
// A setup whose binary is missing is skipped, and says so in its rows.
// Every process started is killed when the command ends, on an error, or
// on SIGINT, SIGTERM or SIGHUP (and, by Pdeathsig, if it is killed); every
// run is bounded in time.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

var (
	spillwayBin   = flag.String("spillway", "bin/spillway", "Spillway binary")
	floorBin      = flag.String("floor", "bin/floor", "bench/floor's binary, the Go floor")
	memcachedBin  = flag.String("memcached", "/usr/bin/memcached", "memcached binary")
	nutcrackerBin = flag.String("nutcracker", "/usr/sbin/nutcracker", "twemproxy's binary")
	memcaslapBin  = flag.String("memcaslap", "/usr/bin/memcaslap", "libmemcached's load generator")
	runs          = flag.Int("runs", 3, "runs of each setup in each scenario; each cell is their median")
	duration      = flag.Duration("duration", 6*time.Second, "length of each measured run")
	only          = flag.String("only", "", "comma-separated scenarios to run (default all): "+strings.Join(scenarioNames(), ","))
)

func main() {
	flag.Parse()
	// dir holds the generator's reports and nutcracker's config and log.
	dir, err := os.MkdirTemp("", "bench-compare-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-compare:", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "bench-compare: %v: killing every process it started\n", s)
		killAll()
		os.RemoveAll(dir)
		os.Exit(1)
	}()
	err = run(os.Stdout, dir)
	killAll()
	os.RemoveAll(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-compare:", err)
		os.Exit(1)
	}
}

// A scenario is a pair of setups, a reference and Spillway, under one load.
type scenario struct {
	name    string // for -only
	ref, sw *setup
	missing string // why the scenario's load generator cannot run ("" if it can)
	measure func(d *deployment, dir string) (sample, error)
}

// The loads of spillway bench.
var (
	singleLoad  = load{conns: 50, pipeline: 1, keys: 100_000, zipf: 0.99}
	p16Load     = load{conns: 50, pipeline: 16, keys: 100_000, zipf: 0.99}
	fewLoad     = load{conns: 4, pipeline: 1, keys: 100_000, zipf: 0.99}
	clusterLoad = load{conns: 50, pipeline: 1, keys: 10_000, zipf: 1.2, wholeSetup: true}
	// clusterReads is clusterLoad with gets only: what the cluster costs
	// with no writes to invalidate its copies; clusterFewSets and
	// clusterManySets, with half and twice clusterLoad's share of sets.
	// The report calls their rows "same" as clusterLoad's: they are
	// derived from it, so that they stay so.
	clusterReads    = clusterLoad.withMix("1:0")
	clusterFewSets  = clusterLoad.withMix("19:1")
	clusterManySets = clusterLoad.withMix("4:1")
)

// memcaslap's threads each take one server: 2 for one node (the two
// cores), 3 for three; as many connections as spillway bench's rows (51
// divides among 3 threads).
const (
	memcaslapThreads, memcaslapConns               = 2, 50
	memcaslapClusterThreads, memcaslapClusterConns = clusterSize, 51
)

// scenarios are the rows, in the order they run: a single node against
// memcached, the Go floor against memcached, the three-node setups against
// each other, then memcaslap's, the floors' last.
func scenarios(mc, sp, tw, cl, fg, fe *setup) []scenario {
	withBench := func(l load) func(*deployment, string) (sample, error) {
		return func(d *deployment, dir string) (sample, error) { return runBench(d, l, dir) }
	}
	withMemcaslap := func(threads, conns int) func(*deployment, string) (sample, error) {
		return func(d *deployment, _ string) (sample, error) { return runMemcaslap(d, threads, conns) }
	}
	noMemcaslap := missing(*memcaslapBin, "libmemcached-tools")
	return []scenario{
		{"pipeline1", mc, sp, "", withBench(singleLoad)},
		{"floor-goroutine", mc, fg, "", withBench(singleLoad)},
		{"floor-epoll", mc, fe, "", withBench(singleLoad)},
		{"pipeline16", mc, sp, "", withBench(p16Load)},
		{"latency", mc, sp, "", withBench(fewLoad)},
		{"cluster", tw, cl, "", withBench(clusterLoad)},
		{"cluster-reads", tw, cl, "", withBench(clusterReads)},
		{"cluster-19to1", tw, cl, "", withBench(clusterFewSets)},
		{"cluster-4to1", tw, cl, "", withBench(clusterManySets)},
		{"memcaslap", mc, sp, noMemcaslap, withMemcaslap(memcaslapThreads, memcaslapConns)},
		{"memcaslap-cluster", tw, cl, noMemcaslap, withMemcaslap(memcaslapClusterThreads, memcaslapClusterConns)},
		// The floors under memcaslap tell the serving model's cost
		// from Spillway's own work under a generator we did not write.
		{"memcaslap-floor-goroutine", mc, fg, noMemcaslap, withMemcaslap(memcaslapThreads, memcaslapConns)},
		{"memcaslap-floor-epoll", mc, fe, noMemcaslap, withMemcaslap(memcaslapThreads, memcaslapConns)},
	}
}

func scenarioNames() []string {
	var names []string
	for _, sc := range scenarios(nil, nil, nil, nil, nil, nil) {
		names = append(names, sc.name)
	}
	return names
}

// results holds every run's sample: by scenario name, reference [0] and
// Spillway [1].
type results map[string]*[2][]sample

func run(out io.Writer, dir string) error {
	if *runs < 1 || *duration <= 0 {
		return fmt.Errorf("want -runs 1 or more and a positive -duration")
	}
	var picked []string
	if *only != "" {
		picked = strings.Split(*only, ",")
		for _, name := range picked {
			if !slices.Contains(scenarioNames(), name) {
				return fmt.Errorf("-only: no scenario %q (there are %s)", name, strings.Join(scenarioNames(), ", "))
			}
		}
	}
	begin := time.Now()
	all := scenarios(memcachedSetup(), spillwaySetup(), twemproxySetup(), clusterSetup(), floorSetup("goroutine"), floorSetup("epoll"))
	warned := make(map[string]bool)
	for _, sc := range all {
		for _, why := range []string{sc.ref.missing, sc.sw.missing, sc.missing} {
			if why != "" && !warned[why] {
				warned[why] = true
				fmt.Fprintf(os.Stderr, "\n*** WARNING: %s; the rows that need it are SKIPPED\n\n", why)
			}
		}
	}
	res := make(results)
	var done []scenario
	for _, sc := range all {
		if picked != nil && !slices.Contains(picked, sc.name) {
			continue
		}
		res[sc.name] = new([2][]sample)
		done = append(done, sc)
		for r := range *runs {
			for side, st := range []*setup{sc.ref, sc.sw} {
				if st.missing != "" || sc.missing != "" {
					continue
				}
				s, err := once(sc, st, dir)
				if err != nil {
					return fmt.Errorf("%s, %s, run %d: %w", sc.name, st.name, r+1, err)
				}
				res[sc.name][side] = append(res[sc.name][side], s)
				fmt.Fprintf(os.Stderr, "%s run %d/%d, %s: %s ops/s, %s ops per CPU-second, busiest/mean %.2f, cores: generator %.2f, servers %.2f, machine %.2f",
					sc.name, r+1, *runs, st.name, commas(s.opsPerSec), commas(s.opsPerCPU), s.busiest, s.genCores, s.srvCores, s.busyCores)
				if s.p50 > 0 {
					fmt.Fprintf(os.Stderr, "; p50/p99 %.0f/%.0f µs", s.p50, s.p99)
				}
				fmt.Fprintln(os.Stderr)
			}
		}
	}
	printReport(out, res, done, time.Since(begin))
	return nil
}

// once runs sc on a fresh deployment of st.
func once(sc scenario, st *setup, dir string) (sample, error) {
	d, err := st.start(dir)
	if err != nil {
		return sample{}, err
	}
	defer d.stop()
	s, err := sc.measure(d, dir)
	if err != nil {
		return s, err
	}
	for i, c := range s.cmds {
		s.cmds[i] = strings.ReplaceAll(c, dir, "$DIR")
	}
	return s, nil
}

// version is the first line bin prints when asked with args, or "".
func version(bin string, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, _ := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line)
}

// cores is the machine's, shared by the load generator and the servers.
var cores = runtime.NumCPU()
