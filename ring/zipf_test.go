package ring

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// zipf draws indices 0..n-1 with P(i) ∝ (i+1)^-s from a seeded PCG, for
// any s > 0 (math/rand's Zipf needs s > 1).
type zipf struct {
	*zipfDist
	rng *rand.Rand
}

// zipfDist is the distribution, shared by every zipf with the same n and s.
type zipfDist struct {
	cdf []float64
	pmf []float64
}

var zipfDists sync.Map // [2]float64{n, s} -> *zipfDist

func newZipf(n int, s float64, seed uint64) *zipf {
	z := &zipf{rng: rand.New(rand.NewPCG(seed, 0x5eed))}
	key := [2]float64{float64(n), s}
	if d, ok := zipfDists.Load(key); ok {
		z.zipfDist = d.(*zipfDist)
		return z
	}
	d := &zipfDist{cdf: make([]float64, n), pmf: make([]float64, n)}
	sum := 0.0
	for i := range n {
		d.pmf[i] = math.Pow(float64(i+1), -s)
		sum += d.pmf[i]
	}
	acc := 0.0
	for i := range n {
		d.pmf[i] /= sum
		acc += d.pmf[i]
		d.cdf[i] = acc
	}
	v, _ := zipfDists.LoadOrStore(key, d)
	z.zipfDist = v.(*zipfDist)
	return z
}

func (z *zipf) next() int {
	i, _ := slices.BinarySearch(z.cdf, z.rng.Float64())
	return min(i, len(z.cdf)-1)
}

// zipfPicks is the number of picks per TestZipf case: 10^6, or 10^5 under
// -race or -short, which keep every assertion.
func zipfPicks() int {
	if raceEnabled || testing.Short() {
		return 100_000
	}
	return 1_000_000
}

// zipfKeyspace is the number of distinct keys TestZipf draws from.
const zipfKeyspace = 100_000

var zipfKeyNames = func() []string {
	k := make([]string, zipfKeyspace)
	for i := range k {
		k[i] = "key:" + strconv.Itoa(i)
	}
	return k
}()

type zipfCase struct {
	s     float64
	nodes int
	eps   float64
	order Order
	mode  LoadMode
	// reserve, if set, replaces the Picker's spill reserve (-1: none).
	reserve float64
}

func (c zipfCase) String() string {
	return fmt.Sprintf("%v/%v/s=%.2f/n=%d/eps=%.2f", c.mode, c.order, c.s, c.nodes, c.eps)
}

type zipfResult struct {
	maxMean    float64 // most picks on a node / mean picks per node
	spilled    float64 // fraction of picks not sent to the owner
	minSpill   float64 // the fraction the popularity forces to spill
	violations int     // picks that left a node above its capacity
}

// runZipf sends picks Zipf-distributed requests through a Picker and
// checks every placement against the bound. Time advances 10 µs per pick
// and the half-life is a tenth of the run (a quarter when shortened). InFlight requests complete in
// FIFO order with 11 per node outstanding.
func runZipf(c zipfCase, picks int) zipfResult {
	nodes := make([]Node, c.nodes)
	for i := range nodes {
		nodes[i] = Node{ID: fmt.Sprintf("node-%02d", i)}
	}
	r := New(nodes, Config{})
	z := newZipf(zipfKeyspace, c.s, 1)

	// The minimum spill: whatever part of a node's primary share exceeds
	// its capacity share (1+ε)/n must go elsewhere.
	primaryShare := make([]float64, c.nodes)
	for k, key := range zipfKeyNames {
		i, _ := r.nodeIndex(r.Owner(key))
		primaryShare[i] += z.pmf[k]
	}
	var res zipfResult
	for i, s := range primaryShare {
		res.minSpill += max(0, s-(1+c.eps)*r.share[i])
	}

	now := time.Unix(1_700_000_000, 0)
	const step = 10 * time.Microsecond
	p, err := NewPicker(r, PickerConfig{
		Epsilon:  c.eps,
		Load:     c.mode,
		Order:    c.order,
		HalfLife: max(time.Duration(picks)*step/halfLives(picks), MinHalfLife),
		Now:      func() time.Time { return now },
	})
	if err != nil {
		panic(err)
	}
	if c.reserve < 0 {
		p.reserve = 0
	}
	st := p.state.Load()
	// The true Rate total: cells do not decay within a tick, so it is
	// their sum at the tick's start plus the picks since.
	trueTotal, lastTick := 0.0, uint32(0)
	window := make([]func(), 11*c.nodes)
	count := make([]int, c.nodes)
	spilled := 0
	for x := range picks {
		now = now.Add(step)
		id, primary, release, err := p.Pick(zipfKeyNames[z.next()])
		if err != nil {
			panic(err)
		}
		i, _ := r.nodeIndex(id)
		count[i]++
		if !primary {
			spilled++
		}

		// The bound, from the loads as they are now: the node's load
		// before this pick must have been below C. The total is the true
		// one, summed here, not the Picker's.
		var before, total float64
		if c.mode == InFlight {
			before = float64(st.loads[i].inflight.Load()) - 1
			total = float64(p.inflight.Load()) - 1
		} else {
			t := p.tick()
			if t != lastTick {
				trueTotal, lastTick = -1, t // this pick's 1 is in the cells already
				for _, nl := range st.loads {
					trueTotal += nl.rate.at(t)
				}
			}
			before = st.loads[i].rate.at(t) - 1
			total = trueTotal
			trueTotal++
		}
		capacity := math.Ceil((1 + c.eps) * (total + 1) * r.share[i] * (1 + 1e-9))
		if before >= capacity+1e-3 {
			res.violations++
		}

		if c.mode == InFlight {
			if done := window[x%len(window)]; done != nil {
				done()
			}
			window[x%len(window)] = release
		}
	}
	res.spilled = float64(spilled) / float64(picks)
	res.maxMean = float64(slices.Max(count)) / (float64(picks) / float64(c.nodes))
	return res
}

