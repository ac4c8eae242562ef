package ring

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// ErrNoNodes is returned by Pick when the ring is empty.
var ErrNoNodes = errors.New("ring: no nodes")

// DefaultEpsilon is the overload a Picker allows when PickerConfig.Epsilon
// is zero: a node gets at most about 1.25 times its share of the load.
const DefaultEpsilon = 0.25

// DefaultHalfLife is the half-life of the Rate load when
// PickerConfig.HalfLife is zero: long enough that a node's estimate rests on
// many requests even at a few thousand requests per second, short enough
// that the picker follows a key that turns hot within seconds.
const DefaultHalfLife = time.Second

// MinHalfLife is the smallest HalfLife a Picker accepts. Shorter ones
// would base the estimate on few requests and tick faster than the
// coarse clock's millisecond.
const MinHalfLife = 100 * time.Millisecond

// PickerConfig tunes a Picker. The zero value is a bounded-load picker with
// ε = 0.25, Rate load with a one-second half-life, and RingWalk spills.
type PickerConfig struct {
	// Epsilon is the allowed overload ε. A node whose load is at or above
	// its capacity C = ceil((1+ε)·(L+1)·w/W) is passed over, where L is the
	// total load, w the node's weight and W the total weight (w/W = 1/n for
	// equal weights). The expected number of nodes tried per pick grows as
	// 1/ε² and the movement on a membership change as 1/ε², so ε trades
	// balance for cache affinity.
	//
	// If zero, DefaultEpsilon is used; for the tightest bound use a tiny
	// positive value (the ceiling makes 1e-9 act as 0). math.Inf(1) turns
	// the bound off: Pick always returns the owner (plain consistent
	// hashing, still counting load), which is the baseline to compare with.
	// Negative and NaN are invalid.
	Epsilon float64
	// Load selects what is counted; the zero value is Rate.
	Load LoadMode
	// Order selects where a request goes when its owner is full; the zero
	// value is RingWalk.
	Order Order
	// HalfLife is the Rate load's half-life. If zero, DefaultHalfLife is
	// used; otherwise it must be at least MinHalfLife.
	HalfLife time.Duration
	// Now is the Rate load's clock, for tests. If nil, a coarse clock is
	// used that reads time.Now once per HalfLife/128 (at most once per
	// millisecond) while the Picker is in use, and not at all while idle.
	Now func() time.Time
}

// Picker picks the node for each request with bounded loads. It is safe for
// concurrent use: Pick takes no lock and does not allocate, and Swap may run
// concurrently with Picks. The load counts this process's requests only:
// every node bounds what it sends, which bounds the sum. Create Pickers with
// NewPicker; the zero value is not ready for use.
type Picker struct {
	state   atomic.Pointer[pickState]
	factor  float64 // 1+ε
	mode    LoadMode
	order   Order
	tickLen time.Duration
	now     func() time.Time
	epoch   time.Time
	clock   *coarseClock
	// reserve is the fraction of a node's capacity that spilled requests
	// may not use (see spill).
	reserve float64

	// InFlight: the total in flight, on its own cache line because every
	// Pick and every release writes it.
	_        [64]byte
	inflight atomic.Int64
	_        [56]byte
	// Rate: the total as of the tick in its high bits, summed over the
	// nodes by the first Pick of each tick (see rateTotal).
	sum     atomic.Uint64
	summing atomic.Uint32 // the newest tick whose sum a Pick has claimed
	_       [52]byte

	mu   sync.Mutex           // serialises Swap; guards byID
	byID map[string]*nodeLoad // members of the current ring only
}

// pickState is a Ring with each node's counter, by node index.
type pickState struct {
	r     *Ring
	loads []*nodeLoad
}

// NewPicker returns a Picker over r (nil means an empty ring until Swap).
// It returns an error if cfg is invalid.
func NewPicker(r *Ring, cfg PickerConfig) (*Picker, error) {
	eps := cfg.Epsilon
	switch {
	case eps == 0:
		eps = DefaultEpsilon
	case eps < 0 || math.IsNaN(eps):
		return nil, fmt.Errorf("ring: epsilon %v: must be positive or +Inf", eps)
	}
	hl := cfg.HalfLife
	switch {
	case hl == 0:
		hl = DefaultHalfLife
	case hl < MinHalfLife:
		return nil, fmt.Errorf("ring: half-life %v: must be at least %v", hl, MinHalfLife)
	}
	if cfg.Load > InFlight {
		return nil, fmt.Errorf("ring: unknown load mode %d", cfg.Load)
	}
	if cfg.Order > Probe {
		return nil, fmt.Errorf("ring: unknown spill order %d", cfg.Order)
	}
	p := &Picker{
		factor:  1 + eps,
		mode:    cfg.Load,
		order:   cfg.Order,
		tickLen: hl / ticksPerHalfLife,
		now:     cfg.Now,
		byID:    make(map[string]*nodeLoad),
	}
	if p.mode == Rate {
		step := p.tickLen // how far a load can fall between two reads of the clock
		if p.now != nil {
			p.epoch = p.now()
		} else {
			p.clock = newCoarseClock(p.tickLen)
			step = max(step, p.clock.period)
		}
		p.reserve = -math.Expm1(-2 * math.Ln2 * float64(step) / float64(hl)) // two steps of decay
	}
	p.Swap(r)
	return p, nil
}

