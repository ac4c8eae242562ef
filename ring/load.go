package ring

import (
	"math"
	"strconv"
	"sync/atomic"
	"time"
)

// LoadMode is what a Picker counts as a node's load. The zero value is Rate.
type LoadMode uint8

const (
	// Rate counts requests sent to the node, decayed exponentially with
	// the Picker's HalfLife: an EWMA of the request rate, in units of
	// requests × HalfLife/ln 2 (multiply by ln 2 / HalfLife for requests
	// per second). It is the default because cache requests finish in
	// microseconds: in-flight counts are then mostly 0 or 1, and a bound on
	// them mostly measures noise. In a reference simulation with about 11
	// requests in flight per node the in-flight bound spilled 20.6 % of
	// requests where 2.6 % was the minimum the skew forced; in TestZipf it
	// spills 1.3 to 5.7 times the minimum, Rate 1.01 to 1.11 times.
	Rate LoadMode = iota
	// InFlight counts requests picked and not yet released: the paper's
	// and HAProxy's model. Call the release function of every Pick exactly
	// once, when the request completes.
	InFlight
)

// String returns "rate" or "inflight".
func (m LoadMode) String() string {
	switch m {
	case Rate:
		return "rate"
	case InFlight:
		return "inflight"
	}
	return "LoadMode(" + strconv.Itoa(int(m)) + ")"
}

// ticksPerHalfLife is the resolution of the rate clock. A cell's value
// decays by 2^(-1/128) ≈ 0.54 % per tick, so the estimate moves almost as
// smoothly as a continuous EWMA.
const ticksPerHalfLife = 128

// fineDecay[a] = 2^(-a/ticksPerHalfLife) for a tick age below one
// half-life; halves[q] = 2^-q for whole half-lives. After 64 half-lives a
// value has lost 64 bits and float32 keeps 24 of them, so it reads as zero.
var fineDecay, halves = func() (f [ticksPerHalfLife]float32, h [64]float32) {
	for a := range f {
		f[a] = float32(math.Exp2(-float64(a) / ticksPerHalfLife))
	}
	for q := range h {
		h[q] = float32(math.Exp2(-float64(q)))
	}
	return f, h
}()

// maxSkew is how far (in ticks) a cell's tick may lie ahead of a reader's,
// because a racing Pick read the clock a little later. Ticks are 32 bits
// and wrap after 2^32 ticks (39 days at MinHalfLife, 1.1 years at the
// default); a cell untouched for 2^31 ticks or more looks like it lies in
// the future, and it reads as expired, which it is, rather than as current.
// Only a cell untouched for within maxSkew ticks of a whole wrap would read
// its old value back.
const maxSkew = 1 << 10

// rateCell is a Rate load: the tick of its last update (high 32 bits)
// packed with its float32 value as of that tick (low 32). Decay is applied
// lazily by whoever reads or updates the cell next, and one 64-bit word
// keeps the pair consistent without a lock. float32 adds 1 exactly up to
// 2^24 (16.7 M), i.e. rates up to about 10 M/s at a one-second half-life.
type rateCell struct{ v atomic.Uint64 }

func packRate(t uint32, x float32) uint64 { return uint64(t)<<32 | uint64(math.Float32bits(x)) }

// rateAt decays a packed rate cell to tick t.
func rateAt(v uint64, t uint32) float32 {
	x := math.Float32frombits(uint32(v))
	age := int32(t - uint32(v>>32))
	switch {
	case age <= 0 && age > -maxSkew:
		return x // current, or updated by a racing Pick with a newer tick
	case age > 0 && int(age) < ticksPerHalfLife*len(halves):
		return x * fineDecay[age%ticksPerHalfLife] * halves[age/ticksPerHalfLife]
	}
	return 0
}

// at returns the cell's value at tick t.
func (c *rateCell) at(t uint32) float64 { return float64(rateAt(c.v.Load(), t)) }

// tryInc counts one request if the cell is already at tick t, as it is
// for all but the first request to a node in each tick. Small enough to
// inline; inc handles the rest.
func (c *rateCell) tryInc(t uint32) bool {
	old := c.v.Load()
	return uint32(old>>32) == t && c.v.CompareAndSwap(old, packRate(t, math.Float32frombits(uint32(old))+1))
}

// inc counts one request at tick t.
func (c *rateCell) inc(t uint32) {
	for {
		old := c.v.Load()
		if age := int32(t - uint32(old>>32)); age < 0 && age > -maxSkew {
			t = uint32(old >> 32) // a racing Pick read a newer tick: count at that one
		}
		if c.v.CompareAndSwap(old, packRate(t, rateAt(old, t)+1)) {
			return
		}
	}
}

// The Picker's view of the loads.

// tick returns the rate clock's current tick (unused in InFlight mode).
func (p *Picker) tick() uint32 {
	if c := p.clock; c != nil && c.used.Load() {
		return c.tick.Load() // the fast path, inlined into Pick
	}
	return p.slowTick()
}

