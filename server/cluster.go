package server

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"spillway/peers"
	"spillway/ring"
	"spillway/store"
)

// Defaults of ClusterConfig.
const (
	DefaultCopyTTL           = 5 * time.Second
	DefaultCopyMaxBytes      = 16 << 20
	DefaultPeerTimeout       = 500 * time.Millisecond
	DefaultPeerMaxIdle       = 64
	DefaultOwnerGrace        = 30 * time.Second
	DefaultInvalidateTimeout = 100 * time.Millisecond
)

// ClusterConfig makes a node one of a cluster. The node joins through
// Peers (gossip) and advertises its client and peer addresses in
// Peers.Meta; Serve and ServePeers must listen on those addresses.
type ClusterConfig struct {
	// Peers configures membership.
	Peers peers.Config
	// Picker configures the bounded-load ring: Epsilon (0 means 0.25,
	// +Inf is plain consistent hashing), Load (rate or in-flight) and
	// spill Order.
	Picker ring.PickerConfig
	// CopyMaxBytes is the memory for copies of keys this node serves but
	// does not own, apart from the owned items' budget so that copies never
	// evict owned items. If zero, DefaultCopyMaxBytes.
	CopyMaxBytes int64
	// CopyTTL bounds how long a copy lives, and so how stale a copy can be
	// when an invalidation is lost. If zero, DefaultCopyTTL.
	CopyTTL time.Duration
	// PeerTimeout bounds each request to a peer. If zero, DefaultPeerTimeout.
	PeerTimeout time.Duration
	// PeerMaxIdle is the number of idle connections kept per peer. If zero,
	// DefaultPeerMaxIdle.
	PeerMaxIdle int
	// OwnerGrace is how long after a membership change a key's new owner
	// reads a miss through from the key's previous owner before the origin,
	// so that a join or leave does not become an origin stampede. If zero,
	// DefaultOwnerGrace.
	OwnerGrace time.Duration
	// InvalidateTimeout bounds how long a write waits for copies to be
	// invalidated before it answers. If zero, DefaultInvalidateTimeout.
	InvalidateTimeout time.Duration

	// viewGate, if set, is called with the members of each ring learned
	// from gossip before this node installs it; it may block, to hold the
	// node's view back. The history checker uses it to make views
	// disagree for seconds, as they can on a real network.
	viewGate func(members []string)
}

func (c *ClusterConfig) setDefaults() {
	if c.CopyMaxBytes == 0 {
		c.CopyMaxBytes = DefaultCopyMaxBytes
	}
	if c.CopyTTL == 0 {
		c.CopyTTL = DefaultCopyTTL
	}
	if c.PeerTimeout == 0 {
		c.PeerTimeout = DefaultPeerTimeout
	}
	if c.PeerMaxIdle == 0 {
		c.PeerMaxIdle = DefaultPeerMaxIdle
	}
	if c.OwnerGrace == 0 {
		c.OwnerGrace = DefaultOwnerGrace
	}
	if c.InvalidateTimeout == 0 {
		c.InvalidateTimeout = DefaultInvalidateTimeout
	}
}

// cluster is a node's view of the others.
type cluster struct {
	cfg    ClusterConfig
	self   string
	selfH  uint64
	peers  *peers.Peers
	picker *ring.Picker
	copies *store.Store

	// view is the current membership: ring, peer clients and the
	// previous ring, swapped as one on every change.
	view atomic.Pointer[view]

	holders holders
	gens    copyGens
	// fetchTimeout bounds a read sent to a peer: PeerTimeout plus the
	// origin timeout, since the peer may be loading the key.
	fetchTimeout time.Duration

	// mu serialises install: the applier and newCluster's first call.
	mu sync.Mutex

	// next holds the latest ring gossip reported and not yet installed;
	// the applier goroutine installs it (only the latest: intermediate
	// rings are skipped). memberlist calls onChange under its own lock,
	// so onChange only hands the ring over.
	next     chan *ring.Ring
	stop     chan struct{}
	appliers sync.WaitGroup
}

