package server

import (
	"math"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestCheckAfterHealLateWrite: the partition clause's strict check after
// settled takes a write whose outcome was unknown during the cut as one
// that may land after the heal (a long fault run saw a forwarded set
// applied 26.7 s after its call, out of the sender's TCP retransmission
// queue), and still refuses a value a node held, acknowledged, from
// before the heal.
func TestCheckAfterHealLateWrite(t *testing.T) {
	const ms = int64(time.Millisecond)
	pt := partitionTimes{cut: 1000 * ms, cutDone: 1001 * ms, healed: 3000 * ms, settled: 4000 * ms, strict: true}
	op := func(client int, in hInput, call, ret int64, out hOutput) porcupine.Operation {
		o := porcupine.Operation{ClientId: client, Input: in, Call: call * ms, Output: out, Return: ret * ms, Metadata: "n1"}
		if out.res == resUnknown {
			o.Return = math.MaxInt64
		}
		return o
	}
	set := func(v string) hInput { return hInput{kind: opSet, key: "k1", value: v} }
	get := hInput{kind: opGet, key: "k1"}
	hit := func(v string) hOutput { return hOutput{res: resOK, value: v} }
	ok, unknown := hOutput{res: resOK}, hOutput{res: resUnknown}
	before := []porcupine.Operation{
		op(0, set("c0-before"), 500, 501, ok),
		op(1, set("c1-late"), 1500, 0, unknown), // timed out across the cut
		op(2, set("c2-held"), 1600, 1601, ok),   // acknowledged during the cut
		op(0, set("c0-healed"), 3500, 3501, ok), // since the heal
		op(0, get, 3600, 3601, hit("c0-healed")),
	}
	for _, tc := range []struct {
		name  string
		after []porcupine.Operation
		legal bool
	}{
		{"late write lands after settled", []porcupine.Operation{
			op(3, get, 4100, 4101, hit("c0-healed")),
			op(3, get, 4200, 4201, hit("c1-late")),
			op(3, get, 4300, 4301, hit("c1-late")),
		}, true},
		{"late write landed before settled", []porcupine.Operation{
			op(3, get, 4100, 4101, hit("c1-late")),
		}, true},
		{"late write lands after a later write", []porcupine.Operation{
			op(4, set("c4-after"), 4200, 4201, ok),
			op(3, get, 4300, 4301, hit("c4-after")),
			op(3, get, 4400, 4401, hit("c1-late")),
		}, true},
		{"late write lands once", []porcupine.Operation{
			op(3, get, 4100, 4101, hit("c1-late")),
			op(4, set("c4-after"), 4200, 4201, ok),
			op(3, get, 4300, 4301, hit("c4-after")),
			op(3, get, 4400, 4401, hit("c1-late")),
		}, false},
		{"acknowledged write from the cut", []porcupine.Operation{
			op(3, get, 4100, 4101, hit("c2-held")),
		}, false},
		{"acknowledged write from before the cut", []porcupine.Operation{
			op(3, get, 4100, 4101, hit("c0-before")),
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops := append(append([]porcupine.Operation(nil), before...), tc.after...)
			r, _ := checkAfterHeal(ops, pt, nil, DefaultCopyTTL, 10*time.Second)
			if legal := len(r.illegal) == 0; legal != tc.legal {
				t.Errorf("legal %v, want %v (illegal %v, timed out %v)", legal, tc.legal, r.illegal, r.timedOut)
			}
		})
	}
}
