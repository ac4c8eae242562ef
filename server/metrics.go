package server

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"spillway/protocol"
)

// clusterCounters are the cluster lines of "stats".
type clusterCounters struct {
	served          atomic.Uint64 // reads this node answered itself, whoever the entry node was
	forwarded       atomic.Uint64 // reads this entry node sent to another node
	forwardedWrites atomic.Uint64 // writes this entry node sent to the key's owner
	spilledServed   atomic.Uint64 // reads served here although another node owns the key
	peerFetches     atomic.Uint64 // read-throughs from an owner or previous owner
	peerErrors      atomic.Uint64 // peer requests that failed or timed out
	originFetches   atomic.Uint64 // loads from the origin
	originErrors    atomic.Uint64 // origin loads that failed (not misses)
	merged          atomic.Uint64 // reads that joined another's fill (singleflight)
	invalidations   atomic.Uint64 // copy invalidations sent
	// lostInvalidations counts copies that may outlive a write because
	// their holder could not be told (it did not answer in time): the
	// one stated exception to coherence, bounded by the copy TTL.
	lostInvalidations atomic.Uint64
	refusedWrites     atomic.Uint64 // writes refused here: this node does not own the key
}

// metrics are the node's Prometheus series, on a registry of its own so
// that several nodes can live in one process (tests, bench --local).
type metrics struct {
	reg     *prometheus.Registry
	routing *prometheus.CounterVec
	load    *prometheus.GaugeVec
	latency *prometheus.HistogramVec
	// byCommand holds the latency observer of each command, resolved
	// once so that the request path does no label lookups.
	byCommand [protocol.CmdMetaDebug + 1]prometheus.Observer
}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.routing = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cache_routing_requests_total",
		Help: "Reads counted once by their entry node, by the node that served them: status primary if it owns the key, displaced if the read spilled.",
	}, []string{"node_id", "status"})
	m.load = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cache_node_active_load",
		Help: "The bounded-load picker's current load for each node, as this node counts it.",
	}, []string{"node_id"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "spillway_request_duration_seconds",
		Help:    "Time from a request's parse to its reply being buffered, by command (forwarding and fills included).",
		Buckets: prometheus.ExponentialBuckets(5e-6, 4, 10),
	}, []string{"command"})
	m.reg.MustRegister(m.routing, m.load, m.latency)
	for c := protocol.CmdGet; c <= protocol.CmdMetaDebug; c++ {
		m.byCommand[c] = m.latency.WithLabelValues(c.String())
	}

	gauge := func(name, help string, f func() float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	counter := func(name, help string, f func() float64) {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
	}
	u := func(a *atomic.Uint64) func() float64 { return func() float64 { return float64(a.Load()) } }
	c := &s.counters
	counter("spillway_served_total", "Reads this node answered itself, whoever the entry node was.", u(&c.served))
	counter("spillway_spilled_served_total", "Reads served here although another node owns the key.", u(&c.spilledServed))
	counter("spillway_peer_errors_total", "Peer requests that failed or timed out.", u(&c.peerErrors))
	counter("spillway_origin_errors_total", "Origin loads that failed.", u(&c.originErrors))
	counter("spillway_invalidations_total", "Copy invalidations sent to other nodes.", u(&c.invalidations))
	// The figures stats also shows are exported from the same counters:
	// one figure, two views of it.
	counter("spillway_forwarded_total", "Reads this entry node forwarded to another node.", u(&c.forwarded))
	counter("spillway_peer_fetches_total", "Read-throughs from a key's owner or previous owner.", u(&c.peerFetches))
	counter("spillway_origin_fetches_total", "Loads from the origin.", u(&c.originFetches))
	counter("spillway_singleflight_merged_total", "Reads that waited for another read's fill of the same key.", u(&c.merged))
	counter("spillway_lost_invalidations_total", "Copies that may outlive a write because their holder could not be told in time (served at most until the copy TTL).", u(&c.lostInvalidations))
	counter("spillway_refused_writes_total", "Writes refused because this node does not own the key in its view.", u(&c.refusedWrites))
	counter("spillway_store_hits_total", "Owned-store hits.", func() float64 { return float64(s.store.Stats().Hits) })
	counter("spillway_store_misses_total", "Owned-store misses.", func() float64 { return float64(s.store.Stats().Misses) })
	counter("spillway_store_evictions_total", "Items evicted from the owned store under memory pressure.", func() float64 { return float64(s.store.Stats().Evictions) })
	gauge("spillway_store_items", "Items in the owned store.", func() float64 { return float64(s.store.Stats().CurrItems) })
	gauge("spillway_store_bytes", "Bytes counted against the memory limit.", func() float64 { return float64(s.store.Stats().Bytes) })
	gauge("spillway_copies", "Copies of other nodes' keys held here.", func() float64 {
		if s.cl == nil {
			return 0
		}
		return float64(s.cl.copies.Stats().CurrItems)
	})
	gauge("spillway_cluster_nodes", "Members in this node's ring.", func() float64 {
		if s.cl == nil {
			return 1
		}
		return float64(s.cl.view.Load().ring.Len())
	})
	gauge("spillway_curr_connections", "Open client connections.", func() float64 { return float64(s.stats.currConns.Load()) })
	return m
}

// MetricsHandler serves Prometheus metrics at /metrics, the ring at
// /debug/ring (JSON: members, vnodes, shares and loads) and Go's profiles
// at /debug/pprof/.
func (s *Server) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.updateLoadGauge()
		promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/ring", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(s.ringInfo())
	})
	return mux
}

func (s *Server) updateLoadGauge() {
	if s.cl == nil {
		return
	}
	for _, l := range s.cl.picker.Loads() {
		s.metrics.load.WithLabelValues(l.ID).Set(l.Load)
	}
}

// RingMember is one node in /debug/ring and "stats cluster".
type RingMember struct {
	ID     string  `json:"id"`
	Client string  `json:"client"`
	Peer   string  `json:"peer"`
	Weight int     `json:"weight"`
	Share  float64 `json:"share"`
	Load   float64 `json:"load"`
	Self   bool    `json:"self,omitempty"`
}

// RingInfo is the JSON of /debug/ring.
type RingInfo struct {
	Self    string       `json:"self"`
	VNodes  int          `json:"vnodes"`
	Epsilon float64      `json:"epsilon"`
	Load    string       `json:"load_mode"`
	Members []RingMember `json:"members"`
}

func (s *Server) ringInfo() RingInfo {
	if s.cl == nil {
		return RingInfo{Members: []RingMember{{ID: "", Share: 1, Self: true}}}
	}
	v := s.cl.view.Load()
	loads := map[string]float64{}
	for _, l := range s.cl.picker.Loads() {
		loads[l.ID] = l.Load
	}
	eps := s.cl.cfg.Picker.Epsilon
	info := RingInfo{Self: s.cl.self, VNodes: v.ring.VNodes(), Epsilon: eps, Load: s.cl.cfg.Picker.Load.String()}
	for _, n := range v.ring.Nodes() {
		m := RingMember{ID: n.ID, Weight: n.Weight, Share: v.ring.Share(n.ID), Load: loads[n.ID], Self: n.ID == s.cl.self}
		if meta, ok := s.cl.peers.Meta(n.ID); ok {
			m.Client, m.Peer = meta.Client, meta.Peer
		}
		info.Members = append(info.Members, m)
	}
	return info
}