// view is an immutable snapshot of the membership.
type view struct {
	ring    *ring.Ring
	clients map[string]*peerClient // by node ID, self excluded
	byHash  map[uint64]string      // node ID by idHash, for copy holders
	// prev is the ring before the last change, and until is when its
	// owners stop being asked for keys that moved.
	prev  *ring.Ring
	until time.Time
}

// idHash names a node in a short opaque token. A node puts its own in the
// tag of its read-throughs and the owner looks it up in its own view, so
// it must be the same in every process: a fixed hash, not a seeded one.
func idHash(id string) uint64 { return xxhash.Sum64String(id) }

// newCluster joins the cluster. originTimeout lengthens the deadline of
// reads sent to peers: the peer may be filling the key from the origin.
func newCluster(cfg ClusterConfig, originTimeout time.Duration) (*cluster, error) {
	cfg.setDefaults()
	copies, err := store.New(store.Config{MaxBytes: cfg.CopyMaxBytes})
	if err != nil {
		return nil, err
	}
	picker, err := ring.NewPicker(nil, cfg.Picker)
	if err != nil {
		copies.Close()
		return nil, err
	}
	cl := &cluster{cfg: cfg, picker: picker, copies: copies, fetchTimeout: cfg.PeerTimeout + originTimeout,
		next: make(chan *ring.Ring, 1), stop: make(chan struct{})}
	cl.view.Store(&view{ring: ring.New(nil, ring.Config{})})
	p, err := peers.Join(cfg.Peers, cl.onChange)
	if err != nil {
		copies.Close()
		return nil, fmt.Errorf("join: %w", err)
	}
	cl.mu.Lock()
	cl.peers = p
	cl.self = p.Self()
	cl.selfH = idHash(cl.self)
	cl.mu.Unlock()
	cl.install(p.Ring())
	cl.appliers.Add(1)
	go cl.apply()
	return cl, nil
}

// onChange hands a ring learned from gossip to the applier. memberlist
// calls it under its own lock, so it never blocks: a ring not yet
// installed is replaced by the newer one.
func (cl *cluster) onChange(r *ring.Ring) {
	for {
		select {
		case cl.next <- r:
			return
		default:
		}
		select {
		case <-cl.next:
		default:
		}
	}
}

// apply installs the rings onChange hands over, one at a time, until close.
func (cl *cluster) apply() {
	defer cl.appliers.Done()
	for {
		select {
		case <-cl.stop:
			return
		case r := <-cl.next:
			if cl.cfg.viewGate != nil {
				ids := make([]string, 0, r.Len())
				for _, n := range r.Nodes() {
					ids = append(ids, n.ID)
				}
				cl.cfg.viewGate(ids)
			}
			cl.install(r)
		}
	}
}

// install makes r this node's view: peer clients for new members, then
// one swap.
func (cl *cluster) install(r *ring.Ring) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	old := cl.view.Load()
	if old.ring.Len() > 0 && sameMembers(old.ring, r) {
		return
	}
	nv := &view{ring: r, clients: make(map[string]*peerClient), byHash: make(map[uint64]string)}
	for _, n := range r.Nodes() {
		nv.byHash[idHash(n.ID)] = n.ID
		if n.ID == cl.self {
			continue
		}
		meta, ok := cl.peers.Meta(n.ID)
		if !ok {
			continue
		}
		if pc, ok := old.clients[n.ID]; ok && pc.addr == meta.Peer {
			nv.clients[n.ID] = pc
			continue
		}
		nv.clients[n.ID] = newPeerClient(meta.Peer, cl.cfg.PeerTimeout, cl.fetchTimeout, cl.cfg.PeerMaxIdle)
	}
	switch {
	case old.ring.Len() > 0:
		nv.prev = old.ring
		nv.until = time.Now().Add(cl.cfg.OwnerGrace)
	case r.Len() > 1:
		// A node joining a running cluster: the keys it now owns were
		// owned by the others, as in the ring without it.
		var others []ring.Node
		for _, n := range r.Nodes() {
			if n.ID != cl.self {
				others = append(others, n)
			}
		}
		nv.prev = ring.New(others, ring.Config{VNodes: cl.cfg.Peers.VNodes})
		nv.until = time.Now().Add(cl.cfg.OwnerGrace)
	}
	cl.picker.Swap(r)
	cl.view.Store(nv)
	for id, pc := range old.clients {
		if nv.clients[id] != pc {
			pc.close()
		}
	}
}

