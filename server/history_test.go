package server

// The history checker's half that knows nothing of clusters: the operations
// a client records, the cache-register model they are checked against
// (porcupine), and the check itself. coherence_test.go drives real nodes
// and records their histories.

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// opKind is what a recorded operation did.
type opKind uint8

const (
	opGet    opKind = iota // get or gets
	opSet                  // set value
	opDelete               // delete
	opIncr                 // incr delta
	opCas                  // cas with the unique a gets of expect returned
	opBump                 // bump the origin's version of key to value, then delete key
	opFlush                // flush_all: every key
)

var opNames = [...]string{"get", "set", "delete", "incr", "cas", "bump", "flush_all"}

// hInput is an operation's request.
type hInput struct {
	kind   opKind
	key    string // "" for flush_all
	value  string // set, cas: the new value; bump: the origin's new value
	expect string // cas: the value the gets returned
	delta  uint64 // incr
}

// hResult is how an operation ended.
type hResult uint8

const (
	resOK      hResult = iota // hit, STORED, DELETED, OK, incr's new value
	resMiss                   // get miss, NOT_FOUND
	resExists                 // cas EXISTS
	resUnknown                // timeout, connection lost, SERVER_ERROR: may or may not have happened
)

var resNames = [...]string{"ok", "miss", "exists", "unknown"}

// hOutput is an operation's reply.
type hOutput struct {
	res   hResult
	value string // get hit: the value; incr: the new value
}

// hState is one key's state in the model: what a hit may return, and what
// the origin would fill after a delete.
type hState struct {
	present bool
	value   string
	origin  string // "" if the origin has no value for the key
}

// initOrigin stands for "the key's initial origin value" in a state that
// has not yet met an operation naming the key (porcupine's Init does not
// know the partition's key).
const initOrigin = "\x00init"

// cacheModel is a cache register per key: a miss is always legal, a hit
// must return the value of the latest write linearized before it.
// initial, if set, gives a key's value at the origin before any bump; the
// model then starts every key at that value.
func cacheModel(initial func(key string) (string, bool)) porcupine.Model {
	resolve := func(s hState, key string) hState {
		if s.origin != initOrigin || key == "" {
			return s
		}
		v, ok := initial(key)
		if !ok {
			v = ""
		}
		if s.value == initOrigin {
			s.present, s.value = ok, v
		}
		s.origin = v
		return s
	}
	return porcupine.Model{
		Partition: partitionByKey,
		Init: func() any {
			if initial == nil {
				return hState{}
			}
			return hState{present: true, value: initOrigin, origin: initOrigin}
		},
		Step: func(state, input, output any) (bool, any) {
			in, out := input.(hInput), output.(hOutput)
			s := resolve(state.(hState), in.key)
			return stepCache(s, in, out)
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(hInput), output.(hOutput)
			return describeOp(in, out)
		},
		DescribeState: func(state any) string {
			s := state.(hState)
			v := "absent"
			if s.present {
				v = strconv.Quote(s.value)
			}
			if s.origin != "" {
				v += " (origin " + strconv.Quote(s.origin) + ")"
			}
			return strings.ReplaceAll(v, initOrigin, "initial")
		},
		DescribeOperationMetadata: func(info any) string {
			s, _ := info.(string)
			return s
		},
	}
}

// stepCache is the model's transition: whether out is a legal reply to in
// in state s, and the state after it.
func stepCache(s hState, in hInput, out hOutput) (bool, hState) {
	unknown := out.res == resUnknown
	switch in.kind {
	case opGet:
		if out.res != resOK {
			return true, s // a miss is always allowed: it is a cache
		}
		return s.present && s.value == out.value, s
	case opSet:
		return true, hState{present: true, value: in.value, origin: s.origin}
	case opDelete, opFlush:
		return true, fromOrigin(s)
	case opBump:
		s.origin = in.value
		return true, fromOrigin(s)
	case opIncr:
		cur, numeric := uint64(0), false
		if s.present {
			n, err := strconv.ParseUint(s.value, 10, 64)
			cur, numeric = n, err == nil
		}
		switch {
		case unknown:
			if numeric {
				s.value = strconv.FormatUint(cur+in.delta, 10)
			}
			return true, s
		case out.res == resMiss:
			return true, s
		}
		if !numeric || strconv.FormatUint(cur+in.delta, 10) != out.value {
			return false, s
		}
		s.value = out.value
		return true, s
	case opCas:
		matches := s.present && s.value == in.expect
		switch {
		case unknown:
			if matches {
				s.value = in.value
			}
			return true, s
		case out.res != resOK:
			return true, s // EXISTS or NOT_FOUND
		}
		if !matches {
			return false, s
		}
		s.value = in.value
		return true, s
	}
	return false, s
}

