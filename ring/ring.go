// Package ring decides which node serves a key: consistent hashing with
// virtual nodes, and on top of it the bounded loads of Mirrokni, Thorup and
// Zadimoghaddam ("Consistent Hashing with Bounded Loads", 2016), so that no
// node is sent more than (1+ε) times its share of the load while keys move
// as little as plain consistent hashing allows.
//
// A Ring is an immutable snapshot of one membership. Build one with New on
// every membership change (100 nodes take about 2 ms); the same member list
// gives the same Ring on every machine. Owner, Successors and Walk read it
// without locks; Owner does not allocate.
//
// A Picker holds the current Ring in an atomic.Pointer together with the load
// this process has sent to each node, and picks the node for a request: the
// key's owner if it is below capacity, else the first node below capacity in
// spill order (clockwise, or Probe's per-key random jumps). Swap installs the
// next Ring; load counters of the nodes that stay are kept. The load is an
// exponentially decayed request rate by default, or the count of requests in
// flight. Two refinements over the paper, both measured in the tests: spilled
// requests leave a node a small reserve for its own keys, which keeps hot-key
// overflow from cascading; and the Rate total is summed once per clock tick
// rather than written by every Pick, so Picks to different nodes share no
// written memory.
//
// Assign does the same placement for a whole set of keys at once, for
// capacity planning and sharding.
//
// The package does no I/O and knows nothing of the network or of stores:
// nodes are strings, and load is what the caller reports through Pick and
// the release functions. It leaves out replication (Successors gives the
// candidates), node health (remove a dead node from the member list, or
// weigh it down), load reported by the nodes themselves (each process
// bounds only what it sends), and any clock other than the Picker's.
package ring

import (
	"cmp"
	"iter"
	"math/bits"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// DefaultVNodes is the number of virtual nodes per unit of weight when
// Config.VNodes is zero. With 160, the busiest of ten equal nodes owns
// about 1.12 times the mean key share (1.20 at worst over 20 rings; see
// TestBalance); the spread shrinks as 1/sqrt(VNodes).
const DefaultVNodes = 160

// MaxWeight caps Node.Weight. Weights arrive in gossiped metadata, and a
// typo there must not make a node build a ring of billions of points.
const MaxWeight = 1000

// Node is a member of the ring.
type Node struct {
	// ID names the node; it is what Owner and Pick return. The empty ID is
	// reserved for "no node" and is ignored by New.
	ID string
	// Weight is the node's capacity relative to the others: a node of
	// weight w gets w times the virtual nodes, hence w times the keys, and
	// w times the Picker's capacity. Zero or negative means 1; values
	// above MaxWeight mean MaxWeight.
	Weight int
}

// Config tunes New. The zero value is the default ring.
type Config struct {
	// VNodes is the number of virtual nodes per unit of weight. If zero or
	// negative, DefaultVNodes is used.
	VNodes int
	// Hash places keys and virtual nodes. If nil, XXHash is used.
	Hash Hash
}

// Ring is an immutable consistent-hash ring. It is safe for concurrent use
// by multiple goroutines. A nil *Ring is an empty ring.
type Ring struct {
	nodes  []Node    // members sorted by ID, weights normalised
	share  []float64 // weight / total weight, by node index: capacity shares
	arc    []float64 // fraction of the hash space each node owns
	points []vpoint  // virtual nodes sorted by position
	// index[b] is the first point whose position's top bits are >= b, so a
	// lookup scans one bucket (about one point) instead of binary-searching.
	index  []uint32
	shift  uint
	hash   Hash // nil means xxhash, called directly to avoid an indirect call
	vnodes int
}

// vpoint is one virtual node: its position and the index of its node.
type vpoint struct {
	pos  uint64
	node int32
}

// New builds the ring of nodes. The result depends only on the set of
// nodes and cfg, not on their order: members are sorted by ID, and an ID
// listed twice counts once, with its largest weight. Virtual node i of a
// node is placed at Hash(ID + "#" + i); points that collide are ordered by
// node ID.
func New(nodes []Node, cfg Config) *Ring {
	vn := cfg.VNodes
	if vn <= 0 {
		vn = DefaultVNodes
	}
	r := &Ring{hash: cfg.Hash, vnodes: vn, nodes: normalise(nodes)}
	if len(r.nodes) == 0 {
		return r
	}
	total := 0
	for _, n := range r.nodes {
		total += n.Weight
	}
	r.share = make([]float64, len(r.nodes))
	r.points = make([]vpoint, 0, total*vn)
	var buf []byte
	for i, n := range r.nodes {
		r.share[i] = float64(n.Weight) / float64(total)
		buf = append(buf[:0], n.ID...)
		buf = append(buf, '#')
		prefix := len(buf)
		for v := 0; v < n.Weight*vn; v++ {
			buf = strconv.AppendInt(buf[:prefix], int64(v), 10)
			var pos uint64
			if r.hash == nil {
				pos = xxhash.Sum64(buf) // same as XXHash(string(buf)) without the copy
			} else {
				pos = r.hash(string(buf))
			}
			r.points = append(r.points, vpoint{pos: pos, node: int32(i)})
		}
	}
	slices.SortFunc(r.points, func(a, b vpoint) int {
		if c := cmp.Compare(a.pos, b.pos); c != 0 {
			return c
		}
		return cmp.Compare(a.node, b.node)
	})
	r.buildIndex()
	r.arc = make([]float64, len(r.nodes))
	prev := r.points[len(r.points)-1].pos
	for _, p := range r.points {
		// Keys in (prev, p.pos] belong to p; the subtraction wraps at zero.
		r.arc[p.node] += float64(p.pos-prev) / (1 << 64)
		prev = p.pos
	}
	if len(r.points) == 1 {
		r.arc[0] = 1
	}
	return r
}

// normalise sorts nodes by ID, drops empty IDs, merges duplicates and
// clamps weights, so that New's result does not depend on input order.
func normalise(in []Node) []Node {
	out := make([]Node, 0, len(in))
	for _, n := range in {
		if n.ID == "" {
			continue
		}
		n.Weight = min(max(n.Weight, 1), MaxWeight)
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b Node) int {
		if c := cmp.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		return cmp.Compare(b.Weight, a.Weight) // largest weight first
	})
	return slices.CompactFunc(out, func(a, b Node) bool { return a.ID == b.ID })
}

