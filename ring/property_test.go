package ring

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestPickMembership is the property test: under random memberships,
// weights, vnode counts, modes, orders and Swaps, Pick returns a member of
// the ring it read, and never panics.
func TestPickMembership(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	rounds := 300
	if raceEnabled || testing.Short() {
		rounds = 60
	}
	for round := range rounds {
		mode := LoadMode(rng.IntN(2))
		cfg := PickerConfig{Load: mode, Order: Order(rng.IntN(2)), Epsilon: []float64{1e-9, 0.05, 1, math.Inf(1)}[rng.IntN(4)]}
		p := mustPicker(t, nil, cfg)
		for range 5 {
			nodes := make([]Node, rng.IntN(8))
			for i := range nodes {
				nodes[i] = Node{ID: fmt.Sprintf("n%d", rng.IntN(12)), Weight: rng.IntN(4)}
			}
			r := New(nodes, Config{VNodes: 1 + rng.IntN(20)})
			p.Swap(r)
			for range 200 {
				key := strconv.Itoa(rng.IntN(50))
				id, primary, release, err := p.Pick(key)
				if r.Len() == 0 {
					if !errors.Is(err, ErrNoNodes) {
						t.Fatalf("round %d: empty ring gave %q, %v", round, id, err)
					}
					continue
				}
				if _, ok := r.nodeIndex(id); !ok || err != nil {
					t.Fatalf("round %d: Pick returned %q (%v), members %v", round, id, err, r.Nodes())
				}
				if primary != (id == r.Owner(key)) {
					t.Fatalf("round %d: Pick(%s) = %q, primary %v; owner %q", round, key, id, primary, r.Owner(key))
				}
				if mode == InFlight && rng.IntN(2) == 0 {
					release()
				}
			}
		}
	}
}

func FuzzPick(f *testing.F) {
	f.Add("a,b,c", "key", uint8(20), uint8(0), false, false)
	f.Add("", "key", uint8(3), uint8(1), true, true)
	f.Add(",,", "", uint8(3), uint8(1), true, false)
	f.Add("x,x,y", "\x00\xff", uint8(200), uint8(2), true, true)
	f.Fuzz(func(t *testing.T, members, key string, picks, vnodes uint8, inflight, probe bool) {
		var nodes []Node
		ids := map[string]bool{}
		for i, id := range strings.Split(members, ",") {
			nodes = append(nodes, Node{ID: id, Weight: i % 3})
			if id != "" {
				ids[id] = true
			}
		}
		cfg := PickerConfig{Epsilon: 0.01}
		if inflight {
			cfg.Load = InFlight
		}
		if probe {
			cfg.Order = Probe
		}
		r := New(nodes, Config{VNodes: int(vnodes % 8)})
		p := mustPicker(t, r, cfg)
		for i := range int(picks) {
			id, _, release, err := p.Pick(key + strconv.Itoa(i%5))
			if len(ids) == 0 {
				if !errors.Is(err, ErrNoNodes) {
					t.Fatalf("no members: Pick = %q, %v", id, err)
				}
				continue
			}
			if err != nil || !ids[id] {
				t.Fatalf("Pick = %q, %v; members %q", id, err, members)
			}
			if i%2 == 0 {
				release()
			}
		}
	})
}

// TestConcurrent picks from many goroutines while another swaps rings; run
// it with -race. Every pick must name a member of one of the two rings,
// and once everything is released the in-flight counts are back at zero.
func TestConcurrent(t *testing.T) {
	r1, r2 := ringOf("a", "b", "c"), ringOf("b", "c", "d", "e")
	for _, mode := range []LoadMode{Rate, InFlight} {
		p := mustPicker(t, r1, PickerConfig{Load: mode, Epsilon: 0.01})
		var wg sync.WaitGroup
		stop := make(chan struct{})
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p.Swap([]*Ring{r1, r2}[i%2])
			}
		})
		var pickers sync.WaitGroup
		for g := range 4 {
			pickers.Go(func() {
				for i := range 5000 {
					id, _, release, err := p.Pick(strconv.Itoa(g*7919 + i%97))
					if err != nil || !slices.Contains([]string{"a", "b", "c", "d", "e"}, id) {
						t.Errorf("Pick = %q, %v", id, err)
						return
					}
					release()
				}
			})
		}
		pickers.Wait()
		close(stop)
		wg.Wait()
		if mode == InFlight {
			p.Swap(r1)
			if p.total() != 0 {
				t.Errorf("in flight after all releases: %v", p.total())
			}
			p.Swap(r2)
			for _, l := range p.Loads() {
				if l.Load != 0 {
					t.Errorf("%s: %v in flight after all releases", l.ID, l.Load)
				}
			}
		}
	}
}
