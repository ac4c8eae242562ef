package ring

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"testing"
)

// handPositions places the virtual nodes of a hand-checkable ring:
//
//	100 a#0   200 b#0   300 c#0   400 a#1   500 b#1   600 c#1
var handPositions = map[string]uint64{
	"a#0": 100, "b#0": 200, "c#0": 300,
	"a#1": 400, "b#1": 500, "c#1": 600,
}

// handHash puts vnode labels at handPositions and a decimal key at its
// value, so owners can be read off the diagram above.
func handHash(s string) uint64 {
	if p, ok := handPositions[s]; ok {
		return p
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		panic("handHash: " + s)
	}
	return n
}

func handRing() *Ring {
	return New([]Node{{ID: "c"}, {ID: "a"}, {ID: "b"}}, Config{VNodes: 2, Hash: handHash})
}

func TestHandRingOwner(t *testing.T) {
	r := handRing()
	for _, c := range []struct {
		key, owner string
	}{
		{"0", "a"},
		{"100", "a"}, // a key on a vnode belongs to it
		{"101", "b"},
		{"250", "c"},
		{"350", "a"},
		{"600", "c"},
		{"601", "a"}, // past the last vnode: wraps to the first
		{"18446744073709551615", "a"},
	} {
		if got := r.Owner(c.key); got != c.owner {
			t.Errorf("Owner(%s) = %q, want %q", c.key, got, c.owner)
		}
	}
}

func TestHandRingSuccessors(t *testing.T) {
	r := handRing()
	for _, c := range []struct {
		key  string
		n    int
		want []string
	}{
		{"150", -1, []string{"c", "a"}}, // b#0, then c#0, a#1
		{"150", 1, []string{"c"}},
		{"450", 5, []string{"c", "a"}}, // b#1, c#1, wrap to a#0
		{"650", 2, []string{"b", "c"}}, // a#0, b#0, c#0
		{"650", 0, nil},
	} {
		if got := r.Successors(c.key, c.n); !slices.Equal(got, c.want) {
			t.Errorf("Successors(%s, %d) = %q, want %q", c.key, c.n, got, c.want)
		}
	}
	if got := slices.Collect(r.Walk("450", RingWalk)); !slices.Equal(got, []string{"b", "c", "a"}) {
		t.Errorf("Walk(450) = %q, want [b c a]", got)
	}
}

// TestGolden pins where the default ring puts keys. Every node of a cluster
// must agree, across versions too: if this test breaks, a rolling upgrade
// would split the cluster's view of who owns what.
func TestGolden(t *testing.T) {
	r := New([]Node{{ID: "10.0.0.1:11211"}, {ID: "10.0.0.2:11211"}, {ID: "10.0.0.3:11211", Weight: 2}}, Config{})
	got := map[string]string{}
	for _, k := range []string{"foo", "bar", "baz", "qux", "user:42", ""} {
		got[k] = r.Owner(k)
	}
	want := goldenOwners
	if !reflect.DeepEqual(got, want) {
		t.Errorf("owners changed:\n got %q\nwant %q", got, want)
	}
	if h := XXHash("a#0"); h != goldenXX {
		t.Errorf("XXHash(a#0) = %#x, want %#x", h, goldenXX)
	}
	if h := FNV1a("a#0"); h != goldenFNV {
		t.Errorf("FNV1a(a#0) = %#x, want %#x", h, goldenFNV)
	}
}

func TestNewIgnoresOrderAndDuplicates(t *testing.T) {
	base := []Node{{ID: "a"}, {ID: "b", Weight: 2}, {ID: "c"}, {ID: "d", Weight: 3}}
	want := New(base, Config{})
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		in := slices.Clone(base)
		in = append(in, Node{ID: ""}, Node{ID: "b", Weight: 1}, Node{ID: "d"}) // ignored / smaller duplicates
		rng.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
		got := New(in, Config{})
		if !slices.Equal(got.Nodes(), want.Nodes()) || !slices.Equal(got.points, want.points) {
			t.Fatalf("New(%v) differs from New(%v)", in, base)
		}
	}
}

