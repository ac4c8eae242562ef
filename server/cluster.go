package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
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
	DefaultPeerMaxIdle       = 16
	DefaultOwnerGrace        = 30 * time.Second
	DefaultInvalidateTimeout = 100 * time.Millisecond
	DefaultHotCopies         = 8
	DefaultFenceTTL          = 30 * time.Second
	DefaultPeerMaxConns      = 4096
	DefaultPeerIdleTimeout   = 5 * time.Minute
	DefaultDrain             = 5 * time.Second
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
	// evict owned items, and for the registry of the copies other nodes
	// hold of this node's keys (holders): a quarter of it goes to the
	// registry (holderShare), the rest to the copies. If zero,
	// DefaultCopyMaxBytes.
	CopyMaxBytes int64
	// CopyTTL bounds how long a copy lives, and so how stale a copy can be
	// when an invalidation is lost. If zero, DefaultCopyTTL.
	CopyTTL time.Duration
	// PeerTimeout bounds each request to a peer. If zero, DefaultPeerTimeout.
	PeerTimeout time.Duration
	// PeerMaxIdle is the number of idle connections kept per peer. If zero,
	// DefaultPeerMaxIdle.
	PeerMaxIdle int
	// PeerMaxConns limits the connections other nodes (or anything that
	// reaches the peer port) hold open to this node's peer port, apart
	// from the client limit. If zero, DefaultPeerMaxConns.
	PeerMaxConns int
	// PeerIdleTimeout closes a peer-port connection that sends nothing for
	// this long; the other node dials again when it needs one. If zero,
	// DefaultPeerIdleTimeout.
	PeerIdleTimeout time.Duration
	// OwnerGrace is how long after a membership change a key's new owner
	// reads a miss through from the key's previous owner before the origin,
	// so that a join or leave does not become an origin stampede. If zero,
	// DefaultOwnerGrace.
	OwnerGrace time.Duration
	// InvalidateTimeout bounds how long a write waits for copies to be
	// invalidated before it answers. If zero, DefaultInvalidateTimeout.
	InvalidateTimeout time.Duration
	// HotCopies is how often a key another node owns must be read here
	// (an estimate over the last few hundred thousand such reads, halved
	// as they age) before this node keeps a copy of it, as it does of a
	// key spilled to it, rather than send each read to the owner (hot.go).
	// If zero, DefaultHotCopies; negative, only spilled keys get copies.
	HotCopies int
	// PeerSecrets, if set, authenticate every connection to and from the
	// peer port (wire.Secrets): the first is presented, any is accepted.
	// A connection without one is closed before any request is read.
	PeerSecrets [][]byte
	// PeerTLS, if set, is the TLS configuration this node dials other
	// peer ports with (its client certificate, the CA it trusts); the
	// peer listener given to ServePeers is then a TLS listener that asks
	// for client certificates.
	PeerTLS *tls.Config
	// Drain is how long a node that shuts down keeps answering its
	// peers after it left, so that the nodes that took its keys warm
	// them from it rather than from the origin (Server.Shutdown). It
	// ends sooner when peers stop asking. If zero, DefaultDrain;
	// negative, no drain.
	Drain time.Duration
	// FenceTTL is how long this node counts a member that announced itself
	// directly (a hand-off fence) before gossip told of it; a fence from a
	// member gossip never reports lapses then. If zero, DefaultFenceTTL.
	FenceTTL time.Duration

	// viewGate, if set, is called with the members of each ring learned
	// from gossip before this node installs it; it may block, to hold the
	// node's view back. The history checker uses it to make views
	// disagree for seconds, as they can on a real network.
	viewGate func(members []string)
	// beforeOwnedRead, if set, is called before a read of an owned key
	// looks in the store (cluster.heldNoWait): a test makes a write land
	// there.
	beforeOwnedRead func(key string)
	// join and dial, if set, replace gossip (peers.Join) and TCP to peer
	// ports: tests run nodes in one process, on an in-memory network.
	join func(cfg peers.Config, onChange func(*ring.Ring)) (membership, error)
	dial func(ctx context.Context, addr string) (net.Conn, error)
	// noSharedReads makes the node one of before shared reads and
	// fetches, for a test of a cluster being upgraded: it does not
	// advertise them, and takes a held-tag read for a client's mg.
	noSharedReads bool
}

// membership is what a node needs of gossip: its name, the ring of live
// members and their metas, and a way out. *peers.Peers is the real one.
type membership interface {
	Self() string
	GossipAddr() string
	Ring() *ring.Ring
	Meta(id string) (peers.Meta, bool)
	Left(id string) (boot string, ok bool)
	Leave(timeout time.Duration) error
	Shutdown() error
}

