package ring

import "math"

// Assign places a whole set of keys (or partitions) in one pass with
// bounded capacity: node i takes at most ceil((1+ε)·m·wᵢ/W) of the m keys,
// where wᵢ/W is its weight share. Keys are placed in the order given; a
// key whose owner is full goes to the first node clockwise that has room,
// the static version of the paper's process. out[i] is the node of keys[i].
//
// Use it for capacity planning (how keys would spread at a given ε) and for
// sharding fixed partitions across nodes. The result depends on the ring,
// ε and the order of keys; sort the keys first if callers may list them in
// different orders. A key listed twice is placed twice. ε = +Inf gives
// Owner(key) for every key; a negative or NaN ε counts as 0. On an empty
// ring every entry is "".
func (r *Ring) Assign(keys []string, eps float64) []string {
	out := make([]string, len(keys))
	n := r.Len()
	if n == 0 {
		return out
	}
	if !(eps >= 0) {
		eps = 0
	}
	limit := make([]float64, n)
	for i := range limit {
		limit[i] = math.Ceil((1 + eps) * float64(len(keys)) * r.share[i])
	}
	// The limits sum to at least m, so a node with room always exists.
	count := make([]float64, n)
	seen := make([]uint64, (n+63)/64)
	for k, key := range keys {
		h := r.hashKey(key)
		j := r.search(h)
		node := r.points[j].node
		if count[node] >= limit[node] {
			clear(seen)
			w := r.newWalker(h, RingWalk)
			w.start(seen, j)
			for {
				m, ok := w.next(seen)
				if !ok {
					break // unreachable: kept so a bug cannot loop forever
				}
				if count[m] < limit[m] {
					node = m
					break
				}
			}
		}
		count[node]++
		out[k] = r.nodes[node].ID
	}
	return out
}
