package ring

import (
	"errors"
	"math"
	"strconv"
	"testing"
	"testing/synctest"
	"time"
)

func ringOf(ids ...string) *Ring {
	nodes := make([]Node, len(ids))
	for i, id := range ids {
		nodes[i] = Node{ID: id}
	}
	return New(nodes, Config{})
}

// fakeClock is a PickerConfig.Now that moves only when told.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

func mustPicker(t testing.TB, r *Ring, cfg PickerConfig) *Picker {
	t.Helper()
	p, err := NewPicker(r, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNewPickerRejects(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  PickerConfig
	}{
		{"negative-epsilon", PickerConfig{Epsilon: -0.1}},
		{"nan-epsilon", PickerConfig{Epsilon: math.NaN()}},
		{"short-half-life", PickerConfig{HalfLife: time.Millisecond}},
		{"negative-half-life", PickerConfig{HalfLife: -time.Second}},
		{"unknown-mode", PickerConfig{Load: 2}},
		{"unknown-order", PickerConfig{Order: 2}},
	} {
		if _, err := NewPicker(nil, c.cfg); err == nil {
			t.Errorf("%s: NewPicker accepted %+v", c.name, c.cfg)
		}
	}
	if _, err := NewPicker(nil, PickerConfig{Epsilon: math.Inf(1), HalfLife: MinHalfLife}); err != nil {
		t.Errorf("NewPicker rejected ε=+Inf: %v", err)
	}
}

func TestPickEmptyRing(t *testing.T) {
	for _, mode := range []LoadMode{Rate, InFlight} {
		p := mustPicker(t, nil, PickerConfig{Load: mode})
		for _, r := range []*Ring{nil, New(nil, Config{}), New([]Node{{ID: ""}}, Config{})} {
			p.Swap(r)
			id, primary, release, err := p.Pick("k")
			if !errors.Is(err, ErrNoNodes) || id != "" || primary || release == nil {
				t.Fatalf("%v: Pick on empty ring = %q, %v, %v", mode, id, primary, err)
			}
			release()
			if got := p.Loads(); len(got) != 0 {
				t.Errorf("Loads() on empty ring = %v", got)
			}
			if p.total() != 0 {
				t.Errorf("total() on empty ring = %v", p.total())
			}
		}
		p.Swap(ringOf("a"))
		if id, primary, _, err := p.Pick("k"); id != "a" || !primary || err != nil {
			t.Errorf("%v: after Swap Pick = %q, %v, %v", mode, id, primary, err)
		}
	}
}

// TestPickUnbounded: ε = +Inf is plain consistent hashing, whatever the load.
func TestPickUnbounded(t *testing.T) {
	r := ringOf("a", "b", "c")
	p := mustPicker(t, r, PickerConfig{Epsilon: math.Inf(1), Load: InFlight})
	for i := range 10000 {
		key := strconv.Itoa(i % 7) // few keys, never released: owners pile up
		if id, primary, _, _ := p.Pick(key); id != r.Owner(key) || !primary {
			t.Fatalf("Pick(%s) = %q, %v; want owner %q", key, id, primary, r.Owner(key))
		}
	}
}

func loadOf(p *Picker, id string) float64 {
	for _, l := range p.Loads() {
		if l.ID == id {
			return l.Load
		}
	}
	return math.NaN()
}

func TestInFlight(t *testing.T) {
	p := mustPicker(t, ringOf("a"), PickerConfig{Load: InFlight})
	var releases []func()
	for range 3 {
		_, _, release, _ := p.Pick("k")
		releases = append(releases, release)
	}
	if loadOf(p, "a") != 3 || p.total() != 3 {
		t.Fatalf("after 3 picks: load %v, total %v", loadOf(p, "a"), p.total())
	}
	releases[0]()
	releases[1]()
	if loadOf(p, "a") != 1 || p.total() != 1 {
		t.Fatalf("after 2 releases: load %v, total %v", loadOf(p, "a"), p.total())
	}
	p.Swap(ringOf("a", "b")) // a survives with its count
	if loadOf(p, "a") != 1 || loadOf(p, "b") != 0 {
		t.Fatalf("after Swap: a %v, b %v", loadOf(p, "a"), loadOf(p, "b"))
	}
	p.Swap(ringOf("b")) // a leaves with one request outstanding
	if p.total() != 1 {
		t.Fatalf("total after a left = %v, want its outstanding 1", p.total())
	}
	releases[2]()
	if p.total() != 0 {
		t.Fatalf("total after the last release = %v", p.total())
	}
	// C = ceil((1+0.25)·(0+1)·1) = 2
	if l := p.Loads(); len(l) != 1 || l[0].ID != "b" || l[0].Capacity != 2 {
		t.Errorf("Loads() = %+v", l)
	}
}

func TestRateDecay(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1e9, 0)}
	p := mustPicker(t, ringOf("a"), PickerConfig{HalfLife: time.Second, Now: clock.Now})
	for range 1000 {
		p.Pick("k")
	}
	for _, c := range []struct {
		advance time.Duration
		want    float64
	}{
		{0, 1000},
		{time.Second / 256, 1000}, // half a tick: cells change by whole ticks
		{time.Second - time.Second/256, 500},
		{2 * time.Second, 125},
		{64 * time.Second, 0}, // older than float32 can tell apart from 0
	} {
		clock.now = clock.now.Add(c.advance)
		if got := loadOf(p, "a"); math.Abs(got-c.want) > 1e-3*c.want {
			t.Errorf("after +%v: load %v, want %v", c.advance, got, c.want)
		}
	}
	p.Pick("k")
	if got := loadOf(p, "a"); got != 1 {
		t.Errorf("a pick after full decay: load %v, want 1", got)
	}
}

