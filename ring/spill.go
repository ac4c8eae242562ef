package ring

import (
	"math"
	"sync"
)

// capacity is C for a node with capacity share w/W, when the total load is
// total. It is +Inf when ε is.
func (p *Picker) capacity(total, share float64) float64 {
	return math.Ceil(p.factor * (total + 1) * share)
}

// below reports whether load l is below capacity C. Most calls are decided
// by the unrounded value, which skips the Ceil.
func (p *Picker) below(l, total, share float64) bool {
	x := p.factor * (total + 1) * share
	return l < x || l < math.Ceil(x)
}

// spill walks the nodes after the key's owner (at point j, with load lo)
// and returns the first whose load is below (1-reserve)·C. If there is
// none, it returns the first below C, and if there is none of those either
// the one with the least load relative to its weight, which is below C
// computed from the true total: its relative load is at most the weighted
// mean, and C exceeds that.
//
// None below C happens when concurrent Picks race past the bound, and in
// Rate mode when the total lags the traffic (a cold start, a burst; see
// rateTotal). Having visited every node, the walk then knows the true total
// and publishes it, so the Picks that follow see capacities that fit.
//
// The reserve keeps a node's own keys from being displaced by others'
// overflow. A Rate load falls in steps of one clock tick and refills at
// once when overflow is plentiful; without a reserve, a node next to a hot
// key sits at exactly C, so its own requests arrive to a full node and
// spill in turn, and that cascade spilled up to 1.7 times the minimum the
// skew forces in TestZipf's configurations. Holding overflow two clock
// steps' worth of decay below C (about 1 %) leaves the node's own arrivals
// their room, and spills came within 1 to 11 % of the minimum. InFlight
// counts move by one and need no reserve, so it is zero there, as in the
// paper.
func (p *Picker) spill(st *pickState, h uint64, j uint32, t uint32, total, lo float64) int32 {
	r := st.r
	var small [16]uint64 // rings of up to 1024 nodes walk without allocating
	seen := small[:]
	words := (len(r.nodes) + 63) / 64
	var big *[]uint64
	if words <= len(small) {
		seen = small[:words]
	} else {
		big = getSeen(words)
		seen = *big
	}
	w := r.newWalker(h, p.order)
	w.start(seen, j)
	least := r.points[j].node
	leastRel := lo / r.share[least]
	sum := lo // of every load seen; the true total if the walk completes
	found := int32(-1)
	for {
		n, ok := w.next(seen)
		if !ok {
			break
		}
		l := p.load(st, n, t)
		c := p.capacity(total, r.share[n])
		if l < c*(1-p.reserve) {
			found = n
			break
		}
		sum += l
		if l < c {
			if found < 0 {
				found = n
			}
		} else if rel := l / r.share[n]; rel < leastRel {
			least, leastRel = n, rel
		}
	}
	if big != nil {
		seenPool.Put(big)
	}
	if found >= 0 {
		return found
	}
	if p.mode == Rate {
		p.publishSum(t, sum)
	}
	return least
}

// publishSum replaces the Rate total for tick t with one just summed,
// unless a newer tick's total is already there.
func (p *Picker) publishSum(t uint32, total float64) {
	for {
		v := p.sum.Load()
		if int32(uint32(v>>32)-t) > 0 || p.sum.CompareAndSwap(v, packRate(t, float32(total))) {
			return
		}
	}
}

// seenPool holds bitsets for walks over rings larger than spill's stack
// buffer, so that Pick stays allocation-free there too.
var seenPool sync.Pool

func getSeen(words int) *[]uint64 {
	b, _ := seenPool.Get().(*[]uint64)
	if b == nil || cap(*b) < words {
		s := make([]uint64, words)
		return &s
	}
	*b = (*b)[:words]
	clear(*b)
	return b
}
