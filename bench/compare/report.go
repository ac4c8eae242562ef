package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// median is the middle of xs (the mean of the middle two for an even
// count); 0 for none. xs is left as it was.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// medianOf is the median of f over samples.
func medianOf(samples []sample, f func(sample) float64) float64 {
	xs := make([]float64, len(samples))
	for i, s := range samples {
		xs[i] = f(s)
	}
	return median(xs)
}

// writeTable writes a markdown table: a header row, the separator, then
// rows, each cell's "|" escaped.
func writeTable(w io.Writer, header []string, rows [][]string) {
	line := func(cells []string) {
		esc := make([]string, len(cells))
		for i, c := range cells {
			esc[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(esc, " | "))
	}
	line(header)
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---"
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(sep, "|"))
	for _, r := range rows {
		line(r)
	}
}

// commas formats x rounded to an integer, with thousands separated:
// 80783.4 → "80,783".
func commas(x float64) string {
	n := int64(math.Round(x))
	switch {
	case n < 0:
		return "-" + commas(float64(-n))
	case n < 1000:
		return strconv.FormatInt(n, 10)
	}
	return fmt.Sprintf("%s,%03d", commas(float64(n/1000)), n%1000)
}

// ratio formats b/a as "0.74×", or "—" when either is missing.
func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", b/a)
}

// printReport writes the tables, the notes and the commands of the
// scenarios done.
func printReport(w io.Writer, res results, done []scenario, took time.Duration) {
	mcVersion := strings.TrimSpace(version(*memcachedBin, "-V"))
	fmt.Fprintf(w, "## Spillway against memcached and twemproxy (`make bench-compare`)\n\n")
	fmt.Fprintf(w, "%s; %s; %s; %s. %d cores, shared by the load generator and the servers; "+
		"medians of %d alternating runs × %s, fresh processes on loopback each run. Took %s.\n\n",
		version(*spillwayBin, "version"), mcVersion, strings.TrimPrefix(version(*nutcrackerBin, "-V"), "This is "),
		strings.TrimSpace(version(*memcaslapBin, "-V")), cores, *runs, duration, took.Round(time.Second))

	cell := func(sc string, side int) []sample {
		if r := res[sc]; r != nil {
			return r[side]
		}
		return nil
	}
	byName := make(map[string]scenario)
	for _, sc := range done {
		byName[sc.name] = sc
	}
	// row is one figure of scenario name: the reference's cell (prefixed
	// by its name where given), Spillway's, and their ratio.
	var rows [][]string
	row := func(label, name, refName string, f func(sample) float64, format func(float64) string, withRatio bool) {
		sc, ok := byName[name]
		if !ok {
			return
		}
		ref, sw := cell(name, 0), cell(name, 1)
		r := []string{label, skipped(sc, sc.ref), skipped(sc, sc.sw), "—"}
		a, b := medianOf(ref, f), medianOf(sw, f)
		if len(ref) > 0 {
			r[1] = format(a)
			if refName != "" {
				r[1] = refName + ": " + r[1]
			}
		}
		if len(sw) > 0 {
			r[2] = format(b)
		}
		if len(ref) > 0 && len(sw) > 0 && withRatio {
			r[3] = ratio(a, b)
		}
		rows = append(rows, r)
	}
	opsPerCPU := func(s sample) float64 { return s.opsPerCPU }
	opsPerSec := func(s sample) float64 { return s.opsPerSec }
	busiest := func(s sample) float64 { return s.busiest }
	num := func(x float64) string { return commas(x) }
	twoPlaces := func(x float64) string { return fmt.Sprintf("%.2f", x) }
	mc := fmt.Sprintf("%s `-t %d`", mcVersion, singleThreads())

	row(fmt.Sprintf("1 node, %d conns, pipeline %d, Zipf %g, 9:1, 100 B — ops per server CPU-second",
		singleLoad.conns, singleLoad.pipeline, singleLoad.zipf), "pipeline1", mc, opsPerCPU, num, true)
	row(fmt.Sprintf("same, pipeline %d", p16Load.pipeline), "pipeline16", "", opsPerCPU, num, true)
	if sc, ok := byName["latency"]; ok {
		ref, sw := cell("latency", 0), cell("latency", 1)
		r := []string{fmt.Sprintf("same, %d conns — p50 / p99", fewLoad.conns), skipped(sc, sc.ref), skipped(sc, sc.sw), "—"}
		p50 := func(s sample) float64 { return s.p50 }
		p99 := func(s sample) float64 { return s.p99 }
		if len(ref) > 0 {
			r[1] = fmt.Sprintf("%.0f / %.0f µs", medianOf(ref, p50), medianOf(ref, p99))
		}
		if len(sw) > 0 {
			r[2] = fmt.Sprintf("%.0f / %.0f µs", medianOf(sw, p50), medianOf(sw, p99))
		}
		if len(ref) > 0 && len(sw) > 0 {
			r[3] = ratio(medianOf(ref, p50), medianOf(sw, p50)) + " / " + ratio(medianOf(ref, p99), medianOf(sw, p99))
		}
		rows = append(rows, r)
	}
	row(fmt.Sprintf("%d nodes, spread entry, pipeline %d, Zipf %g, %dk keys — ops per CPU-second of the whole setup",
		clusterSize, clusterLoad.pipeline, clusterLoad.zipf, clusterLoad.keys/1000), "cluster", "twemproxy + 3 memcached", opsPerCPU, num, true)
	row("same — busiest node / mean", "cluster", "twemproxy", busiest, twoPlaces, false)
	row("same, gets only — ops per CPU-second of the whole setup", "cluster-reads", "twemproxy + 3 memcached", opsPerCPU, num, true)
	row("same, gets only — busiest node / mean", "cluster-reads", "twemproxy", busiest, twoPlaces, false)
	for _, m := range []struct {
		name string
		l    load
	}{{"cluster-19to1", clusterFewSets}, {"cluster-4to1", clusterManySets}} {
		row("same, "+m.l.ratio()+" — ops per CPU-second of the whole setup", m.name, "twemproxy + 3 memcached", opsPerCPU, num, true)
		row("same, "+m.l.ratio()+" — busiest node / mean", m.name, "twemproxy", busiest, twoPlaces, false)
	}
	if len(rows) > 0 {
		fmt.Fprintf(w, "### Load: spillway bench (closed loop, 9:1 get:set unless said, 100-byte values, prefilled)\n\n")
		writeTable(w, []string{"scenario", "reference", "Spillway", "ratio"}, rows)
		fmt.Fprintln(w)
	}

	rows = nil
	row("goroutine per connection (Spillway's way) — ops per server CPU-second", "floor-goroutine", mc, opsPerCPU, num, true)
	row("epoll loops (memcached's way) — ops per server CPU-second", "floor-epoll", mc, opsPerCPU, num, true)
	row(fmt.Sprintf("goroutine per connection, under memcaslap (%d conns) — ops per server CPU-second", memcaslapConns), "memcaslap-floor-goroutine", mc, opsPerCPU, num, true)
	row(fmt.Sprintf("epoll loops, under memcaslap (%d conns) — ops per server CPU-second", memcaslapConns), "memcaslap-floor-epoll", mc, opsPerCPU, num, true)
	if len(rows) > 0 {
		fmt.Fprintf(w, "### The Go floor: bench/floor, a map behind get and set and nothing else, under the first row's load, then memcaslap's\n\n")
		writeTable(w, []string{"how it serves", "reference", "Go floor", "ratio"}, rows)
		fmt.Fprintln(w)
	}

	rows = nil
	row(fmt.Sprintf("1 node, %d conns — ops/s", memcaslapConns), "memcaslap", "memcached", opsPerSec, num, true)
	row("same — ops per server CPU-second", "memcaslap", "", opsPerCPU, num, true)
	row(fmt.Sprintf("%d nodes, %d conns — ops/s", clusterSize, memcaslapClusterConns), "memcaslap-cluster", "twemproxy + 3 memcached", opsPerSec, num, true)
	row("same — ops per CPU-second of the whole setup", "memcaslap-cluster", "", opsPerCPU, num, true)
	if len(rows) > 0 {
		fmt.Fprintf(w, "### Cross-check: libmemcached's memcaslap (uniform keys, %s keys per connection, 9:1, 100 B, one request in flight per connection)\n\n", memcaslapWindow)
		writeTable(w, []string{"scenario", "reference", "Spillway", "ratio"}, rows)
		fmt.Fprintln(w)
	}

	printDetails(w, res, done)
}