// gossipJoin joins through memberlist.
func gossipJoin(cfg peers.Config, onChange func(*ring.Ring)) (membership, error) {
	p, err := peers.Join(cfg, onChange)
	if err != nil {
		return nil, err
	}
	return p, nil
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
	if c.PeerMaxConns == 0 {
		c.PeerMaxConns = DefaultPeerMaxConns
	}
	if c.PeerIdleTimeout == 0 {
		c.PeerIdleTimeout = DefaultPeerIdleTimeout
	}
	if c.OwnerGrace == 0 {
		c.OwnerGrace = DefaultOwnerGrace
	}
	if c.InvalidateTimeout == 0 {
		c.InvalidateTimeout = DefaultInvalidateTimeout
	}
	if c.HotCopies == 0 {
		c.HotCopies = DefaultHotCopies
	}
	if c.Drain == 0 {
		c.Drain = DefaultDrain
	}
	if c.FenceTTL == 0 {
		c.FenceTTL = DefaultFenceTTL
	}
}

// cluster is a node's view of the others.
type cluster struct {
	cfg   ClusterConfig
	srv   *Server
	log   *slog.Logger
	id    string // this node's name
	selfH uint64
	// tags are this node's peer tags by kind (tag), made once: one goes
	// with most requests to a peer.
	tags   map[string]string
	boot   string // this incarnation's ID, in the node's meta
	peers  membership
	picker *ring.Picker
	copies *store.Store
	// hot tells the keys owned elsewhere worth a copy here (keepHere).
	hot hotKeys
	// lastFlush is when this node last applied a flush_all (UnixNano; 0:
	// never), for the owners that leave its view after it (installLocked).
	lastFlush atomic.Int64

	// view is the current membership: ring, peer clients, the previous
	// ring and the hand-off state, swapped as one on every change.
	view atomic.Pointer[view]
	// hist is the views so far, for the owned store's Valid hook.
	hist atomic.Pointer[viewHistory]
	// keys is the ownership lock (see ownership.go).
	keys keyLocks

	holders *holders
	// fetchTimeout bounds a read sent to a peer: PeerTimeout plus the
	// origin timeout, since the peer may be loading the key.
	fetchTimeout time.Duration

	// mu guards what follows and serialises installs.
	mu sync.Mutex
	// gossip is the ring gossip last reported and the applier installed.
	gossip *ring.Ring
	// fenced holds members that announced themselves with a hand-off
	// fence (or that a fence reply told of) before gossip reported them.
	fenced map[string]fenceRecord
	// boots is the boot ID last seen of each member, to tell a restart
	// (new ID) from the same run; gone holds the runs that left gossip's
	// ring or this node's view, to tell one declared dead that comes back
	// (same ID).
	boots map[string]string
	gone  goneRuns
	// returning holds the members this node saw go that came back under
	// the same boot ID (a partition healed, a pause ended), by that boot
	// ID: its fences tell them they were declared dead, and so do its
	// answers to theirs, until one of its own has been answered.
	returning map[string]string
	// together holds, by boot ID, the members that have been in every
	// view this node installed since its first, or since they last
	// answered one of its fences: the others it may have owned keys
	// apart from (see merge.go). installs counts installed views, and
	// lackedAt is the count at the last view without a member.
	together map[string]string
	installs uint64
	lackedAt map[string]uint64
	// heard holds, by boot ID, the members in the view whose word on
	// owning apart this node has had: their fence, or their answer to its
	// own.
	heard map[string]string
	// wordDue is, for each member whose word is not in, until when this
	// node waits for it (settle, noWord).
	wordDue map[string]wordWait
	// gossipBoots is the boot ID gossip gave each member of its ring at
	// the last install (boots may hold a newer one, from a fence).
	gossipBoots map[string]string
	// settled is the last ring whose hand-off completed: keys this node
	// owns now and did not own in it wait for the hand-off.
	settled *ring.Ring
	// unconfirmed holds the members whose gossip had not told them of
	// this node when they last answered its fence: renewFences fences
	// them again until it has.
	unconfirmed map[string]bool
	leaving     bool
	// leftView is leaving, readable without mu: a leaving node keeps no
	// copies (putCopy).
	leftView atomic.Bool
	warned   map[string]bool // members already logged as incompatible

	// next holds the latest ring gossip reported and not yet installed;
	// the applier goroutine installs it (only the latest: intermediate
	// rings are skipped). memberlist calls onChange under its own lock,
	// so onChange only hands the ring over.
	next  chan *ring.Ring
	stop  chan struct{}
	tasks sync.WaitGroup // the applier and hand-off goroutines
}

// idHash names a node in a short opaque token. A node puts its own in the
// tag of its read-throughs and the owner looks it up in its own view, so
// it must be the same in every process: a fixed hash, not a seeded one.
func idHash(id string) uint64 { return xxhash.Sum64String(id) }

// Peer protocol version and ring parameters, in every node's meta: nodes
// that disagree on either would each own keys the other also owns, so
// they refuse to mix (see compatible).
const (
	peerProtocol = 2
	ringHash     = "xxh64"
)

