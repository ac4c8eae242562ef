package bench

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"text/tabwriter"
	"time"

	"spillway/ring"
)

// SimConfig describes a simulation: the workload's keys placed by the
// bounded-load ring alone, in process, with no network. It answers "what
// would ε do to my traffic?" before a cluster exists.
type SimConfig struct {
	// Nodes is the cluster size; 0 means 10.
	Nodes int
	// Requests is the number of reads placed; 0 means 1,000,000.
	Requests int
	// Keys and Zipf are the key space and its skew, as in Config.
	Keys int
	Zipf float64
	// Rate is the simulated request rate per second, which the picker's
	// rate load decays against; 0 means 10,000.
	Rate float64
	// CacheItems is each node's cache size in items (LRU); 0 means
	// unbounded, so that only first reads miss.
	CacheItems int
	// Picker is the bounded-load configuration under test.
	Picker ring.PickerConfig
	// Seed seeds the key stream.
	Seed int64
}

// SimReport is what a simulation measured.
type SimReport struct {
	Nodes    int      `json:"nodes"`
	Requests int      `json:"requests"`
	PerNode  []uint64 `json:"per_node"` // requests served, by node
	// HottestQPS is the hottest node's share of Rate, in requests/s.
	HottestQPS float64 `json:"hottest_qps"`
	MaxMean    float64 `json:"max_mean"`
	SpillShare float64 `json:"spill_share"` // reads served by a node other than the owner
	HitRate    float64 `json:"hit_rate"`    // reads that found the key in the serving node's cache
}

// Simulate places cfg.Requests reads with a ring.Picker on a simulated
// clock and counts where they land and whether each node's LRU cache of
// CacheItems held the key.
func Simulate(cfg SimConfig) (*SimReport, error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = 10
	}
	if cfg.Requests == 0 {
		cfg.Requests = 1_000_000
	}
	if cfg.Keys == 0 {
		cfg.Keys = DefaultKeys
	}
	if cfg.Rate == 0 {
		cfg.Rate = 10_000
	}
	if !finite(cfg.Zipf) || !finite(cfg.Rate) {
		return nil, errors.New("bench: simulate: zipf and rate must be finite numbers")
	}
	if cfg.Nodes < 1 || cfg.Requests < 1 || cfg.Keys < 1 || cfg.Rate < 0 || cfg.CacheItems < 0 || cfg.Zipf < 0 {
		return nil, errors.New("bench: simulate: nodes, requests and keys must be positive")
	}
	start := time.Unix(0, 0)
	now := start
	pc := cfg.Picker
	pc.Now = func() time.Time { return now }
	nodes := make([]ring.Node, cfg.Nodes)
	index := make(map[string]int, cfg.Nodes)
	for i := range nodes {
		nodes[i] = ring.Node{ID: "node" + strconv.Itoa(i)}
		index[nodes[i].ID] = i
	}
	r := ring.New(nodes, ring.Config{})
	p, err := ring.NewPicker(r, pc)
	if err != nil {
		return nil, err
	}
	keys := make([]string, cfg.Keys)
	for i := range keys {
		keys[i] = "key:" + strconv.Itoa(i)
	}
	caches := make([]*lru, cfg.Nodes)
	for i := range caches {
		caches[i] = newLRU(cfg.CacheItems)
	}
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5eed))
	var z *zipf
	if cfg.Zipf > 0 {
		z = newZipf(cfg.Keys, cfg.Zipf)
	}
	rep := &SimReport{Nodes: cfg.Nodes, Requests: cfg.Requests, PerNode: make([]uint64, cfg.Nodes)}
	var spilled, hits int
	step := time.Duration(float64(time.Second) / cfg.Rate)
	for i := range cfg.Requests {
		now = start.Add(time.Duration(i) * step)
		k := rng.IntN(cfg.Keys)
		if z != nil {
			k = z.rank(rng)
		}
		id, primary, release, err := p.Pick(keys[k])
		if err != nil {
			return nil, err
		}
		release()
		n := index[id]
		rep.PerNode[n]++
		if !primary {
			spilled++
		}
		if caches[n].touch(k) {
			hits++
		}
	}
	var max uint64
	for _, c := range rep.PerNode {
		max = maxU(max, c)
	}
	mean := float64(cfg.Requests) / float64(cfg.Nodes)
	rep.MaxMean = float64(max) / mean
	rep.HottestQPS = float64(max) / float64(cfg.Requests) * cfg.Rate
	rep.SpillShare = float64(spilled) / float64(cfg.Requests)
	rep.HitRate = float64(hits) / float64(cfg.Requests)
	return rep, nil
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// SimCompareText prints simulations side by side.
func SimCompareText(w io.Writer, names []string, reps []*SimReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\tnodes\trequests\thottest node req/s\tmax/mean\tspilled\thit rate\t")
	for i, r := range reps {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.0f\t%.3f\t%.1f%%\t%.1f%%\t\n", names[i], r.Nodes, commas(int64(r.Requests)),
			r.HottestQPS, r.MaxMean, 100*r.SpillShare, 100*r.HitRate)
	}
	return tw.Flush()
}

// lru is a node's cache in a simulation: keys only. A zero capacity never
// evicts.
type lru struct {
	cap   int
	order *list.List // front: most recent
	at    map[int]*list.Element
}

func newLRU(capacity int) *lru {
	return &lru{cap: capacity, order: list.New(), at: make(map[int]*list.Element)}
}

// touch reads key: it reports a hit, and on a miss inserts the key,
// evicting the least recent one if full.
func (c *lru) touch(key int) bool {
	if e, ok := c.at[key]; ok {
		c.order.MoveToFront(e)
		return true
	}
	c.at[key] = c.order.PushFront(key)
	if c.cap > 0 && c.order.Len() > c.cap {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.at, old.Value.(int))
	}
	return false
}