func TestNodesAndWeights(t *testing.T) {
	r := New([]Node{{ID: "z", Weight: -3}, {ID: "y"}, {ID: "x", Weight: 5000}, {ID: "w", Weight: 3}}, Config{VNodes: 10})
	want := []Node{{"w", 3}, {"x", MaxWeight}, {"y", 1}, {"z", 1}}
	if got := r.Nodes(); !slices.Equal(got, want) {
		t.Fatalf("Nodes() = %v, want %v", got, want)
	}
	r.Nodes()[0].ID = "changed"
	if r.Nodes()[0].ID != "w" {
		t.Error("Nodes() returned the ring's own slice")
	}
	if got, want := len(r.points), 10*(3+MaxWeight+1+1); got != want {
		t.Errorf("%d points, want %d", got, want)
	}
	if r.Len() != 4 || r.VNodes() != 10 {
		t.Errorf("Len, VNodes = %d, %d; want 4, 10", r.Len(), r.VNodes())
	}
}

// TestShareFollowsWeight checks that a node of weight w owns about w/W of
// the keys, and that shares add up to the whole ring.
func TestShareFollowsWeight(t *testing.T) {
	nodes := []Node{{"a", 1}, {"b", 2}, {"c", 3}, {"d", 4}}
	r := New(nodes, Config{})
	sum := 0.0
	for _, n := range nodes {
		got, want := r.Share(n.ID), float64(n.Weight)/10
		sum += got
		if math.Abs(got-want) > 0.2*want {
			t.Errorf("Share(%s) = %.3f, want %.3f ± 20%%", n.ID, got, want)
		}
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Errorf("shares sum to %v", sum)
	}
	if r.Share("nope") != 0 {
		t.Error("Share of a non-member is not 0")
	}
	if New([]Node{{ID: "solo"}}, Config{VNodes: 1}).Share("solo") != 1 {
		t.Error("a lone node does not own the whole ring")
	}
}

func TestEmptyRing(t *testing.T) {
	for name, r := range map[string]*Ring{"nil": nil, "no nodes": New(nil, Config{}), "empty IDs": New([]Node{{}, {}}, Config{})} {
		if r.Owner("k") != "" || r.Len() != 0 || len(r.Nodes()) != 0 || r.Successors("k", 3) != nil ||
			len(slices.Collect(r.Walk("k", Probe))) != 0 || r.Share("k") != 0 || r.Assign([]string{"k"}, 0.1)[0] != "" {
			t.Errorf("%s: not empty", name)
		}
	}
}

// TestWalk checks on random rings that Walk yields every node once, owner
// first, in both orders, and that Successors is the ring walk after it.
func TestWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 2, 7, 70} {
		nodes := make([]Node, n)
		for i := range nodes {
			nodes[i] = Node{ID: fmt.Sprintf("n%d", i), Weight: 1 + rng.IntN(3)}
		}
		r := New(nodes, Config{VNodes: 1 + rng.IntN(40)})
		for k := range 200 {
			key := strconv.Itoa(k)
			for _, order := range []Order{RingWalk, Probe} {
				got := slices.Collect(r.Walk(key, order))
				if len(got) != n || got[0] != r.Owner(key) {
					t.Fatalf("n=%d %v Walk(%s) = %q", n, order, key, got)
				}
				if sorted := slices.Sorted(slices.Values(got)); len(slices.Compact(sorted)) != n {
					t.Fatalf("n=%d %v Walk(%s) repeats a node: %q", n, order, key, got)
				}
				if order == RingWalk {
					m := rng.IntN(n + 1)
					if s := r.Successors(key, m); !slices.Equal(s, got[1:1+min(m, n-1)]) {
						t.Fatalf("Successors(%s, %d) = %q, walk %q", key, m, s, got)
					}
				}
			}
			for range r.Walk(key, Probe) {
				break // stopping early must not panic
			}
		}
	}
}

// TestSearch checks the bucket index against a plain binary search,
// including positions on, between and around the virtual nodes.
func TestSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, vn := range []int{1, 3, 160} {
		r := New([]Node{{ID: "a"}, {ID: "b"}, {ID: "c"}}, Config{VNodes: vn})
		probe := []uint64{0, 1, math.MaxUint64}
		for _, p := range r.points {
			probe = append(probe, p.pos-1, p.pos, p.pos+1)
		}
		for range 10000 {
			probe = append(probe, rng.Uint64())
		}
		for _, h := range probe {
			want := sort.Search(len(r.points), func(i int) bool { return r.points[i].pos >= h })
			if want == len(r.points) {
				want = 0
			}
			if got := r.search(h); int(got) != want {
				t.Fatalf("vnodes=%d search(%#x) = %d, want %d", vn, h, got, want)
			}
		}
	}
}