// buildIndex fills r.index with one bucket per power of two at or above the
// number of points, so buckets hold about one point each.
func (r *Ring) buildIndex() {
	b := max(bits.Len(uint(len(r.points)-1)), 1)
	r.shift = uint(64 - b)
	r.index = make([]uint32, 1<<b+1)
	j := 0
	for bucket := range r.index {
		for j < len(r.points) && r.points[j].pos>>r.shift < uint64(bucket) {
			j++
		}
		r.index[bucket] = uint32(j)
	}
}

// hashKey hashes a key with the ring's Hash.
func (r *Ring) hashKey(key string) uint64 {
	if r.hash == nil {
		return xxhash.Sum64String(key)
	}
	return r.hash(key)
}

// search returns the index of the first point at or after position h,
// wrapping to 0 past the last. The ring must not be empty.
func (r *Ring) search(h uint64) uint32 {
	b := h >> r.shift
	j, end := r.index[b], r.index[b+1]
	for j < end && r.points[j].pos < h {
		j++
	}
	if j == uint32(len(r.points)) {
		return 0
	}
	return j
}

// Owner returns the key's primary node: the node of the first virtual node
// at or after the key's position, clockwise. It returns "" on an empty ring.
func (r *Ring) Owner(key string) string {
	if r.Len() == 0 {
		return ""
	}
	return r.nodes[r.points[r.search(r.hashKey(key))].node].ID
}

// Len returns the number of nodes.
func (r *Ring) Len() int {
	if r == nil {
		return 0
	}
	return len(r.nodes)
}

// Nodes returns the members sorted by ID, with weights as the ring uses
// them (0 became 1). The slice is a copy.
func (r *Ring) Nodes() []Node {
	if r == nil {
		return nil
	}
	return slices.Clone(r.nodes)
}

// VNodes returns the number of virtual nodes per unit of weight.
func (r *Ring) VNodes() int {
	if r == nil {
		return DefaultVNodes
	}
	return r.vnodes
}

// Share returns the fraction of the hash space that node id owns, hence
// the fraction of uniformly spread keys it is primary for; 0 if id is not
// a member. Compare it with the node's weight share to see how well the
// virtual nodes balance.
func (r *Ring) Share(id string) float64 {
	if i, ok := r.nodeIndex(id); ok {
		return r.arc[i]
	}
	return 0
}

// nodeIndex finds a member by ID.
func (r *Ring) nodeIndex(id string) (int, bool) {
	if r == nil {
		return 0, false
	}
	return slices.BinarySearchFunc(r.nodes, id, func(n Node, id string) int { return cmp.Compare(n.ID, id) })
}

// Successors returns up to n distinct nodes that follow the key's owner
// clockwise, nearest first, without the owner itself: the ring-walk spill
// order, and the usual choice of replicas. n < 0 means all of them.
func (r *Ring) Successors(key string, n int) []string {
	if n < 0 || n > r.Len()-1 {
		n = r.Len() - 1
	}
	if n <= 0 {
		return nil
	}
	out := make([]string, 0, n)
	owner := true
	for id := range r.Walk(key, RingWalk) {
		if owner {
			owner = false
			continue
		}
		out = append(out, id)
		if len(out) == n {
			break
		}
	}
	return out
}

// Walk yields every node once: the key's owner first, then the others in
// the given spill order. It is the sequence a Picker with that Order tries.
func (r *Ring) Walk(key string, order Order) iter.Seq[string] {
	return func(yield func(string) bool) {
		if r.Len() == 0 {
			return
		}
		seen := make([]uint64, (r.Len()+63)/64)
		w := r.newWalker(r.hashKey(key), order)
		for i, ok := w.first(seen), true; ok; i, ok = w.next(seen) {
			if !yield(r.nodes[i].ID) {
				return
			}
		}
	}
}

// Weight returns member id's weight as the ring uses it, and whether id is
// a member.
func (r *Ring) Weight(id string) (int, bool) {
	if i, ok := r.nodeIndex(id); ok {
		return r.nodes[i].Weight, true
	}
	return 0, false
}

// Has reports whether id is a member.
func (r *Ring) Has(id string) bool {
	_, ok := r.nodeIndex(id)
	return ok
}

// Without returns the ring of r's members other than id, built the same
// way: the ring the others had before id joined.
func (r *Ring) Without(id string) *Ring {
	nodes := slices.DeleteFunc(r.Nodes(), func(n Node) bool { return n.ID == id })
	return New(nodes, Config{VNodes: r.VNodes(), Hash: r.hash})
}