// newCluster joins the cluster. originTimeout lengthens the deadline of
// reads sent to peers: the peer may be filling the key from the origin.
func newCluster(cfg ClusterConfig, srv *Server) (*cluster, error) {
	cfg.setDefaults()
	copies, err := store.New(store.Config{MaxBytes: cfg.CopyMaxBytes - holderShare(cfg.CopyMaxBytes), Now: srv.cfg.Now})
	if err != nil {
		return nil, err
	}
	picker, err := ring.NewPicker(nil, cfg.Picker)
	if err != nil {
		copies.Close()
		return nil, err
	}
	cl := &cluster{cfg: cfg, srv: srv, log: srv.cfg.Logger, picker: picker, copies: copies,
		holders:      newHolders(cfg.CopyTTL, holderShare(cfg.CopyMaxBytes)),
		fetchTimeout: cfg.PeerTimeout + srv.cfg.OriginTimeout, boot: newBoot(srv.cfg.Now()),
		fenced: make(map[string]fenceRecord), boots: make(map[string]string), gone: make(goneRuns),
		returning: make(map[string]string), together: make(map[string]string), lackedAt: make(map[string]uint64),
		heard: make(map[string]string), wordDue: make(map[string]wordWait), unconfirmed: make(map[string]bool), warned: make(map[string]bool),
		next: make(chan *ring.Ring, 1), stop: make(chan struct{})}
	cl.view.Store(&view{ring: ring.New(nil, ring.Config{}), done: closedChan, heardAll: closedChan})
	cfg.Peers.Meta.Boot = cl.boot
	// Declared dead by a member and refuted: the others owned this node's
	// keys meanwhile. Drop everything at once, not only when a member that
	// saw it dead tells it so (tellReturning).
	cfg.Peers.OnDeclaredDead = func() { cl.onDeclaredDead([]byte(cl.boot)) }
	cfg.Peers.Meta.Protocol = peerProtocol
	cfg.Peers.Meta.Ring = cl.ringParams()
	cfg.Peers.Meta.SharedReads = !cfg.noSharedReads
	cfg.Peers.Meta.SharedFetches = !cfg.noSharedReads
	join := cfg.join
	if join == nil {
		join = gossipJoin
	}
	p, err := join(cfg.Peers, cl.onChange)
	if err != nil {
		copies.Close()
		return nil, fmt.Errorf("join: %w", err)
	}
	cl.mu.Lock()
	cl.peers = p
	cl.id = p.Self()
	cl.selfH = idHash(cl.id)
	cl.hot.threshold = uint32(max(cfg.HotCopies, 0))
	tags := make(map[string]string)
	for _, kind := range tagKinds {
		tags[kind] = cl.tag(kind)
	}
	cl.tags = tags
	cl.mu.Unlock()
	if err := cl.refuseIncompatible(); err != nil {
		p.Shutdown()
		copies.Close()
		return nil, err
	}
	cl.mu.Lock()
	cl.gossip = p.Ring()
	cl.installLocked()
	cl.mu.Unlock()
	cl.tasks.Add(2)
	go cl.apply()
	go cl.tend()
	return cl, nil
}

// holderShare is the part of the copy budget that the registry of copy
// holders may take. The two fill alike: a registration at the owner for
// each copy made elsewhere within the copy TTL, about 210 bytes plus the
// key each, against the copy's 200 plus key and value (so, with n nodes
// reading each other's keys evenly, about a quarter for 500-byte values
// and two fifths for 100-byte ones). When the registry is full it forgets
// its oldest entries, whose copies then live out their TTL (counted in
// lost_invalidations). Both are charged to --copy-memory so that -m and
// --copy-memory bound the process.
func holderShare(copyMaxBytes int64) int64 { return copyMaxBytes / 4 }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// ringParams is the fingerprint of how this node builds rings.
func (cl *cluster) ringParams() string {
	vn := cl.cfg.Peers.VNodes
	if vn == 0 {
		vn = ring.DefaultVNodes
	}
	return ringHash + "/" + strconv.Itoa(vn)
}

// compatible reports whether a member's meta says it routes as this node
// does; the reason if not.
func (cl *cluster) compatible(m peers.Meta) (bool, string) {
	if m.Protocol != peerProtocol {
		return false, fmt.Sprintf("peer protocol %d, this node speaks %d", m.Protocol, peerProtocol)
	}
	if m.Ring != cl.ringParams() {
		return false, fmt.Sprintf("ring %q, this node builds %q", m.Ring, cl.ringParams())
	}
	return true, ""
}

// refuseIncompatible fails a join into a cluster whose members route
// differently: the node would own keys they own too.
func (cl *cluster) refuseIncompatible() error {
	for _, n := range cl.peers.Ring().Nodes() {
		if n.ID == cl.id {
			continue
		}
		m, ok := cl.peers.Meta(n.ID)
		if !ok {
			continue
		}
		if ok, why := cl.compatible(m); !ok {
			return fmt.Errorf("refusing to join: member %s has %s", n.ID, why)
		}
	}
	return nil
}

func (cl *cluster) close() {
	cl.peers.Shutdown()
	close(cl.stop)
	cl.tasks.Wait()
	if v := cl.view.Load(); v != nil {
		for _, pc := range v.clients {
			pc.Close()
		}
	}
	cl.copies.Close()
}