// TestRateTotal checks the once-per-tick total: it is the sum of the
// cells at the start of the tick, and a walk that finds every node full
// brings it up to date.
func TestRateTotal(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1e9, 0)}
	p := mustPicker(t, ringOf("a", "b", "c", "d"), PickerConfig{Epsilon: 0.05, HalfLife: time.Second, Now: clock.Now})
	if p.total() != 0 {
		t.Fatalf("initial total %v", p.total())
	}
	for i := range 400 {
		p.Pick(strconv.Itoa(i))
	}
	// Within the first tick the total started at 0; every time all four
	// nodes filled up, a full walk refreshed it, so it lags by less than
	// one round of growth.
	if got := p.total(); got < 400/1.05-4 || got > 400 {
		t.Errorf("total in first tick = %v, want about 400", got)
	}
	clock.now = clock.now.Add(time.Second)
	if got := p.total(); math.Abs(got-200) > 0.01 {
		t.Errorf("total one half-life later = %v, want 200", got)
	}
	sum := 0.0
	for _, l := range p.Loads() {
		sum += l.Load
		if l.Load >= l.Capacity {
			t.Errorf("%s: load %v at capacity %v", l.ID, l.Load, l.Capacity)
		}
	}
	if math.Abs(sum-200) > 0.01 {
		t.Errorf("loads sum to %v, want 200", sum)
	}
}

func TestSwapKeepsRate(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1e9, 0)}
	p := mustPicker(t, ringOf("a", "b", "c"), PickerConfig{Epsilon: math.Inf(1), Now: clock.Now})
	for i := range 300 {
		p.Pick(strconv.Itoa(i))
	}
	before := map[string]float64{}
	for _, l := range p.Loads() {
		before[l.ID] = l.Load
	}
	p.Swap(ringOf("a", "b", "d"))
	after := p.Loads()
	if len(after) != 3 || after[0].Load != before["a"] || after[1].Load != before["b"] || after[2].Load != 0 {
		t.Errorf("loads %v before Swap, %+v after", before, after)
	}
	if p.Ring().Len() != 3 {
		t.Errorf("Ring() has %d nodes", p.Ring().Len())
	}
}