// keyBalance returns max/mean keys per node over m random keys.
func keyBalance(r *Ring, m int, seed uint64) float64 {
	rng := rand.New(rand.NewPCG(seed, 7))
	count := map[string]int{}
	for range m {
		count[r.Owner(strconv.FormatUint(rng.Uint64(), 36))]++
	}
	top := 0
	for _, c := range count {
		top = max(top, c)
	}
	return float64(top) / (float64(m) / float64(r.Len()))
}

func balanceOver20Seeds(h Hash) (mean, worst float64) {
	const keys = 100_000
	for seed := range 20 {
		nodes := make([]Node, 10)
		for i := range nodes {
			nodes[i] = Node{ID: fmt.Sprintf("10.%d.0.%d:11211", seed, i+1)}
		}
		b := keyBalance(New(nodes, Config{Hash: h}), keys, uint64(seed))
		mean += b / 20
		worst = max(worst, b)
	}
	return mean, worst
}

// TestBalance: 160 virtual nodes on 10 nodes keep the busiest node within
// 1.14 of the mean on average over 20 rings, and 1.27 at worst.
func TestBalance(t *testing.T) {
	for _, c := range []struct {
		name string
		hash Hash
	}{{"xxhash", nil}, {"fnv1a", FNV1a}} {
		mean, worst := balanceOver20Seeds(c.hash)
		t.Logf("%s: max/mean keys per node %.3f on average, %.3f worst", c.name, mean, worst)
		if mean > 1.14 || worst > 1.27 {
			t.Errorf("%s: max/mean %.3f average, %.3f worst; want ≤ 1.14, ≤ 1.27", c.name, mean, worst)
		}
	}
}

// TestRawFNVClusters shows why FNV1a mixes its output: raw FNV-1a of
// "id#0", "id#1", ... puts a node's virtual nodes next to each other, and
// 160 of them balance little better than one (TestBalance checks FNV1a).
func TestRawFNVClusters(t *testing.T) {
	rawMean, rawWorst := balanceOver20Seeds(fnv1a)
	one := 0.0
	for seed := range 20 {
		nodes := make([]Node, 10)
		for i := range nodes {
			nodes[i] = Node{ID: fmt.Sprintf("10.%d.0.%d:11211", seed, i+1)}
		}
		one += keyBalance(New(nodes, Config{VNodes: 1}), 20_000, uint64(seed)) / 20
	}
	t.Logf("max/mean keys per node: raw FNV-1a with 160 vnodes %.2f (worst %.2f); xxhash with 1 vnode %.2f",
		rawMean, rawWorst, one)
	if rawMean < 1.5 {
		t.Errorf("raw FNV-1a balanced %.2f: no longer shows the clustering FNV1a's mixing avoids", rawMean)
	}
}

func TestStrings(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{RingWalk.String(), "ring"}, {Probe.String(), "probe"}, {Order(9).String(), "Order(9)"},
		{Rate.String(), "rate"}, {InFlight.String(), "inflight"}, {LoadMode(7).String(), "LoadMode(7)"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestMembership(t *testing.T) {
	r := New([]Node{{ID: "a"}, {ID: "b", Weight: 3}, {ID: "c"}}, Config{VNodes: 20})
	for _, tc := range []struct {
		id     string
		has    bool
		weight int
	}{{"a", true, 1}, {"b", true, 3}, {"z", false, 0}} {
		if r.Has(tc.id) != tc.has {
			t.Errorf("Has(%q) = %v", tc.id, !tc.has)
		}
		if w, ok := r.Weight(tc.id); w != tc.weight || ok != tc.has {
			t.Errorf("Weight(%q) = %d, %v", tc.id, w, ok)
		}
	}
	wo := r.Without("b")
	want := New([]Node{{ID: "a"}, {ID: "c"}}, Config{VNodes: 20})
	for i := range 1000 {
		k := strconv.Itoa(i)
		if wo.Owner(k) != want.Owner(k) {
			t.Fatalf("Without(b).Owner(%s) = %s, want %s", k, wo.Owner(k), want.Owner(k))
		}
	}
	if r.Len() != 3 {
		t.Error("Without changed the ring")
	}
}