// TestZipf is the bound's acceptance test: Zipf traffic over 3, 10 and 50
// nodes, for every ε, spill order and load mode.
func TestZipf(t *testing.T) {
	t.Parallel()
	picks := zipfPicks()
	var cases []zipfCase
	for _, mode := range []LoadMode{Rate, InFlight} {
		for _, order := range []Order{RingWalk, Probe} {
			if mode == InFlight && order == Probe {
				continue
			}
			for _, s := range []float64{0.95, 1.1, 1.3} {
				for _, n := range []int{3, 10, 50} {
					for _, eps := range []float64{0.05, 0.15, 0.25} {
						cases = append(cases, zipfCase{s: s, nodes: n, eps: eps, order: order, mode: mode})
					}
				}
			}
		}
	}
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			res := runZipf(c, picks)
			t.Logf("%v: max/mean %.3f  spilled %.4f  minimum %.4f  ratio %.2f  violations %d",
				c, res.maxMean, res.spilled, res.minSpill, res.spilled/res.minSpill, res.violations)
			if res.violations != 0 {
				t.Errorf("%d of %d picks left a node above its capacity", res.violations, picks)
			}
			if c.mode != Rate {
				return // in-flight counts bound concurrency, not the share of picks
			}
			if limit := 1 + c.eps + 0.01; res.maxMean > limit {
				t.Errorf("max/mean picks per node %.3f, want ≤ %.3f", res.maxMean, limit)
			}
			// 0.002 absolute: when the minimum is 0, noise around a node
			// just under capacity still spills a few requests.
			if limit := 1.25*res.minSpill + 0.002; res.spilled > limit {
				t.Errorf("spilled %.4f, want ≤ 1.25 × minimum %.4f", res.spilled, res.minSpill)
			}
		})
	}
}

// TestZipfUnbounded shows what the bound prevents: with ε = +Inf every
// request goes to its owner, and the hottest node takes far more than its
// share.
func TestZipfUnbounded(t *testing.T) {
	t.Parallel()
	picks := zipfPicks()
	for _, s := range []float64{0.95, 1.1, 1.3} {
		for _, n := range []int{3, 10, 50} {
			c := zipfCase{s: s, nodes: n, eps: math.Inf(1)}
			t.Run(c.String(), func(t *testing.T) {
				t.Parallel()
				res := runZipf(c, picks)
				t.Logf("%v: hottest node takes %.2f× the mean", c, res.maxMean)
				if res.spilled != 0 || res.violations != 0 {
					t.Errorf("ε=+Inf spilled %.4f with %d violations, want plain consistent hashing", res.spilled, res.violations)
				}
			})
		}
	}
}

// TestZipfWithoutReserve shows why spills stop short of C (see spill):
// without the reserve, overflow displaces the absorbing nodes' own keys.
func TestZipfWithoutReserve(t *testing.T) {
	t.Parallel()
	for _, c := range []zipfCase{
		{s: 0.95, nodes: 50, eps: 0.05},
		{s: 1.1, nodes: 10, eps: 0.05},
		{s: 1.3, nodes: 3, eps: 0.05},
	} {
		with := runZipf(c, zipfPicks())
		c.reserve = -1
		without := runZipf(c, zipfPicks())
		t.Logf("%v: spilled/minimum %.2f with the reserve, %.2f without", c, with.spilled/with.minSpill, without.spilled/without.minSpill)
		if with.spilled > without.spilled {
			t.Errorf("%v: the reserve spilled more (%.4f) than none (%.4f)", c, with.spilled, without.spilled)
		}
	}
}

func halfLives(picks int) time.Duration {
	if picks < 1_000_000 {
		return 4
	}
	return 10
}