// Swap installs r as the ring for the next Picks (nil means empty). Load
// counters of nodes in both rings are kept. In InFlight mode a departed
// node's outstanding requests stay in the total until they are released,
// which only loosens the bound for a while; in Rate mode the total is
// summed over the new members from the next tick on.
func (p *Picker) Swap(r *Ring) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := &pickState{r: r, loads: make([]*nodeLoad, r.Len())}
	next := make(map[string]*nodeLoad, r.Len())
	for i := range r.Len() {
		id := r.nodes[i].ID
		nl := p.byID[id]
		if nl == nil {
			nl = p.newNodeLoad()
		}
		st.loads[i] = nl
		next[id] = nl
	}
	p.byID = next
	p.state.Store(st)
}

func (p *Picker) newNodeLoad() *nodeLoad {
	nl := &nodeLoad{release: noRelease}
	if p.mode == InFlight {
		total := &p.inflight
		nl.release = func() {
			nl.inflight.Add(-1)
			total.Add(-1)
		}
	}
	return nl
}

// Ring returns the current ring, as given to NewPicker or Swap.
func (p *Picker) Ring() *Ring { return p.state.Load().r }

// Pick returns the node to send a request for key to, and counts the
// request against it. primary reports whether id is the key's owner. In
// InFlight mode call release exactly once when the request completes; in
// Rate mode release does nothing. On an empty ring Pick returns ErrNoNodes
// and a release that does nothing.
//
// The owner is taken if its load is below its capacity C. Otherwise the
// other nodes are tried in spill order (see Order), and the first whose load
// is below C less a reserve of about 1 % wins (the reserve keeps overflow from
// crowding out a node's own keys); failing that, the first below C; failing
// that, the node least loaded relative to its weight, which is still below
// C for the true total. Pick takes no lock and does not allocate.
func (p *Picker) Pick(key string) (id string, primary bool, release func(), err error) {
	st := p.state.Load()
	r := st.r
	if r.Len() == 0 {
		return "", false, noRelease, ErrNoNodes
	}
	h := r.hashKey(key)
	j := r.search(h)
	owner := r.points[j].node
	nl := st.loads[owner]
	var t uint32
	var total, l float64
	if p.mode == Rate {
		// tick and rateTotal, their fast paths inlined by hand.
		if c := p.clock; c != nil && c.used.Load() {
			t = c.tick.Load()
		} else {
			t = p.slowTick()
		}
		if v := p.sum.Load(); uint32(v>>32) == t {
			total = float64(math.Float32frombits(uint32(v)))
		} else {
			total = p.resum(st, t)
		}
		l = nl.rate.at(t)
	} else {
		total = float64(p.inflight.Load())
		l = float64(nl.inflight.Load())
	}
	n := owner
	if !p.below(l, total, r.share[n]) {
		n = p.spill(st, h, j, t, total, l)
		nl = st.loads[n]
	}
	if p.mode == Rate {
		if !nl.rate.tryInc(t) {
			nl.rate.inc(t)
		}
	} else {
		nl.inflight.Add(1)
		p.inflight.Add(1)
	}
	return r.nodes[n].ID, n == owner, nl.release, nil
}

// NodeLoad is one node's load as a Picker sees it.
type NodeLoad struct {
	// ID is the node.
	ID string
	// Load is the node's current load in the Picker's LoadMode units.
	Load float64
	// Capacity is the load at or above which the next Pick passes the node
	// over (+Inf when ε is).
	Capacity float64
}

// Loads returns the load of every node of the current ring, sorted by ID,
// for metrics and debugging. It allocates.
func (p *Picker) Loads() []NodeLoad {
	st := p.state.Load()
	out := make([]NodeLoad, st.r.Len())
	if len(out) == 0 {
		return out
	}
	t := p.tick()
	total, _ := p.loadsAt(st, 0, t)
	for i := range out {
		out[i] = NodeLoad{
			ID:       st.r.nodes[i].ID,
			Load:     p.load(st, int32(i), t),
			Capacity: p.capacity(total, st.r.share[i]),
		}
	}
	return out
}

// total returns the total load L that capacities are computed from. In
// InFlight mode it includes requests to nodes that have since left the
// ring; in Rate mode it is summed over the current nodes once per tick.
// Only tests read it, to check that every release is counted.
func (p *Picker) total() float64 {
	st := p.state.Load()
	if st.r.Len() == 0 {
		return float64(p.inflight.Load())
	}
	total, _ := p.loadsAt(st, 0, p.tick())
	return total
}