// fromOrigin is the state after the key left the cache: a read fills the
// origin's value, or misses.
func fromOrigin(s hState) hState {
	return hState{present: s.origin != "", value: s.origin, origin: s.origin}
}

func describeOp(in hInput, out hOutput) string {
	var b strings.Builder
	b.WriteString(opNames[in.kind])
	if in.key != "" {
		b.WriteString(" " + in.key)
	}
	switch in.kind {
	case opSet, opBump:
		b.WriteString(" " + in.value)
	case opIncr:
		fmt.Fprintf(&b, " %d", in.delta)
	case opCas:
		fmt.Fprintf(&b, " %s->%s", in.expect, in.value)
	}
	b.WriteString(" -> ")
	if out.res == resOK && (in.kind == opGet || in.kind == opIncr) {
		b.WriteString(out.value)
	} else {
		b.WriteString(resNames[out.res])
	}
	return b.String()
}

// partitionByKey splits a history by key; flush_all belongs to every key.
func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	var flushes []porcupine.Operation
	byKey := map[string][]porcupine.Operation{}
	var keys []string
	for _, op := range history {
		in := op.Input.(hInput)
		if in.kind == opFlush {
			flushes = append(flushes, op)
			continue
		}
		if _, ok := byKey[in.key]; !ok {
			keys = append(keys, in.key)
		}
		byKey[in.key] = append(byKey[in.key], op)
	}
	slices.Sort(keys)
	parts := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, append(byKey[k], flushes...))
	}
	return parts
}

// history records operations with call and return times on one monotonic
// clock. An operation with an unknown outcome returns at "infinity": it may
// be linearized anywhere after its call, or (being last) not at all.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation // guarded by mu
}

func newHistory() *history { return &history{start: time.Now()} }

func (h *history) now() int64 { return int64(time.Since(h.start)) }

// add records an operation called at call and returning now. meta names
// the node (and the error, for an unknown outcome) in the visualisation.
func (h *history) add(client int, in hInput, call int64, out hOutput, meta string) {
	ret := h.now()
	if out.res == resUnknown {
		ret = math.MaxInt64
	}
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call,
		Output: out, Return: ret, Metadata: meta})
	h.mu.Unlock()
}

func (h *history) operations() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops)
}

// checkResult is what checkHistory found.
type checkResult struct {
	ops, unknown, keys int
	illegal            []string // keys whose history is not linearizable
	timedOut           []string // keys the checker gave up on
	visualization      string   // HTML of the illegal keys, if any
}