// skipped is a cell's text when st did not run in sc.
func skipped(sc scenario, st *setup) string {
	why := cmp.Or(st.missing, sc.missing)
	if why == "" {
		return "no run"
	}
	return "SKIPPED (" + why + ")"
}

// printDetails writes every cell's medians and runs, the notes that go
// with them, and the commands of each cell's last run.
func printDetails(w io.Writer, res results, done []scenario) {
	fmt.Fprintf(w, "### Every cell\n\n")
	var rows [][]string
	var saturated []string
	cells := 0
	var maxOther float64 // the most CPU other work took, median of a cell
	for _, sc := range done {
		for side, st := range []*setup{sc.ref, sc.sw} {
			ss := res[sc.name][side]
			if len(ss) == 0 {
				continue
			}
			cells++
			var each []string
			for _, s := range ss {
				if sc.name == "latency" {
					each = append(each, fmt.Sprintf("%.0f/%.0f µs", s.p50, s.p99))
				} else {
					each = append(each, commas(s.opsPerCPU))
				}
			}
			gen, srv := medianOf(ss, func(s sample) float64 { return s.genCores }), medianOf(ss, func(s sample) float64 { return s.srvCores })
			busy := medianOf(ss, func(s sample) float64 { return s.busyCores })
			other := max(busy-gen-srv, 0)
			maxOther = max(maxOther, other)
			note := ""
			if busy >= 0.9*float64(cores) {
				note = "saturated"
				saturated = append(saturated, sc.name+" / "+st.name)
			}
			var errs int64
			for _, s := range ss {
				errs += s.errors
			}
			hit := "—"
			if !strings.HasPrefix(sc.name, "memcaslap") { // memcaslap does not say
				hit = fmt.Sprintf("%.1f %%", 100*medianOf(ss, func(s sample) float64 { return s.hitRatio }))
			}
			rows = append(rows, []string{sc.name, st.name, commas(medianOf(ss, func(s sample) float64 { return s.opsPerSec })),
				strings.Join(each, ", "), fmt.Sprintf("%.2f", gen), fmt.Sprintf("%.2f", srv), fmt.Sprintf("%.2f", other), hit, strconv.FormatInt(errs, 10), note})
		}
	}
	writeTable(w, []string{"scenario", "setup", "ops/s", "each run: ops per CPU-s (latency: p50/p99)",
		"generator cores", "server cores", "other cores", "hit ratio", "errors", ""}, rows)

	fmt.Fprintf(w, "\nCores are CPU-seconds per second of the measured run: the load generator's, the servers' "+
		"(single node: its rusage stats; 3 nodes and memcaslap: every process of the setup, from /proc), and the rest "+
		"of the machine's busy time (/proc/stat), which is other work; memcaslap's wall time includes its start, "+
		"a second or so before it loads. ")
	if len(saturated) == cells {
		saturated = []string{"every cell"}
	}
	if len(saturated) > 0 {
		fmt.Fprintf(w, "**Saturated** (the machine was 90 %% or more busy): %s. There ops/s is bound by the machine, "+
			"and a server that needs less CPU per request leaves more to the generator, which then drives it harder; "+
			"ops per server CPU-second is still the figure to compare. ", strings.Join(saturated, "; "))
	} else {
		fmt.Fprintf(w, "No cell saturated the %d cores (the machine stayed under 90 %% busy). ", cores)
	}
	if maxOther >= 0.1 {
		fmt.Fprintf(w, "**Other work** took up to %.2f cores during a cell's runs: those figures are noisier than a quiet machine's.", maxOther)
	}
	fmt.Fprintf(w, "\n\n")

	printPerRequest(w, res, done)

	if r := res["cluster"]; r != nil && len(r[1]) > 0 {
		fmt.Fprintf(w, "Busiest node / mean counts at each node the requests it answered itself: on memcached cmd_get + cmd_set; "+
			"on a Spillway node served + cmd_set − forwarded_writes, because a read a node forwards is counted in cmd_get "+
			"at the entry node and again at the node that serves it (and a forwarded write in cmd_set at both). "+
			"By cmd_get + cmd_set the Spillway cluster's figure would be %.2f. The nodes' answered requests add up to %.3f× "+
			"the client's (1 when these stats are right).\n\n",
			medianOf(r[1], func(s sample) float64 { return s.busiestCmd }), medianOf(r[1], func(s sample) float64 { return s.answered }))
	}

	fmt.Fprintf(w, "### Commands (the last run of each cell; $DIR is a temporary directory, ports are free ones)\n\n```\n")
	for _, sc := range done {
		for side, st := range []*setup{sc.ref, sc.sw} {
			ss := res[sc.name][side]
			if len(ss) == 0 {
				continue
			}
			fmt.Fprintf(w, "# %s, %s\n%s\n", sc.name, st.name, strings.Join(ss[len(ss)-1].cmds, "\n"))
		}
	}
	fmt.Fprintf(w, "```\n")
}