func (p *Picker) slowTick() uint32 {
	switch {
	case p.clock != nil:
		return p.clock.now()
	case p.now != nil:
		d := p.now().Sub(p.epoch)
		if d < 0 {
			return 0
		}
		return uint32(d / p.tickLen)
	}
	return 0
}

// loadsAt returns the total load and node n's load at tick t.
func (p *Picker) loadsAt(st *pickState, n int32, t uint32) (total, l float64) {
	if p.mode == Rate {
		return p.rateTotal(st, t), st.loads[n].rate.at(t)
	}
	return float64(p.inflight.Load()), float64(st.loads[n].inflight.Load())
}

// load returns node n's load at tick t.
func (p *Picker) load(st *pickState, n int32, t uint32) float64 {
	if p.mode == Rate {
		return st.loads[n].rate.at(t)
	}
	return float64(st.loads[n].inflight.Load())
}

// rateTotal returns the Rate total L at tick t. Cells do not decay within
// a tick, so the sum of the nodes' cells at the start of a tick is exact
// then; the first Pick of each tick computes it (O(n), once per tick) and
// the others read it with one atomic load. Requests picked later in the
// tick are not in L until the next one: L is low by at most one tick's
// worth of traffic, 2^(1/128)-1 ≈ 0.54 % in a steady state, which makes the
// bound that much stricter, never looser (when traffic jumps, spill
// refreshes L). What this buys: a Pick writes only its node's cell, not a
// total that every core would fight over, so parallel Picks to different
// nodes share no written cache line.
func (p *Picker) rateTotal(st *pickState, t uint32) float64 {
	v := p.sum.Load()
	if uint32(v>>32) != t {
		return p.resum(st, t)
	}
	return float64(math.Float32frombits(uint32(v)))
}

// resum sums the cells for a new tick t, or if another Pick has claimed
// that, returns the last sum decayed to t meanwhile.
func (p *Picker) resum(st *pickState, t uint32) float64 {
	v := p.sum.Load()
	c := p.summing.Load()
	if int32(t-c) <= 0 || !p.summing.CompareAndSwap(c, t) {
		return float64(rateAt(v, t))
	}
	var total float64
	for _, nl := range st.loads {
		total += nl.rate.at(t)
	}
	p.sum.Store(packRate(t, float32(total)))
	return total
}

// nodeLoad is one node's load and its release function, built once when
// the node first appears so that Pick returns it without allocating. It
// fills a cache line, so that picks to different nodes do not contend.
type nodeLoad struct {
	rate     rateCell     // Rate
	inflight atomic.Int64 // InFlight
	release  func()
	_        [64 - 8 - 8 - 8]byte
}

func noRelease() {}

// coarseClock is the rate clock when no Now is configured. time.Now costs
// 25-45 ns, more than the rest of a Pick; this clock costs two atomic loads.
// A timer refreshes the tick every period while Picks are happening and
// stops after a period without any, so an idle Picker holds no timer and
// needs no Close.
type coarseClock struct {
	tick    atomic.Uint32
	used    atomic.Bool // a Pick read the tick since the timer last fired
	armed   atomic.Bool // the timer is scheduled
	epoch   time.Time
	tickLen time.Duration
	period  time.Duration
	timer   *time.Timer
}

func newCoarseClock(tickLen time.Duration) *coarseClock {
	c := &coarseClock{epoch: time.Now(), tickLen: tickLen, period: max(tickLen, time.Millisecond)}
	c.timer = time.AfterFunc(time.Hour, c.fire)
	c.timer.Stop()
	return c
}

// now returns the current tick, at most one period stale while in use.
func (c *coarseClock) now() uint32 {
	if !c.used.Load() {
		c.wake()
	}
	return c.tick.Load()
}

// wake marks the clock used and makes sure its timer runs.
func (c *coarseClock) wake() {
	c.used.Store(true)
	c.arm()
}

func (c *coarseClock) read() uint32 { return uint32(time.Since(c.epoch) / c.tickLen) }

// arm brings the tick up to date and schedules the timer, unless it is
// already scheduled.
func (c *coarseClock) arm() {
	if c.armed.CompareAndSwap(false, true) {
		c.tick.Store(c.read())
		c.timer.Reset(c.period)
	}
}

// fire runs on the timer. Interleaving with now: if a Pick sets used after
// the Swap below saw false, either its arm finds armed already cleared and
// schedules the timer, or it finds armed still set and fire's own re-check
// of used schedules it. Either way a used clock keeps ticking.
func (c *coarseClock) fire() {
	c.tick.Store(c.read())
	if c.used.Swap(false) {
		c.timer.Reset(c.period)
		return
	}
	c.armed.Store(false)
	if c.used.Load() {
		c.arm()
	}
}
