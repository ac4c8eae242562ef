package server

// The fault harness (issue 10): five `spillway serve` processes, each in a
// network namespace of its own, loaded from the root namespace by
// `spillway bench` (every value checked) and by the coherence history
// checker (coherence_test.go's load), while a scenario breaks something:
// kill -9 and restart, a 2|3 partition and its heal, 200 ms + 5 % loss on
// one node's link, a rolling restart, a flash-sale hot key. One table row
// per scenario.
//
//	make test-faults                     # SPILLWAY_FAULTS=long
//	SPILLWAY_FAULTS=short go test -v -run TestFaults ./server/
//
// It needs root (network namespaces); without SPILLWAY_FAULTS it skips.

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/anishathalye/porcupine"

	"spillway/bench"
	"spillway/internal/buildtest"
	"spillway/internal/faultnet"
)

// deadAtHeal lists, for each node, the members it held dead when the
// partition healed (its last word on each between the cut and the heal).
// memberlist merges two sides again only through a member that some node
// across still holds alive or suspect: it probes no dead member, pushes
// and pulls state with none, and gossips to one only for
// GossipToTheDeadTime after its death and only when it has news to send.
func deadAtHeal(events []nodeEvent, cut, heal time.Time) map[string][]string {
	held := map[string]map[string]bool{}
	for _, e := range events {
		if e.at.Before(cut) || !e.at.Before(heal) || e.member == "" || e.member == e.node {
			continue
		}
		switch e.msg {
		case "peers: member dead":
			if held[e.node] == nil {
				held[e.node] = map[string]bool{}
			}
			held[e.node][e.member] = true
		case "peers: member alive":
			delete(held[e.node], e.member)
		}
	}
	out := map[string][]string{}
	for node, m := range held {
		if len(m) > 0 {
			out[node] = slices.Sorted(maps.Keys(m))
		}
	}
	return out
}

// declaredDead returns the nodes that another node's gossip declared dead
// since from.
func declaredDead(events []nodeEvent, from time.Time) map[string]bool {
	out := map[string]bool{}
	for _, e := range events {
		if e.msg == "peers: member dead" && !e.at.Before(from) && e.member != e.node {
			out[e.member] = true
		}
	}
	return out
}

// faultPlan sets how long each phase runs and how hard.
type faultPlan struct {
	warm, fault, after time.Duration // load before, during and after the fault
	// partition is how long the partition lasts: longer than failure
	// detection (memberlist's LAN profile: ~5 s), so that each side
	// declares the other dead.
	partition time.Duration
	rate      float64       // bench requests per second, all nodes
	pace      time.Duration // each checker client sends at most one op per pace
	// settle is the longest wait for views to converge after a repair.
	// After a partition, memberlist re-merges the sides by gossiping to
	// the members it declared dead (30 s) and by push/pull (every 30 s):
	// 22–63 s were seen, hence the bound's room.
	settle      time.Duration
	checkBudget time.Duration
}

func faultPlanFor(mode string) faultPlan {
	if mode == "short" {
		return faultPlan{warm: 2 * time.Second, fault: 5 * time.Second, after: 2 * time.Second, partition: 12 * time.Second,
			rate: 1500, pace: 4 * time.Millisecond, settle: 90 * time.Second, checkBudget: 20 * time.Second}
	}
	return faultPlan{warm: 5 * time.Second, fault: 15 * time.Second, after: 5 * time.Second, partition: 20 * time.Second,
		rate: 2500, pace: 3 * time.Millisecond, settle: 120 * time.Second, checkBudget: 60 * time.Second}
}

// faultRun is one scenario under way: what it did and when.
type faultRun struct {
	t  *testing.T
	c  *faultCluster
	p  faultPlan
	h  *history
	lg *loadGen

	faultAt, repairAt, recoveredAt time.Time
	// affected lists when each node was the fault's target: its own
	// clients' errors are expected then, and its latency is not a healthy
	// node's.
	affected map[string][][2]time.Time
	// losses are when a node lost what it held (killed, or restarted):
	// each key may fall back once to the origin's value in each.
	losses []lossWindow
	part   *partitionTimes
	sides  [][]string
	notes  []string
}

type lossWindow struct {
	what     string
	from, to time.Time
}

// lossMargin extends a loss window past the recovery: a fill from the
// origin that began inside it may answer a little later.
const lossMargin = time.Second

