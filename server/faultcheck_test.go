package server

// The history checker as the fault harness uses it: the coherence
// contract's one exception (a lost invalidation lets a copy be served
// until --copy-ttl) taken as input, and the partition clause. Both are in
// README's "How a request flows".

import (
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// lostInval is a lost invalidation a node logged: key, or "" when the
// node could not tell a member of a hand-off (a fence), which may leave a
// copy of any key. at is on the history's clock.
type lostInval struct {
	key string
	at  int64
}

// faultCheck is what the checker found in one scenario.
type faultCheck struct {
	ops, unknown, keys int
	violations         []string // keys whose history is illegal, exception or not
	excused            []string // keys legal only because a lost invalidation allows a stale hit
	timedOut           []string // keys porcupine gave up on (not counted as violations)
	details            []string // the stale hits of some violations, for a human
	visualization      string
	parts              []string // per part of the check (partition), what it found
}

func (f *faultCheck) addPart(name string, r checkResult, excused []string) {
	f.parts = append(f.parts, fmt.Sprintf("%s: %d ops, violations %v, excused %v, visualisation %s",
		name, r.ops, r.illegal, excused, r.visualization))
	f.add(r, excused)
}

func (f *faultCheck) add(r checkResult, excused []string) {
	f.ops += r.ops
	f.unknown += r.unknown
	f.keys = max(f.keys, r.keys)
	f.violations = append(f.violations, r.illegal...)
	f.excused = append(f.excused, excused...)
	f.timedOut = append(f.timedOut, r.timedOut...)
	if f.visualization == "" {
		f.visualization = r.visualization
	}
}

// checkExcusing checks ops like checkHistory, then takes each illegal key
// that had a lost invalidation and checks it again without the hits that
// loss allows (withoutExcusedHits): a key legal then is excused, not a
// violation. The exception is only that: a key illegal for other reasons
// stays illegal.
func checkExcusing(model porcupine.Model, ops []porcupine.Operation, lost []lostInval, copyTTL, budget time.Duration, name string) (checkResult, []string) {
	r := checkHistory(model, ops, budget, name)
	var still, excused []string
	for _, key := range r.illegal {
		var kops []porcupine.Operation
		for _, op := range ops {
			if in := op.Input.(hInput); in.kind == opFlush || in.key == key {
				kops = append(kops, op)
			}
		}
		single := model
		single.Partition = nil
		if _, ok := recheckExcusing(single, kops, key, lost, copyTTL, budget); ok {
			excused = append(excused, key)
		} else {
			still = append(still, key)
		}
	}
	if len(still) == 0 && r.visualization != "" && !strings.HasPrefix(r.visualization, "(") {
		os.Remove(r.visualization)
		os.Remove(strings.TrimSuffix(r.visualization, ".html") + ".txt")
		r.visualization = ""
	}
	r.illegal = still
	return r, excused
}

// recheckExcusing checks the illegal history ops of one key again without
// the get hits called from excuseBefore before to copyTTL after a lost
// invalidation of the key (or of a fence): ok if that makes it legal.
func recheckExcusing(model porcupine.Model, ops []porcupine.Operation, key string, lost []lostInval, copyTTL, budget time.Duration) (porcupine.CheckResult, bool) {
	var windows [][2]int64
	for _, l := range lost {
		if l.key == key || l.key == "" {
			windows = append(windows, [2]int64{l.at - int64(excuseBefore), l.at + int64(copyTTL)})
		}
	}
	if len(windows) == 0 {
		return porcupine.Illegal, false
	}
	sub := slices.DeleteFunc(slices.Clone(ops), func(op porcupine.Operation) bool {
		in, out := op.Input.(hInput), op.Output.(hOutput)
		return in.kind == opGet && out.res == resOK && slices.ContainsFunc(windows, func(w [2]int64) bool {
			return op.Call >= w[0] && op.Call <= w[1]
		})
	})
	res := porcupine.CheckOperationsTimeout(model, sub, budget)
	return res, res == porcupine.Ok
}

// excuseBefore is how long before a logged loss its write may have begun:
// the invalidation timeout and the peer timeout, with room to spare.
const excuseBefore = 2 * time.Second

// entryNode is the node an operation was sent to (its metadata starts
// with the node's name).
func entryNode(op porcupine.Operation) string {
	s, _ := op.Metadata.(string)
	name, _, _ := strings.Cut(s, ":")
	return name
}

// asUnknown is op with an unknown outcome: it may have taken effect at
// any point after its call, or not at all.
func asUnknown(op porcupine.Operation) porcupine.Operation {
	op.Output = hOutput{res: resUnknown}
	op.Return = math.MaxInt64
	return op
}

func writes(k opKind) bool { return k != opGet }

// partitionTimes are the moments of a partition on the history's clock:
// cut, healed (the network mended), settled (every node sees every other
// again, and each that the others had declared dead has dropped its items).
type partitionTimes struct {
	cut, healed, settled int64
	// cutDone is when the cut was complete (on every host): an operation
	// called between cut and cutDone may have crossed it.
	cutDone int64
	// strict: every node learned it had been declared dead, so no item
	// written before the heal may be served after settled.
	strict bool
}

// checkPartition checks a history with a partition in it against the
// contract's partition clause ("each side serves and accepts writes on its
// own"; after the heal no value from before it comes back):
//
//   - while cut, each side alone is coherent, from a state where each key
//     may once fall back to the origin's value (a side cut off from a
//     key's owner has only the origin): the operations before the cut
//     (the other side's that had not returned by then as unknown
//     outcomes), this side's operations that returned before the heal
//     (writes still under way then as unknown outcomes), and the other
//     side's origin bumps as unknown outcomes (the origin is shared);
//   - between the heal and settled, nodes that have not yet learned they
//     were declared dead still serve what they hold (README, "Where the
//     contract is weakest"), so values may go back and forth between the
//     sides' values; a hit there must only be a value some write made
//     before the read returned, not overwritten before the cut (an origin
//     value: not older than the last origin bump before the cut);
//   - from settled on, each key's history is linearizable from a state
//     that is a miss (the origin's value at that time) or a value written
//     since the heal; when not strict, also any value written since the
//     cut, or not overwritten before it.
func checkPartition(ops []porcupine.Operation, sides [][]string, pt partitionTimes, lost []lostInval, copyTTL, budget time.Duration, name string) faultCheck {
	var fc faultCheck
	model := cacheModel(initialOrigin)
	sideOf := func(op porcupine.Operation) int {
		n := entryNode(op)
		for i, s := range sides {
			if slices.Contains(s, n) {
				return i
			}
		}
		return -1
	}
	cutOff := func(sub []porcupine.Operation) []porcupine.Operation {
		return withLossWindow(sub, pt.cut, pt.healed, "cut off by the partition")
	}
	for i := range sides {
		var sub []porcupine.Operation
		for _, op := range ops {
			in := op.Input.(hInput)
			mine := sideOf(op) == i
			switch {
			case op.Call < pt.cut && (mine || op.Return <= pt.cut),
				op.Call < pt.healed && mine && op.Return < pt.healed:
				sub = append(sub, op)
			case op.Call < pt.cutDone && writes(in.kind),
				op.Call < pt.healed && mine && writes(in.kind),
				op.Call < pt.healed && in.kind == opBump:
				sub = append(sub, asUnknown(op))
			}
		}
		r, ex := checkExcusing(model, cutOff(sub), lost, copyTTL, budget/3, name+"-side"+strconv.Itoa(i))
		fc.addPart(fmt.Sprintf("side %v while cut", sides[i]), r, ex)
	}
	r := checkMerge(ops, pt)
	fc.addPart("from the heal until settled", r, nil)
	r, ex := checkAfterHeal(ops, pt, lost, copyTTL, budget/3)
	fc.addPart("after settled", r, ex)
	slices.Sort(fc.violations)
	fc.violations = slices.Compact(fc.violations)
	return fc
}

// checkMerge checks the hits called between the heal and settled (see
// checkPartition); it reports the keys of those that fail as illegal.
func checkMerge(ops []porcupine.Operation, pt partitionTimes) checkResult {
	var r checkResult
	byKey := map[string][]porcupine.Operation{}
	for _, op := range ops {
		if key := op.Input.(hInput).key; key != "" {
			byKey[key] = append(byKey[key], op)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		kops := byKey[key]
		// The last write known done before the cut began at lastCall: a
		// value whose write returned before that was overwritten.
		var lastCall int64
		minOrigin := 0
		for _, op := range kops {
			in, out := op.Input.(hInput), op.Output.(hOutput)
			if writes(in.kind) && out.res != resUnknown && op.Return < pt.cut {
				lastCall = max(lastCall, op.Call)
				if in.kind == opBump {
					minOrigin = max(minOrigin, originVersion(in.value))
				}
			}
		}
		bad := false
		for _, rd := range kops {
			in, out := rd.Input.(hInput), rd.Output.(hOutput)
			if in.kind != opGet || out.res != resOK || rd.Call < pt.healed || rd.Call >= pt.settled {
				continue
			}
			r.ops++
			if strings.HasPrefix(out.value, "o-") {
				if originVersion(out.value) < minOrigin {
					bad = true
				}
				continue
			}
			if !slices.ContainsFunc(kops, func(w porcupine.Operation) bool {
				win, wout := w.Input.(hInput), w.Output.(hOutput)
				wrote := win.kind == opSet && win.value == out.value ||
					win.kind == opCas && win.value == out.value ||
					win.kind == opIncr && wout.res == resOK && wout.value == out.value
				return wrote && w.Call < rd.Return && (w.Return >= lastCall || w.Return == math.MaxInt64)
			}) {
				bad = true
			}
		}
		if bad {
			r.illegal = append(r.illegal, key)
		}
	}
	return r
}

// originVersion is N of an origin value o-<key>-N.
func originVersion(v string) int {
	n, _ := strconv.Atoi(v[strings.LastIndexByte(v, '-')+1:])
	return n
}

// withLossWindow adds to ops, for each key, a delete by nobody that may
// take effect once anywhere from from to to (history clock): the key's
// value was lost then (its node crashed or restarted, or was cut off), so
// a read may fill the origin's value once, even if a write the node had
// acknowledged was newer.
func withLossWindow(ops []porcupine.Operation, from, to int64, what string) []porcupine.Operation {
	keys := map[string]bool{}
	for _, op := range ops {
		if k := op.Input.(hInput).key; k != "" {
			keys[k] = true
		}
	}
	out := slices.Clip(ops)
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		out = append(out, porcupine.Operation{ClientId: -1, Input: hInput{kind: opDelete, key: k},
			Call: from, Output: hOutput{res: resOK}, Return: to, Metadata: "loss: " + what})
	}
	return out
}

// checkAfterHeal checks, key by key, the operations called from settled on,
// from the states the partition clause allows then (see checkPartition).
func checkAfterHeal(ops []porcupine.Operation, pt partitionTimes, lost []lostInval, copyTTL, budget time.Duration) (checkResult, []string) {
	byKey := map[string][]porcupine.Operation{}
	for _, op := range ops {
		if key := op.Input.(hInput).key; key != "" {
			byKey[key] = append(byKey[key], op)
		}
	}
	var r checkResult
	var excused []string
	keys := slices.Sorted(maps.Keys(byKey))
	perKey := max(budget/time.Duration(max(len(keys), 1)), time.Second)
	for _, key := range keys {
		var post []porcupine.Operation
		read := map[string]bool{} // the values hits returned from settled on
		for _, op := range byKey[key] {
			if op.Call >= pt.settled {
				post = append(post, op)
				if out := op.Output.(hOutput); out.res == resUnknown {
					r.unknown++
				} else if op.Input.(hInput).kind == opGet && out.res == resOK {
					read[out.value] = true
				}
			}
		}
		post = append(post, lateWrites(byKey[key], pt, read)...)
		if len(post) == 0 {
			continue
		}
		r.keys++
		r.ops += len(post)
		start := statesAtSettled(byKey[key], key, pt)
		nm := porcupine.NondeterministicModel{
			Init: func() []any { return start },
			Step: func(state, input, output any) []any {
				if ok, next := stepCache(state.(hState), input.(hInput), output.(hOutput)); ok {
					return []any{next}
				}
				return nil
			},
			Equal: func(a, b any) bool { return a.(hState) == b.(hState) },
		}
		model := nm.ToModel()
		switch porcupine.CheckOperationsTimeout(model, post, perKey) {
		case porcupine.Ok:
			continue
		case porcupine.Unknown:
			r.timedOut = append(r.timedOut, key)
			continue
		}
		switch res, ok := recheckExcusing(model, post, key, lost, copyTTL, perKey); {
		case ok:
			excused = append(excused, key)
		case res == porcupine.Unknown:
			r.timedOut = append(r.timedOut, key)
		default:
			r.illegal = append(r.illegal, key)
		}
	}
	return r, excused
}

// lateWrites are the writes of unknown outcome called before settled
// whose value a hit returned from settled on, pending from settled on.
//
// A write of unknown outcome may take effect at any time after its call,
// once, and one sent during the cut can take effect long after the heal:
// a forward that timed out across the partition stays in the sender's TCP
// queue, retransmitted after 0.2 s, 0.4 s, ... 12.8 s, and is applied
// where it lands (a long run saw a set called 6.5 s into the cut applied
// 26.7 s later, 13 s after the heal). Linearized at settled, one is a
// write that took effect before. Its value is not one a node held from
// before the heal; an acknowledged write's is, and strict refuses it.
// Only writes whose value was read are added: each pending operation
// multiplies porcupine's search, and one nobody read cannot explain a hit.
func lateWrites(ops []porcupine.Operation, pt partitionTimes, read map[string]bool) []porcupine.Operation {
	var late []porcupine.Operation
	for _, op := range ops {
		in := op.Input.(hInput)
		if op.Call >= pt.settled || op.Output.(hOutput).res != resUnknown || !read[in.value] ||
			(in.kind != opSet && in.kind != opCas) {
			continue
		}
		op.Call = pt.settled
		late = append(late, op)
	}
	return late
}

// statesAtSettled are the states key may be in when the partition has
// settled (see checkPartition): a miss that fills the origin's value of
// then, or a hit of a value written since the heal (any time since the cut,
// or not overwritten before it, when not strict). A write of unknown
// outcome is not among them: checkAfterHeal has it pending.
func statesAtSettled(ops []porcupine.Operation, key string, pt partitionTimes) []any {
	originV, originOK := initialOrigin(key)
	var bumps []int
	for _, op := range ops {
		if in := op.Input.(hInput); in.kind == opBump && op.Call < pt.settled {
			v := originVersion(in.value)
			bumps = append(bumps, v)
			if v == slices.Max(bumps) {
				originV, originOK = in.value, true
			}
		}
	}
	if !originOK {
		originV = ""
	}
	states := []any{fromOrigin(hState{origin: originV})}
	// keep reports whether the value a write wrote may still be there.
	keep := func(op porcupine.Operation) bool { return op.Call >= pt.healed }
	if !pt.strict {
		// Any write since the cut, or not overwritten before it: one that
		// returned after the call of the last write known to have returned
		// before the cut.
		var last int64
		for _, op := range ops {
			if writes(op.Input.(hInput).kind) && op.Output.(hOutput).res != resUnknown && op.Return < pt.cut {
				last = max(last, op.Call)
			}
		}
		keep = func(op porcupine.Operation) bool { return op.Return >= last }
	}
	for _, op := range ops {
		in, out := op.Input.(hInput), op.Output.(hOutput)
		if op.Call >= pt.settled || !keep(op) || out.res == resUnknown {
			continue
		}
		v := ""
		switch {
		case in.kind == opSet, in.kind == opCas && out.res != resExists && out.res != resMiss:
			v = in.value
		case in.kind == opIncr && out.res == resOK:
			v = out.value
		}
		if v != "" {
			states = append(states, hState{present: true, value: v, origin: originV})
		}
	}
	return slices.CompactFunc(states, func(a, b any) bool { return a.(hState) == b.(hState) })
}
