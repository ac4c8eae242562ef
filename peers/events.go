package peers

import (
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"spillway/ring"
)

// Member states, as logged ("peers: member left").
const (
	stateAlive = "alive" // in the ring (if its meta is usable)
	stateLeft  = "left"  // left gracefully (Leave)
	stateDead  = "dead"  // removed by failure detection
)

// maxDeparted bounds how many departed members events remembers (so that
// the leave which follows a leaving announcement is not logged twice), so a
// cluster with churning node names does not grow without bound.
const maxDeparted = 32

// member is what events knows of one node. It is not modified once it is
// in e.nodes, so views share it.
type member struct {
	addr  string // gossip address
	meta  Meta
	err   error // why meta could not be decoded; such a member is not in the ring
	state string
	died  time.Time // when it departed: failure detection removed it (state dead), or it left
}

// view is an immutable snapshot of the membership, swapped atomically on
// every change so that the hot path (Ring, Meta) takes no lock.
type view struct {
	ring  *ring.Ring
	nodes map[string]*member // alive and recently departed members, self included
}

// events implements memberlist.Delegate and memberlist.EventDelegate.
// memberlist calls the Notify methods one at a time, but while holding its
// node lock; so they only update maps and swap the view, and onChange must
// be cheap and must not call back into memberlist.
type events struct {
	self     string
	selfMeta Meta
	meta     atomic.Pointer[[]byte] // encoded selfMeta, returned by NodeMeta
	ringCfg  ring.Config
	log      *slog.Logger
	onChange func(*ring.Ring)

	cur atomic.Pointer[view]

	mu       sync.Mutex // guards everything below, and serialises onChange
	nodes    map[string]*member
	departed []string // IDs of departed members, oldest first
	started  bool     // onChange has had its first call; later changes are delivered
	closed   bool     // Shutdown ran: ignore late events
}

func newEvents(self string, meta []byte, cfg *Config, onChange func(*ring.Ring)) *events {
	e := &events{
		self:     self,
		selfMeta: cfg.Meta,
		ringCfg:  ring.Config{VNodes: cfg.VNodes},
		log:      cfg.Logger,
		onChange: onChange,
		nodes:    make(map[string]*member),
	}
	e.meta.Store(&meta)
	e.rebuildLocked()
	return e
}

// NodeMeta implements memberlist.Delegate. Join checked that even the
// leaving form fits (memberlist panics on meta over the limit).
func (e *events) NodeMeta(limit int) []byte { return *e.meta.Load() }

// setLeaving makes NodeMeta announce that this node is leaving.
func (e *events) setLeaving() {
	b, err := encodeMeta(e.selfMeta, true)
	if err != nil {
		return // cannot happen: Join validated this form
	}
	e.meta.Store(&b)
}

// NotifyMsg implements memberlist.Delegate; spillway sends no user messages.
func (e *events) NotifyMsg([]byte) {}

// GetBroadcasts implements memberlist.Delegate.
func (e *events) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState implements memberlist.Delegate; all state is in Node.Meta.
func (e *events) LocalState(join bool) []byte { return nil }

// MergeRemoteState implements memberlist.Delegate.
func (e *events) MergeRemoteState(buf []byte, join bool) {}

// NotifyJoin implements memberlist.EventDelegate.
func (e *events) NotifyJoin(n *memberlist.Node) { e.update(n, false) }

// NotifyUpdate implements memberlist.EventDelegate: a member's meta changed,
// e.g. because it announced its leave.
func (e *events) NotifyUpdate(n *memberlist.Node) { e.update(n, false) }

// NotifyLeave implements memberlist.EventDelegate. memberlist reports a
// graceful leave and a failure alike here (n.State is never set): a member
// that announced its leave in its meta left, any other died.
func (e *events) NotifyLeave(n *memberlist.Node) { e.update(n, true) }

// update records what memberlist reported about n and publishes the result.
// n belongs to memberlist: read it here, keep nothing of it.
func (e *events) update(n *memberlist.Node, gone bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	m := &member{
		addr:  net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))),
		state: stateAlive,
	}
	var leaving bool
	m.meta, leaving, m.err = decodeMeta(n.Meta)
	switch {
	case leaving:
		m.state = stateLeft
		if gone {
			m.died = time.Now()
		}
	case gone:
		m.state, m.died = stateDead, time.Now()
	}
	state := m.state
	if m.err != nil && n.Name != e.self {
		e.log.Warn("peers: member has unusable meta; keeping it out of the ring",
			"member", n.Name, "addr", m.addr, "err", m.err)
	}
	old := e.nodes[n.Name]
	e.nodes[n.Name] = m
	e.departed = slices.DeleteFunc(e.departed, func(id string) bool { return id == n.Name })
	if state != stateAlive {
		e.departed = append(e.departed, n.Name)
		if len(e.departed) > maxDeparted {
			delete(e.nodes, e.departed[0])
			e.departed = e.departed[1:]
		}
	}
	if old == nil || old.state != state || old.meta != m.meta {
		e.log.Info("peers: member "+state, "member", n.Name, "addr", m.addr,
			"client", m.meta.Client, "peer", m.meta.Peer, "weight", m.meta.Weight)
	}
	prev := e.cur.Load().ring
	e.rebuildLocked()
	// Skip news that leaves the ring and its members' meta as they were
	// (a meta change of a member outside it, the leave that follows a
	// leaving announcement). A member of the ring whose meta changed (a
	// restart: new boot ID, maybe a new address) is news: the ring is the
	// same, but who answers for it is not.
	next := e.cur.Load().ring
	metaChanged := old != nil && old.meta != m.meta && state == stateAlive && next.Has(n.Name)
	if e.started && (metaChanged || !slices.Equal(prev.Nodes(), next.Nodes())) {
		e.onChange(next)
	}
}

// start delivers the first ring to onChange; from then on every change is
// delivered. Join calls it once the node has joined, so the first ring
// already holds the members the seeds told us about.
func (e *events) start() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.started = true
	e.onChange(e.cur.Load().ring)
}

// close stops event handling. memberlist can still deliver a late event
// after its Shutdown (suspicion timers), hence closed.
func (e *events) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
}

// rebuildLocked builds a new view from e.nodes: the ring of the alive members
// with usable meta. Every node runs this on the same member list, so all
// build the same ring.
func (e *events) rebuildLocked() {
	var nodes []ring.Node
	for id, m := range e.nodes {
		if m.state == stateAlive && m.err == nil {
			nodes = append(nodes, ring.Node{ID: id, Weight: m.meta.Weight})
		}
	}
	e.cur.Store(&view{ring: ring.New(nodes, e.ringCfg), nodes: maps.Clone(e.nodes)})
}