func (fr *faultRun) note(format string, args ...any) {
	fr.notes = append(fr.notes, fmt.Sprintf(format, args...))
	fr.t.Logf(format, args...)
}

func (fr *faultRun) affect(node string, from, to time.Time) {
	fr.affected[node] = append(fr.affected[node], [2]time.Time{from, to})
}

// isAffected reports whether a request to node from start to end
// overlapped a time the node was the fault's target.
func (fr *faultRun) isAffected(node string, start, end time.Time) bool {
	for _, iv := range fr.affected[node] {
		if end.After(iv[0]) && start.Before(iv[1]) {
			return true
		}
	}
	return false
}

// converge waits for every running node to see all running nodes, and
// fails the scenario past settle. It returns how long it waited and
// whether the views converged: a wait of settle is no convergence time.
func (fr *faultRun) converge(what string) (time.Duration, bool) {
	d, err := fr.c.waitConverged(fr.p.settle)
	if err != nil {
		fr.t.Errorf("%s: views did not converge: %v", what, err)
		fr.note("%s: views not converged after %v", what, fr.p.settle)
	}
	return d, err == nil
}

type faultScenario struct {
	name       string
	impairable []int
	bench      func(p faultPlan, cfg *bench.Config) // adjusts the load
	run        func(fr *faultRun)                   // the timeline
}

