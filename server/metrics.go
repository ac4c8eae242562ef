package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the node's Prometheus series, on a registry of its own so
// that several nodes can live in one process (tests, bench --local).
type metrics struct {
	reg     *prometheus.Registry
	routing *prometheus.CounterVec
}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.routing = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cache_routing_requests_total",
		Help: "Reads counted once by their entry node, by the node that served them: status primary if it owns the key, displaced if the read spilled.",
	}, []string{"node_id", "status"})
	m.reg.MustRegister(m.routing, newLatencyCollector(&s.latencies), loadCollector{s})

	m.reg.MustRegister(newStatsCollector(s))
	return m
}

// statsCollector exports the statLines that have a Prometheus name,
// sampling them once per scrape: the figures "stats" shows are the same
// figures, not a second count of the same events.
type statsCollector struct {
	s     *Server
	descs []*prometheus.Desc // one per statLines entry; nil where prom is ""
}

func newStatsCollector(s *Server) *statsCollector {
	c := &statsCollector{s: s, descs: make([]*prometheus.Desc, len(statLines))}
	for i, l := range statLines {
		if l.prom != "" {
			c.descs[i] = prometheus.NewDesc(l.prom, l.help, nil, nil)
		}
	}
	return c
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		if d != nil {
			ch <- d
		}
	}
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	v := c.s.statsView()
	for i, d := range c.descs {
		if d == nil {
			continue
		}
		l := &statLines[i]
		vt := prometheus.GaugeValue
		if l.kind == kindCounter {
			vt = prometheus.CounterValue
		}
		ch <- prometheus.MustNewConstMetric(d, vt, float64(l.value(v)), nil...)
	}
}

// MetricsHandler serves Prometheus metrics at /metrics, the ring at
// /debug/ring (JSON: members, vnodes, shares and loads), Go's profiles
// at /debug/pprof/, and probes for an orchestrator: /healthz answers 200
// while the process answers HTTP at all (liveness), /readyz 200 while the
// node takes clients and 503 from the moment it begins to shut down
// (readiness: it has left the cluster and drains).
func (s *Server) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if s.closing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "shutting down\n")
			return
		}
		io.WriteString(w, "ready\n")
	})
	mux.Handle("/metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
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

// loadCollector exports the bounded-load picker's view at each scrape:
// the load it counts towards each node of the current ring and the
// capacity at which it passes the node over. A node that left the ring
// leaves the series with it.
type loadCollector struct{ s *Server }

var (
	loadDesc = prometheus.NewDesc("cache_node_active_load",
		"The bounded-load picker's current load for each node, as this node counts it.", []string{"node_id"}, nil)
	capacityDesc = prometheus.NewDesc("cache_node_load_capacity",
		"The bounded-load picker's capacity for each node: (1+epsilon) times the node's share of the total load, in the unit of cache_node_active_load; a node at its capacity is passed over.",
		[]string{"node_id"}, nil)
)

func (c loadCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- loadDesc
	ch <- capacityDesc
}

func (c loadCollector) Collect(ch chan<- prometheus.Metric) {
	if c.s.cl == nil {
		return
	}
	for _, l := range c.s.cl.picker.Loads() {
		ch <- prometheus.MustNewConstMetric(loadDesc, prometheus.GaugeValue, l.Load, l.ID)
		ch <- prometheus.MustNewConstMetric(capacityDesc, prometheus.GaugeValue, l.Capacity, l.ID)
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
	info := RingInfo{Self: s.cl.id, VNodes: v.ring.VNodes(), Epsilon: eps, Load: s.cl.cfg.Picker.Load.String()}
	for _, n := range v.ring.Nodes() {
		m := RingMember{ID: n.ID, Weight: n.Weight, Share: v.ring.Share(n.ID), Load: loads[n.ID], Self: n.ID == s.cl.id}
		if meta, ok := s.cl.peers.Meta(n.ID); ok {
			m.Client, m.Peer = meta.Client, meta.Peer
		}
		info.Members = append(info.Members, m)
	}
	return info
}
