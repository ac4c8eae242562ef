package ring

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

func uniformKeys(m int) []string {
	keys := make([]string, m)
	for i := range keys {
		keys[i] = fmt.Sprintf("object/%d", i)
	}
	return keys
}

func tenNodes() []Node {
	nodes := make([]Node, 10)
	for i := range nodes {
		nodes[i] = Node{ID: fmt.Sprintf("cache-%d", i)}
	}
	return nodes
}

func TestAssignBound(t *testing.T) {
	nodes := []Node{{"a", 1}, {"b", 1}, {"c", 2}, {"d", 3}, {"e", 1}}
	r := New(nodes, Config{VNodes: 20}) // few vnodes: uneven arcs, so the bound has work to do
	keys := uniformKeys(20_000)
	for _, eps := range []float64{-1, 0, 0.05, 0.25} {
		got := r.Assign(keys, eps)
		count := map[string]int{}
		for i, id := range got {
			if id == "" {
				t.Fatalf("ε=%v: key %d unassigned", eps, i)
			}
			count[id]++
		}
		for _, n := range nodes {
			limit := math.Ceil((1 + max(eps, 0)) * float64(len(keys)) * float64(n.Weight) / 8)
			if float64(count[n.ID]) > limit {
				t.Errorf("ε=%v: %s has %d keys, capacity %v", eps, n.ID, count[n.ID], limit)
			}
		}
		if again := r.Assign(keys, eps); !slices.Equal(got, again) {
			t.Errorf("ε=%v: Assign is not deterministic", eps)
		}
	}
	for i, id := range r.Assign(keys, math.Inf(1)) {
		if id != r.Owner(keys[i]) {
			t.Fatalf("ε=+Inf: key %s on %s, owner %s", keys[i], id, r.Owner(keys[i]))
		}
	}
}

func moved(a, b []string) float64 {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return float64(n) / float64(len(a))
}

// TestMovement: adding or removing one of n nodes moves about 1/n of the
// keys, and bounded loads at ε ≥ 0.15 move at most 1.1 times as many. With
// 20 virtual nodes, logged only, the arcs are uneven enough for the bound
// to reshuffle keys and move more: the paper's O(1/ε²) at work.
func TestMovement(t *testing.T) {
	keys := uniformKeys(100_000)
	if raceEnabled {
		keys = keys[:20_000]
	}
	ten := tenNodes()
	for _, vn := range []int{DefaultVNodes, 20} {
		before := New(ten, Config{VNodes: vn})
		for _, c := range []struct {
			name  string
			after *Ring
			n     int // 1/n of the keys should move
		}{
			{"add", New(append(slices.Clone(ten), Node{ID: "cache-10"}), Config{VNodes: vn}), 11},
			{"remove", New(ten[1:], Config{VNodes: vn}), 10},
		} {
			plain := moved(before.Assign(keys, math.Inf(1)), c.after.Assign(keys, math.Inf(1)))
			t.Logf("%d vnodes, %s one of 10: plain consistent hashing moves %.1f%% (1/%d = %.1f%%)", vn, c.name, 100*plain, c.n, 100/float64(c.n))
			if vn == DefaultVNodes && (plain < 0.5/float64(c.n) || plain > 1.5/float64(c.n)) {
				t.Errorf("%s: plain moved %.3f, want about 1/%d", c.name, plain, c.n)
			}
			for _, eps := range []float64{0.05, 0.15, 0.25} {
				bounded := moved(before.Assign(keys, eps), c.after.Assign(keys, eps))
				t.Logf("%d vnodes, %s one of 10: ε=%.2f moves %.1f%% (%.2f× plain)", vn, c.name, eps, 100*bounded, bounded/plain)
				if vn == DefaultVNodes && eps >= 0.15 && bounded > 1.1*plain {
					t.Errorf("%d vnodes, %s ε=%.2f: moved %.3f, want ≤ 1.1 × plain %.3f", vn, c.name, eps, bounded, plain)
				}
			}
		}
	}
}