func faultScenarios() []faultScenario {
	byName := func(fr *faultRun, name string) *faultNode {
		for _, nd := range fr.c.nodes {
			if nd.name == name {
				return nd
			}
		}
		panic(name)
	}
	return []faultScenario{
		{name: "fault-free", run: func(fr *faultRun) {
			time.Sleep(fr.p.warm + fr.p.fault + fr.p.after)
		}},
		{name: "kill -9 n2, restart", run: func(fr *faultRun) {
			time.Sleep(fr.p.warm)
			nd := byName(fr, "n2")
			fr.faultAt = time.Now()
			fr.c.signal(nd, syscall.SIGKILL, 5*time.Second)
			if d, err := fr.c.waitConverged(fr.p.fault); err != nil {
				fr.note("the 4 others had not all dropped n2 from their rings %.1f s after the kill: %v", d.Seconds(), err)
			} else {
				fr.note("the 4 others dropped n2 from their rings %.1f s after the kill", d.Seconds())
			}
			time.Sleep(max(fr.p.fault-time.Since(fr.faultAt), 0))
			fr.repairAt = time.Now()
			if err := fr.c.start(nd); err != nil {
				fr.t.Fatal(err)
			}
			fr.affect("n2", fr.faultAt, time.Now())
			fr.converge("restart")
			fr.recoveredAt = time.Now()
			fr.losses = append(fr.losses, lossWindow{"n2 killed", fr.faultAt, fr.recoveredAt.Add(lossMargin)})
			time.Sleep(fr.p.after)
		}},
		{name: "partition n1 n2 / n3 n4 n5, heal", run: func(fr *faultRun) {
			time.Sleep(fr.p.warm)
			fr.sides = [][]string{{"n1", "n2"}, {"n3", "n4", "n5"}}
			dead0 := fr.c.poll.perNode("declared_dead")
			fr.faultAt = time.Now()
			if err := fr.c.net.Partition([]int{1, 2}, []int{3, 4, 5}); err != nil {
				fr.t.Fatal(err)
			}
			cutDone := time.Now()
			time.Sleep(fr.p.partition)
			fr.repairAt = time.Now()
			if err := fr.c.net.Heal(); err != nil {
				fr.t.Fatal(err)
			}
			d, converged := fr.converge("heal")
			// Settled: views converged, and every node that another
			// declared dead has learned it (its declared_dead moved) and
			// dropped what it held; a second more for requests under way.
			// A node no one declared dead has nothing to learn: the side
			// that still held it alive never took its keys.
			deadline := time.Now().Add(fr.p.settle)
			var learned int
			var declared map[string]bool
			for {
				learned = 0
				waiting := false
				declared = declaredDead(fr.c.events(), fr.faultAt)
				for node, n := range fr.c.poll.perNode("declared_dead") {
					if n > dead0[node] {
						learned++
					} else if declared[node] {
						waiting = true
					}
				}
				if !waiting || time.Now().After(deadline) {
					break
				}
				time.Sleep(statsEvery)
			}
			time.Sleep(time.Second)
			dead := learned
			fr.recoveredAt = time.Now()
			fr.part = &partitionTimes{cut: int64(fr.faultAt.Sub(fr.h.start)), cutDone: int64(cutDone.Sub(fr.h.start)),
				healed:  int64(fr.repairAt.Sub(fr.h.start)),
				settled: int64(fr.recoveredAt.Sub(fr.h.start)), strict: dead >= faultNodes}
			views := fmt.Sprintf("views converged %.1f s after the heal", d.Seconds())
			if !converged {
				views = fmt.Sprintf("views had not converged %.1f s after the heal", d.Seconds())
			}
			fr.note("%s; %d of the %d nodes declared dead learned it (settled %.1f s after the heal)",
				views, dead, len(declared), fr.recoveredAt.Sub(fr.repairAt).Seconds())
			time.Sleep(fr.p.after)
		}},
		{name: "n3's link: 200 ms delay, 5 % loss", impairable: []int{3}, run: func(fr *faultRun) {
			time.Sleep(fr.p.warm)
			fr.faultAt = time.Now()
			if err := fr.c.net.Impair(3, 200*time.Millisecond, 0.05); err != nil {
				fr.t.Fatal(err)
			}
			time.Sleep(fr.p.fault)
			fr.repairAt = time.Now()
			if err := fr.c.net.Impair(3, 0, 0); err != nil {
				fr.t.Fatal(err)
			}
			fr.affect("n3", fr.faultAt, fr.repairAt)
			sent, dropped := fr.c.net.LinkStats(3)
			fr.note("n3 sent %d frames, %d dropped", sent, dropped)
			fr.converge("link restored")
			fr.recoveredAt = time.Now()
			time.Sleep(fr.p.after)
		}},
		{name: "rolling restart (SIGTERM) of all five", run: func(fr *faultRun) {
			time.Sleep(fr.p.warm)
			fr.faultAt = time.Now()
			var exits []string
			for _, nd := range fr.c.nodes {
				from := time.Now()
				d, err := fr.c.signal(nd, syscall.SIGTERM, 15*time.Second)
				if err != nil {
					fr.t.Errorf("rolling restart: %v", err)
				}
				exits = append(exits, fmt.Sprintf("%s %.1fs", nd.name, d.Seconds()))
				if err := fr.c.start(nd); err != nil {
					fr.t.Fatal(err)
				}
				fr.affect(nd.name, from, time.Now())
				fr.converge("restart of " + nd.name)
				fr.losses = append(fr.losses, lossWindow{nd.name + " restarted", from, time.Now().Add(lossMargin)})
				time.Sleep(fr.p.fault / faultNodes)
			}
			fr.repairAt = time.Now()
			fr.recoveredAt = fr.repairAt
			fr.note("SIGTERM to exit: %s", strings.Join(exits, ", "))
			time.Sleep(fr.p.after)
		}},
		{name: "flash sale: one cold key takes 30 % of requests", bench: func(p faultPlan, cfg *bench.Config) {
			cfg.HotKeyAt, cfg.HotShare = p.warm, 0.3
		}, run: func(fr *faultRun) {
			fr.faultAt = time.Now().Add(fr.p.warm) // the bench turns the key hot then
			time.Sleep(fr.p.warm + fr.p.fault)
			fr.repairAt = time.Now()
			fr.recoveredAt = fr.repairAt
			time.Sleep(fr.p.after)
		}},
	}
}

// faultRow is one line of the table.
type faultRow struct {
	name                string
	benchReqs, checkOps int64
	wrong               int64
	check               faultCheck
	lostLogged          int
	lostStat            uint64
	errHealthy, errHit  string
	recover             string
	originCalls         int
	originBench         int
	p99Healthy          time.Duration
	notes               []string
}