func sameMembers(a, b *ring.Ring) bool {
	an, bn := a.Nodes(), b.Nodes()
	if len(an) != len(bn) {
		return false
	}
	for i := range an {
		if an[i] != bn[i] {
			return false
		}
	}
	return true
}

// previousOwner returns the node that owned key before the last membership
// change, if that was recent and it was another node.
func (v *view) previousOwner(key, self string, now time.Time) string {
	if v.prev == nil || now.After(v.until) {
		return ""
	}
	prev := v.prev.Owner(key)
	if prev == self || prev == v.ring.Owner(key) {
		return ""
	}
	return prev
}

func (cl *cluster) close() {
	cl.peers.Shutdown()
	close(cl.stop)
	cl.appliers.Wait()
	if v := cl.view.Load(); v != nil {
		for _, pc := range v.clients {
			pc.close()
		}
	}
	cl.copies.Close()
}

// Opaque tags mark what a peer asks for in an mg on the peer port. They are
// made by peers only: an entry node rebuilds every request it forwards.
const (
	tagForward = "fwd." // a read routed here: serve it, reading through if need be
	tagFetch   = "get." // a read-through from a spilled node: local or origin only
	tagWarm    = "old." // a new owner asking its predecessor: local only
	tagInval   = "inv." // drop the copy of this key
)

func (cl *cluster) tag(kind string) string {
	return kind + strconv.FormatUint(cl.selfH, 36)
}

// holders remembers which peers may hold a copy of which key, so that a
// write can invalidate them. An entry is dropped when the write takes it or
// when it is older than a copy can be.
type holders struct {
	mu sync.Mutex
	m  map[string][]holder // guarded by mu
	n  int                 // guarded by mu: entries added since the last sweep
}

type holder struct {
	node uint64 // idHash of the node
	at   time.Time
}

// maxHolderKeys bounds the registry's memory; past it entries are dropped
// (a lost invalidation is bounded by the copy TTL anyway).
const maxHolderKeys = 1 << 20

func (h *holders) add(key string, node uint64, now time.Time, ttl time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[string][]holder)
	}
	hs := h.m[key]
	for i := range hs {
		if hs[i].node == node {
			hs[i].at = now
			return
		}
	}
	h.m[key] = append(hs, holder{node: node, at: now})
	h.n++
	if h.n > 4096 || len(h.m) > maxHolderKeys {
		h.sweepLocked(now, ttl)
	}
	// Still full of live entries: forget some. Their copies then live
	// out their TTL instead of being invalidated.
	for k := range h.m {
		if len(h.m) <= maxHolderKeys {
			break
		}
		delete(h.m, k)
	}
}

// take removes and returns the nodes that may hold a live copy of key.
func (h *holders) take(key string, now time.Time, ttl time.Duration) []uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	hs, ok := h.m[key]
	if !ok {
		return nil
	}
	delete(h.m, key)
	var out []uint64
	for _, x := range hs {
		if now.Sub(x.at) <= ttl {
			out = append(out, x.node)
		}
	}
	return out
}

func (h *holders) sweepLocked(now time.Time, ttl time.Duration) {
	h.n = 0
	for k, hs := range h.m {
		live := hs[:0]
		for _, x := range hs {
			if now.Sub(x.at) <= ttl {
				live = append(live, x)
			}
		}
		if len(live) == 0 {
			delete(h.m, k)
		} else {
			h.m[k] = live
		}
	}
}

func (h *holders) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}

// copyGens counts, per stripe of keys, the writes and invalidations this
// node has seen, so that a copy fetched before one of them is not kept
// after it. Keys share a stripe: a write to one only makes a fill of
// another in the same stripe skip keeping its copy, once.
type copyGens struct {
	stripes [256]copyGen
}

type copyGen struct {
	mu  sync.Mutex
	gen uint64 // guarded by mu
	_   [48]byte
}

func (g *copyGens) stripe(key string) *copyGen {
	return &g.stripes[xxhash.Sum64String(key)&255]
}

func (g *copyGens) current(key string) uint64 {
	st := g.stripe(key)
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.gen
}