// printPerRequest writes, for every cell, what a request cost the setup:
// CPU, system calls and context switches (medians of its runs).
func printPerRequest(w io.Writer, res results, done []scenario) {
	var rows [][]string
	for _, sc := range done {
		for side, st := range []*setup{sc.ref, sc.sw} {
			ss := res[sc.name][side]
			if len(ss) == 0 {
				continue
			}
			cpu := medianOf(ss, func(s sample) float64 { return 1e6 / s.opsPerCPU })
			sys := "—"
			if n := medianOf(ss, func(s sample) float64 { return s.syscalls }); n >= 0 {
				sys = fmt.Sprintf("%.2f", n)
			}
			rows = append(rows, []string{sc.name, st.name, fmt.Sprintf("%.2f", cpu), sys,
				fmt.Sprintf("%.2f", medianOf(ss, func(s sample) float64 { return s.switches }))})
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "### Per request: CPU, system calls, context switches\n\n")
	writeTable(w, []string{"scenario", "setup", "CPU µs", "system calls", "context switches"}, rows)
	fmt.Fprintf(w, "\nPer request of the load generator, medians of the cell's runs, counting the setup's processes only "+
		"(CPU as in the cell's ops per CPU-second). System calls are perf stat's raw_syscalls:sys_enter on their PIDs; "+
		"context switches, voluntary and not, are their threads' from /proc. ")
	if why := syscallsUncounted.Load(); why != nil {
		fmt.Fprintf(w, "System calls marked — were not counted: %v.", *why)
	}
	fmt.Fprintf(w, "\n\n")
}