func TestFaults(t *testing.T) {
	mode := os.Getenv("SPILLWAY_FAULTS")
	if mode == "" {
		t.Skip("SPILLWAY_FAULTS not set: the fault harness needs root and minutes (make test-faults)")
	}
	if err := faultnet.Check(); err != nil {
		t.Fatal(err)
	}
	bin := os.Getenv("SPILLWAY_BIN")
	if bin == "" {
		var err error
		if bin, err = buildtest.Binary("../cmd/spillway"); err != nil {
			t.Fatal(err)
		}
		defer buildtest.Cleanup()
	}
	p := faultPlanFor(mode)
	var rows []faultRow
	var base time.Duration
	for _, sc := range faultScenarios() {
		if only := os.Getenv("SPILLWAY_FAULTS_ONLY"); only != "" && !strings.Contains(sc.name, only) && sc.name != "fault-free" {
			continue
		}
		t.Run(sc.name, func(t *testing.T) {
			row := runFaultScenario(t, bin, p, sc)
			if sc.name == "fault-free" {
				base = row.p99Healthy
			}
			rows = append(rows, row)
		})
	}
	table := faultTable(rows, base, p, mode)
	fmt.Println(table)
	if path := os.Getenv("SPILLWAY_FAULTS_TABLE"); path != "" {
		os.WriteFile(path, []byte(table), 0o644)
	}
}