// checkHistory checks every key's history within budget and, if one is
// illegal, writes porcupine's visualisation of (at most visualKeys of) the
// illegal keys to a file, and their operations as text next to it.
func checkHistory(model porcupine.Model, ops []porcupine.Operation, budget time.Duration, name string) checkResult {
	r := checkResult{ops: len(ops)}
	for _, op := range ops {
		if op.Output.(hOutput).res == resUnknown {
			r.unknown++
		}
	}
	parts := partitionByKey(ops)
	r.keys = len(parts)
	// Each key gets its share of the budget, so that one key whose many
	// unknown outcomes make the search explode does not starve the rest.
	perKey := max(budget/time.Duration(max(len(parts), 1)), time.Second)
	bad := map[string]bool{}
	for _, p := range parts {
		key := keyOf(p)
		single := model
		single.Partition = nil
		switch porcupine.CheckOperationsTimeout(single, p, perKey) {
		case porcupine.Illegal:
			r.illegal = append(r.illegal, key)
			if len(bad) < visualKeys {
				bad[key] = true
			}
		case porcupine.Unknown:
			r.timedOut = append(r.timedOut, key)
		}
	}
	if len(bad) == 0 {
		return r
	}
	var sub []porcupine.Operation
	for _, op := range ops {
		in := op.Input.(hInput)
		if in.kind == opFlush || bad[in.key] {
			sub = append(sub, op)
		}
	}
	_, info := porcupine.CheckOperationsVerbose(model, sub, budget)
	path := filepath.Join(os.TempDir(), fmt.Sprintf("spillway-coherence-%s-%d.html",
		strings.NewReplacer("/", "-", " ", "_").Replace(name), time.Now().UnixNano()))
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		r.visualization = "(visualisation failed: " + err.Error() + ")"
	} else {
		r.visualization = path
		// The same operations as text, sorted by call, to grep.
		slices.SortStableFunc(sub, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		var b strings.Builder
		for _, op := range sub {
			ret := "inf"
			if op.Return != math.MaxInt64 {
				ret = strconv.FormatInt(op.Return/1000, 10)
			}
			fmt.Fprintf(&b, "%10dus %10sus c%d %-8s %s\n", op.Call/1000, ret, op.ClientId, op.Metadata,
				describeOp(op.Input.(hInput), op.Output.(hOutput)))
		}
		os.WriteFile(strings.TrimSuffix(path, ".html")+".txt", []byte(b.String()), 0o644)
	}
	return r
}

// visualKeys bounds the keys in a visualisation: it stays readable, and
// the verbose check that feeds it stays quick.
const visualKeys = 3

func keyOf(part []porcupine.Operation) string {
	for _, op := range part {
		if k := op.Input.(hInput).key; k != "" {
			return k
		}
	}
	return ""
}