// TestWeightedCapacity: a node of weight w gets w times the capacity.
func TestWeightedCapacity(t *testing.T) {
	nodes := []Node{{"a", 1}, {"b", 2}, {"c", 3}, {"d", 4}}
	r := New(nodes, Config{})
	clock := &fakeClock{now: time.Unix(1e9, 0)}
	const eps, picks = 0.1, 200_000
	p := mustPicker(t, r, PickerConfig{Epsilon: eps, HalfLife: 200 * time.Millisecond, Now: clock.Now})
	z := newZipf(10_000, 1.1, 9)
	count := map[string]int{}
	for range picks {
		clock.now = clock.now.Add(10 * time.Microsecond)
		id, _, _, _ := p.Pick(zipfKeyNames[z.next()])
		count[id]++
	}
	for _, n := range nodes {
		ratio := float64(count[n.ID]) / (picks * float64(n.Weight) / 10)
		t.Logf("%s (weight %d): %.3f of its weighted share", n.ID, n.Weight, ratio)
		if ratio > 1+eps+0.01 {
			t.Errorf("%s got %.3f of its weighted share, want ≤ %.2f", n.ID, ratio, 1+eps+0.01)
		}
	}
}

// TestCoarseClock runs the default rate clock in a synctest bubble: it
// ticks while Picks happen and stops its timer once they stop.
func TestCoarseClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPicker(t, ringOf("a", "b"), PickerConfig{HalfLife: time.Second})
		c := p.clock
		if c.armed.Load() {
			t.Fatal("timer armed before any Pick")
		}
		p.Pick("k")
		if !c.armed.Load() || c.tick.Load() != 0 {
			t.Fatalf("after a Pick: armed %v, tick %d", c.armed.Load(), c.tick.Load())
		}
		for i := 1; i <= 3; i++ { // keep picking: the clock keeps ticking
			time.Sleep(c.period)
			synctest.Wait()
			if got := c.tick.Load(); got != uint32(i) {
				t.Fatalf("after %d periods tick = %d", i, got)
			}
			p.Pick("k")
		}
		time.Sleep(5 * c.period) // idle: one more tick, then the timer stops
		synctest.Wait()
		if c.armed.Load() {
			t.Fatal("timer still armed after idle periods")
		}
		stale := c.tick.Load()
		time.Sleep(10 * c.period)
		if c.tick.Load() != stale {
			t.Fatal("tick moved with the timer stopped")
		}
		p.Pick("k") // wakes the clock with the current tick
		if got, want := c.tick.Load(), uint32(3+5+10); got != want || !c.armed.Load() {
			t.Fatalf("after waking: tick %d (want %d), armed %v", got, want, c.armed.Load())
		}
		time.Sleep(3 * c.period) // let the timer wind down inside the bubble
	})
}

func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates") // checked by every non-race run and the benchmarks
	}
	r := benchRing(100)
	big := benchRing(1100) // walks past spill's stack bitset
	keys := benchKeys[:64]
	i := 0
	if got := testing.AllocsPerRun(1000, func() { sinkID = r.Owner(keys[i%64]); i++ }); got != 0 {
		t.Errorf("Owner makes %v allocs", got)
	}
	for _, ring := range []*Ring{r, big} {
		for _, mode := range []LoadMode{Rate, InFlight} {
			for _, order := range []Order{RingWalk, Probe} {
				// ε tiny and no releases: almost every pick spills.
				p := mustPicker(t, ring, PickerConfig{Load: mode, Order: order, Epsilon: 1e-9})
				i := 0
				got := testing.AllocsPerRun(2000, func() {
					id, _, release, _ := p.Pick(keys[i%8])
					if i%3 == 0 {
						release()
					}
					sinkID = id
					i++
				})
				if got != 0 {
					t.Errorf("%d nodes %v %v: Pick makes %v allocs", ring.Len(), mode, order, got)
				}
			}
		}
	}
}