func runFaultScenario(t *testing.T, bin string, p faultPlan, sc faultScenario) faultRow {
	c := newFaultCluster(t, bin, sc.impairable)
	fr := &faultRun{t: t, c: c, p: p, affected: map[string][][2]time.Time{}}
	total := p.warm + p.fault + p.after
	cfg := bench.Config{Conns: 20, Rate: p.rate, Duration: total + 5*time.Second, Keys: 20000, Zipf: 0.9,
		Prefill: true, Timeout: 2 * time.Second, Seed: 1}
	if sc.bench != nil {
		sc.bench(p, &cfg)
	}
	var servers []string
	for _, nd := range c.nodes {
		servers = append(servers, nd.addr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := startFaultBench(ctx, servers, cfg)
	<-b.began
	benchStart := time.Now()

	pool := &clientPool{}
	for _, nd := range c.nodes {
		pool.add(t, nd.name, nd.addr)
	}
	fr.h = newHistory()
	fr.lg = &loadGen{h: fr.h, pool: pool, origin: c.origin.vo}
	fr.lg.start(math.MaxInt32, 10*total+p.settle*3, p.pace)
	func() {
		defer fr.lg.halt()
		sc.run(fr)
	}()
	// The bench runs a fixed time (total plus room for the waits above);
	// stop it once the scenario is over.
	cancel()
	<-b.done
	runEnd := time.Now()
	if b.err != nil && b.err != context.Canceled {
		t.Errorf("bench: %v", b.err)
	}
	lostStat := c.poll.total("lost_invalidations")
	c.poll.stop()
	var crashes []string
	c.stopAllGracefully(t)
	crashes = c.crashes()
	for _, cr := range crashes {
		t.Errorf("server crash: %s", cr)
	}

	row := faultRow{name: sc.name, lostStat: lostStat}
	obs := b.observations()
	row.benchReqs = int64(len(obs))
	if fr.faultAt.IsZero() {
		fr.faultAt = benchStart
	}
	if fr.recoveredAt.IsZero() {
		fr.recoveredAt = runEnd
	}
	// Latency at the nodes the fault spared, from the fault to the
	// recovery (the whole run for the fault-free one).
	from, to := fr.faultAt, fr.recoveredAt
	if sc.name == "fault-free" {
		from, to = benchStart, runEnd
	} else if to.Sub(from) < time.Second {
		to = from.Add(p.fault)
	}
	hist := hdrhistogram.New(1, int64(time.Minute), 3)
	var healthyErrs, hitErrs []bench.Observation
	for _, o := range obs {
		node := c.nodes[o.Server].name
		hit := fr.isAffected(node, o.Start, o.Start.Add(o.Latency))
		switch o.Result {
		case "", "hit", "miss":
			if !hit && !o.Start.Before(from) && o.Start.Before(to) {
				hist.RecordValue(min(int64(o.Latency), int64(time.Minute)))
			}
		case "corrupt":
			row.wrong++
		}
		if o.Result != "" && o.Result != "hit" && o.Result != "miss" {
			if hit {
				hitErrs = append(hitErrs, o)
			} else {
				healthyErrs = append(healthyErrs, o)
			}
		}
	}
	row.p99Healthy = time.Duration(hist.ValueAtPercentile(99))
	row.errHealthy = errorSummary(healthyErrs, fr.faultAt)
	row.errHit = errorSummary(hitErrs, fr.faultAt)
	if b.rep != nil && row.wrong > 0 {
		fr.note("bench: %v", b.err)
	}

	// Recovery: the later of the views converging and the last error.
	if sc.name != "fault-free" && !fr.repairAt.IsZero() {
		rec := fr.recoveredAt
		for _, o := range append(healthyErrs, hitErrs...) {
			if end := o.Start.Add(o.Latency); end.After(rec) {
				rec = end
			}
		}
		row.recover = fmt.Sprintf("%.1f s", rec.Sub(fr.repairAt).Seconds())
	}
	row.originCalls, row.originBench, _ = c.origin.between(benchStart, runEnd)
	if strings.HasPrefix(sc.name, "rolling") {
		_, calls, keys := c.origin.between(fr.faultAt, fr.repairAt)
		read := map[int]bool{}
		for _, o := range obs {
			if !o.Set && !o.Start.Before(fr.faultAt) && o.Start.Before(fr.repairAt) {
				read[o.Key] = true
			}
		}
		fr.note("rolling restart: %d origin calls for %d bench keys, of %d distinct keys read during it: %.1f %% (target < 10 %%)",
			calls, keys, len(read), 100*float64(calls)/float64(max(len(read), 1)))
	}

	// Membership: a healthy node that declared another healthy node dead
	// flapped.
	events := c.events()
	var lost []lostInval
	flaps := map[string]int{}
	for _, e := range events {
		switch {
		case strings.HasPrefix(e.msg, "invalidation lost"):
			key := e.key
			if key == "fence" {
				key = ""
			}
			lost = append(lost, lostInval{key: key, at: int64(e.at.Sub(fr.h.start))})
		case e.msg == "peers: member dead" && e.at.After(benchStart):
			flaps[e.node+" saw "+e.member+" dead"]++
		case strings.HasPrefix(e.msg, "panic:"), strings.HasPrefix(e.msg, "fatal error:"):
			t.Errorf("%s: %s", e.node, e.msg)
		}
	}
	row.lostLogged = len(lost)
	if len(flaps) > 0 {
		fr.note("members declared dead: %v", flaps)
	}
	if fr.sides != nil {
		fr.note("at the heal, each node held dead: %v", deadAtHeal(events, fr.faultAt, fr.repairAt))
	}

	ops := fr.h.operations()
	row.checkOps = int64(len(ops))
	ops = withLosses(ops, fr.h, fr.losses)
	checkStart := time.Now()
	if fr.part != nil {
		row.check = checkPartition(ops, fr.sides, *fr.part, lost, DefaultCopyTTL, p.checkBudget, t.Name())
		t.Logf("partition at %.3f s, healed at %.3f s, settled at %.3f s (history clock); strict %v",
			float64(fr.part.cut)/1e9, float64(fr.part.healed)/1e9, float64(fr.part.settled)/1e9, fr.part.strict)
		for _, part := range row.check.parts {
			t.Logf("checker, %s", part)
		}
	} else {
		r, excused := checkExcusing(cacheModel(initialOrigin), ops, lost, DefaultCopyTTL, p.checkBudget, t.Name())
		row.check.add(r, excused)
	}
	if len(row.check.violations) > 0 {
		for _, k := range row.check.violations[:min(3, len(row.check.violations))] {
			for _, s := range staleHits(ops, k, 2) {
				t.Logf("stale hit: %s", s)
				row.check.details = append(row.check.details, s)
			}
		}
		path := filepath.Join(c.dir, "history.txt")
		writeHistory(path, ops)
		t.Errorf("checker: %d violations (keys %v); visualisation %s; node logs and the history (%s) in %s",
			len(row.check.violations), row.check.violations, row.check.visualization, filepath.Base(path), c.dir)
	}
	if row.wrong > 0 {
		t.Errorf("bench: %d wrong values; node logs in %s", row.wrong, c.dir)
	}
	t.Logf("checked %d operations (%d unknown outcome) in %v: %d violations, %d keys excused by lost invalidations (%d logged, %d counted), porcupine timed out on %v",
		row.check.ops, row.check.unknown, time.Since(checkStart).Round(time.Millisecond), len(row.check.violations),
		len(row.check.excused), row.lostLogged, row.lostStat, row.check.timedOut)
	row.notes = fr.notes
	return row
}

// withLosses adds the scenario's loss windows to ops (withLossWindow).
func withLosses(ops []porcupine.Operation, h *history, losses []lossWindow) []porcupine.Operation {
	for _, l := range losses {
		ops = withLossWindow(ops, int64(l.from.Sub(h.start)), int64(l.to.Sub(h.start)), l.what)
	}
	return ops
}

// writeHistory writes ops as text, sorted by call, one per line (the
// format of checkHistory's text next to a visualisation).
func writeHistory(path string, ops []porcupine.Operation) {
	ops = slices.Clone(ops)
	slices.SortStableFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	var b strings.Builder
	for _, op := range ops {
		ret := "inf"
		if op.Return != math.MaxInt64 {
			ret = fmt.Sprint(op.Return / 1000)
		}
		fmt.Fprintf(&b, "%10dus %10sus c%d %-8s %s\n", op.Call/1000, ret, op.ClientId, op.Metadata,
			describeOp(op.Input.(hInput), op.Output.(hOutput)))
	}
	os.WriteFile(path, []byte(b.String()), 0o644)
}

// stopAllGracefully sends SIGTERM to every node at once and waits; a node
// that fails its shutdown is an error.
func (c *faultCluster) stopAllGracefully(t *testing.T) {
	var wg sync.WaitGroup
	for _, nd := range c.nodes {
		wg.Go(func() {
			if _, err := c.signal(nd, syscall.SIGTERM, 15*time.Second); err != nil {
				t.Errorf("stopping: %v", err)
			}
		})
	}
	wg.Wait()
}

// errorSummary is "N (kind n, …) at +a…+b s": when the errors came (a
// request's end, not its schedule), relative to the fault.
func errorSummary(errs []bench.Observation, at time.Time) string {
	if len(errs) == 0 {
		return "0"
	}
	kinds := map[string]int{}
	first, last := errs[0].Start.Add(errs[0].Latency), errs[0].Start.Add(errs[0].Latency)
	for _, o := range errs {
		kinds[o.Result]++
		end := o.Start.Add(o.Latency)
		if end.Before(first) {
			first = end
		}
		if end.After(last) {
			last = end
		}
	}
	var ks []string
	for k, n := range kinds {
		ks = append(ks, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(ks)
	return fmt.Sprintf("%d (%s) at %+.1f…%+.1f s", len(errs), strings.Join(ks, ", "),
		first.Sub(at).Seconds(), last.Sub(at).Seconds())
}

func faultTable(rows []faultRow, base time.Duration, p faultPlan, mode string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nFault harness (%s: %v before, %v of fault, %v after; bench %g req/s open loop over 5 nodes, 20000 keys, zipf 0.9, 9:1; checker 8 clients, one op per %v each)\n\n",
		mode, p.warm, p.fault, p.after, p.rate, p.pace)
	b.WriteString("| scenario | requests (bench + checker) | wrong values | checker violations | lost invalidations (keys excused) | errors at healthy nodes | errors at the faulted node | recover | origin calls (bench keys) | p99 healthy nodes (fault-free) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d + %d | %d | %d | %d (%d) | %s | %s | %s | %d (%d) | %s (%s) |\n",
			r.name, r.benchReqs, r.checkOps, r.wrong, len(r.check.violations), r.lostLogged, len(r.check.excused),
			r.errHealthy, r.errHit, cmp.Or(r.recover, "–"), r.originCalls, r.originBench,
			r.p99Healthy.Round(10*time.Microsecond), base.Round(10*time.Microsecond))
	}
	b.WriteString("\n")
	for _, r := range rows {
		for _, n := range r.notes {
			fmt.Fprintf(&b, "- %s: %s\n", r.name, n)
		}
		if r.lostStat != uint64(r.lostLogged) {
			fmt.Fprintf(&b, "- %s: lost_invalidations stat %d, logged %d (a killed run's last counts are as last polled)\n", r.name, r.lostStat, r.lostLogged)
		}
		if len(r.check.timedOut) > 0 {
			fmt.Fprintf(&b, "- %s: porcupine gave up on keys %v (not counted)\n", r.name, r.check.timedOut)
		}
		for _, d := range r.check.details {
			fmt.Fprintf(&b, "- %s: %s\n", r.name, d)
		}
	}
	return b.String()
}