// staleHits explains violations a human can check at a glance: a hit of a
// value that a write with a known outcome replaced before the read began
// (the write began after the value's write returned). An origin value
// comes back after any delete, so for one only a newer bump counts, or a
// set with no delete, flush or bump from its call to the read's return.
// It finds only that pattern; porcupine finds them all.
func staleHits(ops []porcupine.Operation, key string, limit int) []string {
	var part []porcupine.Operation
	for _, op := range ops {
		if in := op.Input.(hInput); in.key == key || in.kind == opFlush {
			part = append(part, op)
		}
	}
	slices.SortFunc(part, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	writerOf := func(v string) (porcupine.Operation, bool) {
		if strings.HasPrefix(v, "o-") && strings.HasSuffix(v, "-0") {
			return porcupine.Operation{ClientId: -1, Input: hInput{kind: opBump, key: key, value: v},
				Output: hOutput{}, Call: -1, Return: -1, Metadata: "origin"}, true
		}
		for _, op := range part {
			in, out := op.Input.(hInput), op.Output.(hOutput)
			switch {
			case (in.kind == opSet || in.kind == opCas || in.kind == opBump) && in.value == v,
				in.kind == opIncr && out.res == resOK && out.value == v:
				return op, true
			}
		}
		return porcupine.Operation{}, false
	}
	removes := func(op porcupine.Operation) bool {
		k := op.Input.(hInput).kind
		return k == opDelete || k == opFlush || k == opBump
	}
	ms := func(ns int64) string {
		if ns == math.MaxInt64 {
			return "∞"
		}
		return fmt.Sprintf("%.1fms", float64(ns)/1e6)
	}
	var found []string
	for _, rd := range part {
		in, out := rd.Input.(hInput), rd.Output.(hOutput)
		if in.kind != opGet || out.res != resOK {
			continue
		}
		w, ok := writerOf(out.value)
		if !ok {
			found = append(found, fmt.Sprintf("get %s -> %q at %s [%s..%s]: no operation wrote that value",
				key, out.value, rd.Metadata, ms(rd.Call), ms(rd.Return)))
			continue
		}
		fromOrigin := w.Input.(hInput).kind == opBump
		for _, o := range part {
			oin, oout := o.Input.(hInput), o.Output.(hOutput)
			known := oin.kind != opGet && oout.res != resUnknown &&
				!(oin.kind == opCas && oout.res != resOK) && !(oin.kind == opIncr && oout.res != resOK)
			if !known || o.Call <= w.Return || o.Return >= rd.Call {
				continue
			}
			if fromOrigin && oin.kind != opBump {
				if removes(o) || slices.ContainsFunc(part, func(p porcupine.Operation) bool {
					return removes(p) && p.Call <= rd.Return && p.Return >= o.Call
				}) {
					continue
				}
			}
			found = append(found, fmt.Sprintf(
				"get %s -> %q by client %d at %s [%s..%s]; that value was written by client %d (%s) [%s..%s] at %s, "+
					"then replaced by client %d (%s) [%s..%s] at %s, %s before the read began",
				key, out.value, rd.ClientId, rd.Metadata, ms(rd.Call), ms(rd.Return),
				w.ClientId, describeOp(w.Input.(hInput), w.Output.(hOutput)), ms(w.Call), ms(w.Return), w.Metadata,
				o.ClientId, describeOp(oin, oout), ms(o.Call), ms(o.Return), o.Metadata, ms(rd.Call-o.Return)))
			break
		}
		if len(found) >= limit {
			break
		}
	}
	return found
}

// TestHistoryModel proves the model on hand-written histories: the checker
// can fail.
func TestHistoryModel(t *testing.T) {
	inf := int64(math.MaxInt64)
	op := func(client int, in hInput, call int64, out hOutput, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
	}
	set := func(k, v string) hInput { return hInput{kind: opSet, key: k, value: v} }
	get := func(k string) hInput { return hInput{kind: opGet, key: k} }
	del := func(k string) hInput { return hInput{kind: opDelete, key: k} }
	incr := func(k string, d uint64) hInput { return hInput{kind: opIncr, key: k, delta: d} }
	cas := func(k, expect, v string) hInput { return hInput{kind: opCas, key: k, expect: expect, value: v} }
	bump := func(k, v string) hInput { return hInput{kind: opBump, key: k, value: v} }
	flush := hInput{kind: opFlush}
	hit := func(v string) hOutput { return hOutput{res: resOK, value: v} }
	ok, miss, exists, unknown := hOutput{res: resOK}, hOutput{res: resMiss}, hOutput{res: resExists}, hOutput{res: resUnknown}
	origin := func(key string) (string, bool) {
		if strings.HasPrefix(key, "n") {
			return "", false
		}
		return "o-" + key + "-0", true
	}

	cases := []struct {
		name   string
		origin bool
		ops    []porcupine.Operation
		legal  bool
	}{
		{"hit after set", false, []porcupine.Operation{
			op(0, set("k", "a"), 0, ok, 10), op(1, get("k"), 20, hit("a"), 30)}, true},
		{"miss is always allowed", false, []porcupine.Operation{
			op(0, set("k", "a"), 0, ok, 10), op(1, get("k"), 20, miss, 30), op(1, get("k"), 40, hit("a"), 50)}, true},
		{"hit of a concurrent write", false, []porcupine.Operation{
			op(0, set("k", "a"), 0, ok, 10), op(0, set("k", "b"), 20, ok, 40), op(1, get("k"), 25, hit("b"), 30),
			op(2, get("k"), 21, hit("a"), 35)}, true},
		{"unknown write may land late", false, []porcupine.Operation{
			op(0, set("k", "a"), 0, ok, 10), op(1, set("k", "b"), 5, unknown, inf), op(2, get("k"), 20, hit("a"), 30),
			op(2, get("k"), 40, hit("b"), 50)}, true},
		{"incr and cas", false, []porcupine.Operation{
			op(0, set("n", "5"), 0, ok, 10), op(0, incr("n", 3), 20, hit("8"), 30), op(1, get("n"), 40, hit("8"), 50),
			op(1, cas("n", "8", "100"), 60, ok, 70), op(2, cas("n", "8", "200"), 80, exists, 90),
			op(2, incr("m", 1), 80, miss, 90), op(0, get("n"), 100, hit("100"), 110)}, true},
		{"incr wraps at 2^64", false, []porcupine.Operation{
			op(0, set("n", "18446744073709551615"), 0, ok, 10), op(0, incr("n", 2), 20, hit("1"), 30)}, true},
		{"origin: initial value, bump, fill after delete", true, []porcupine.Operation{
			op(0, get("k"), 0, hit("o-k-0"), 10), op(0, bump("k", "o-k-1"), 20, ok, 30),
			op(1, get("k"), 40, hit("o-k-1"), 50), op(1, set("k", "x"), 60, ok, 70), op(1, del("k"), 80, ok, 90),
			op(2, get("k"), 100, hit("o-k-1"), 110), op(2, get("n1"), 100, miss, 110)}, true},
		{"flush concurrent with a read", false, []porcupine.Operation{
			op(0, set("k", "a"), 0, ok, 10), op(1, flush, 20, ok, 40), op(2, get("k"), 30, hit("a"), 50),
			op(2, get("k"), 60, miss, 70)}, true},

		{"hit of an overwritten value", false, []porcupine.Operation{
			op(0, set("k", "a"), 0, ok, 10), op(0, set("k", "b"), 20, ok, 30), op(1, get("k"), 40, hit("a"), 50)}, false},
		{"hit after a delete", false, []porcupine.Operation{
			op(0, set("k", "a"), 0, ok, 10), op(0, del("k"), 20, ok, 30), op(1, get("k"), 40, hit("a"), 50)}, false},
		{"hit after flush_all", false, []porcupine.Operation{
			op(0, set("j", "b"), 0, ok, 10), op(0, set("k", "a"), 0, ok, 10), op(1, flush, 20, ok, 30),
			op(1, get("j"), 35, miss, 38), op(2, get("k"), 40, hit("a"), 50)}, false},
		{"value comes back after a newer one was read", false, []porcupine.Operation{
			op(0, set("k", "a"), 0, ok, 10), op(1, set("k", "b"), 5, unknown, inf), op(2, get("k"), 20, hit("b"), 30),
			op(2, get("k"), 40, hit("a"), 50)}, false},
		{"incr from a wrong base", false, []porcupine.Operation{
			op(0, set("n", "5"), 0, ok, 10), op(0, incr("n", 3), 20, hit("9"), 30)}, false},
		{"cas stored over another value", false, []porcupine.Operation{
			op(0, set("k", "a"), 0, ok, 10), op(1, set("k", "b"), 20, ok, 30), op(0, cas("k", "a", "c"), 40, ok, 50)}, false},
		{"hit of a value never written", false, []porcupine.Operation{
			op(1, get("k"), 40, hit("zz"), 50)}, false},
		{"origin: old version after the bump returned", true, []porcupine.Operation{
			op(0, bump("k", "o-k-1"), 0, ok, 10), op(1, get("k"), 20, hit("o-k-0"), 30)}, false},
		{"origin: no value for a key it does not have", true, []porcupine.Operation{
			op(1, get("n1"), 20, hit("o-n1-0"), 30)}, false},
	}
	for _, c := range cases {
		var init func(string) (string, bool)
		if c.origin {
			init = origin
		}
		model := cacheModel(init)
		got := porcupine.CheckOperations(model, c.ops)
		if got != c.legal {
			t.Errorf("%s: linearizable = %v, want %v", c.name, got, c.legal)
		}
		r := checkHistory(model, c.ops, 5*time.Second, "model")
		if (len(r.illegal) == 0) != c.legal {
			t.Errorf("%s: checkHistory found illegal keys %v, want legal=%v", c.name, r.illegal, c.legal)
		}
		if r.visualization != "" {
			os.Remove(r.visualization)
		}
	}
}
