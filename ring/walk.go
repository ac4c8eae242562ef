package ring

import "strconv"

// Order is the sequence in which a request spills when its key's owner is
// at capacity. The zero value is RingWalk.
type Order uint8

const (
	// RingWalk tries the distinct nodes clockwise from the key's position:
	// the paper's and HAProxy's order. With virtual nodes the overflow of
	// one node's keys spreads over many successors, but the overflow of one
	// hot key all lands on that key's clockwise neighbour, then the next.
	RingWalk Order = iota
	// Probe tries nodes at positions hashed from the key and the attempt
	// number ("random jumps": Chen, Coleman and Shrivastava, "Revisiting
	// Consistent Hashing with Bounded Loads", 2019; Envoy's bounded-load
	// hashing), then, after 32 attempts, continues clockwise. Like
	// RingWalk it is the same for a key on every node, and it lands on
	// nodes in proportion to their share of the ring, so weights still
	// hold; unlike RingWalk, the keys of one full node do not all try the
	// same neighbours next.
	Probe
)

// String returns "ring" or "probe".
func (o Order) String() string {
	switch o {
	case RingWalk:
		return "ring"
	case Probe:
		return "probe"
	}
	return "Order(" + strconv.Itoa(int(o)) + ")"
}

// maxJumps bounds the random jumps of Probe. Jumps are independent, so
// finding the last few unvisited nodes that way is a coupon collector's
// wait; the clockwise walk that follows finds them in at most one turn.
const maxJumps = 32

// walker enumerates a key's distinct nodes in spill order without
// allocating: the caller owns the seen bitset (one bit per node index).
type walker struct {
	r       *Ring
	h       uint64 // the key's hash: its position and the probe seed
	order   Order
	j       uint32 // current point
	attempt uint64 // random jumps made
	found   int    // distinct nodes returned so far
}

func (r *Ring) newWalker(h uint64, order Order) walker {
	return walker{r: r, h: h, order: order}
}

// first returns the key's owner. The ring must not be empty.
func (w *walker) first(seen []uint64) int32 {
	w.j = w.r.search(w.h)
	n := w.r.points[w.j].node
	mark(seen, n)
	w.found = 1
	return n
}

// start resumes a walk whose owner, at point j, the caller already has.
func (w *walker) start(seen []uint64, j uint32) {
	w.j = j
	mark(seen, w.r.points[j].node)
	w.found = 1
}

// next returns the next node not yet seen, or false when every node has
// been returned.
func (w *walker) next(seen []uint64) (int32, bool) {
	r := w.r
	if w.found >= len(r.nodes) {
		return 0, false
	}
	if w.order == Probe {
		for w.attempt < maxJumps {
			w.attempt++
			j := r.search(probeHash(w.h, w.attempt))
			if n := r.points[j].node; !marked(seen, n) {
				w.j = j
				mark(seen, n)
				w.found++
				return n, true
			}
		}
	}
	for {
		w.j++
		if w.j == uint32(len(r.points)) {
			w.j = 0
		}
		if n := r.points[w.j].node; !marked(seen, n) {
			mark(seen, n)
			w.found++
			return n, true
		}
	}
}

func mark(seen []uint64, n int32)        { seen[n>>6] |= 1 << (n & 63) }
func marked(seen []uint64, n int32) bool { return seen[n>>6]&(1<<(n&63)) != 0 }
