package server

import (
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"spillway/peers"
	"spillway/peers/wire"
	"spillway/ring"
)

// A node's view of the membership: the ring it routes by (gossip's
// members, those known from fences, less itself while it leaves), the
// history of views that decides which stored items it may serve
// (ownership.go), and the hand-off state of the keys it gained (fence.go).
// Views are installed one at a time, under cl.mu, by the applier goroutine
// (rings from gossip), by fences and by leave.

// fenceRecord is a member known from a fence rather than from gossip.
type fenceRecord struct {
	meta peers.Meta
	at   time.Time
}

// view is an immutable snapshot of the membership.
type view struct {
	ring    *ring.Ring
	boots   map[string]string       // each member's run (boot ID), self excluded
	clients map[string]*wire.Client // by node ID, self excluded
	// sharedReads holds the members that answer reads on shared
	// connections (peers.Meta.SharedReads); the others are read the older
	// way, each request on a connection of its own.
	sharedReads map[string]bool
	// sharedFetches holds the members that also answer read-throughs of
	// spilled keys there, when they hold them (peers.Meta.SharedFetches).
	sharedFetches map[string]bool
	byHash        map[uint64]string // node ID by idHash, for copy holders
	// base is the last ring whose hand-off completed (see installLocked):
	// its owners are the previous owners of keys this node gained, asked
	// for them until the owner grace ends (until). done is closed when
	// this view's hand-off completes (at once if it gained nothing).
	base  *ring.Ring
	until time.Time
	done  chan struct{}
	// departed holds the owners in base that left the ring: their keys
	// are warmed from them too, while they drain (Server.Shutdown).
	departed map[string]*departed
	// gains: this node owns keys in ring that it did not own in base.
	// entering holds the members that are new in this view, or under
	// another run: settle fences every member when the view gains keys,
	// else only these.
	gains    bool
	entering map[string]bool
	// pending holds the members whose run's word on owning apart this
	// node had not had when it installed the view (merge.go): until each
	// has given it, or noWord gave up on it (heardFrom, under the
	// cluster's mu), heardAll is open and this node owns none of its keys
	// (holding).
	pending   map[string]bool
	heardFrom map[string]bool
	heardAll  chan struct{}
}

// departed is a previous owner that left. Once it fails to answer, this
// node never warms from it again: a write here that could not clear the
// key there must not be undone by a later warm read of the old value.
type departed struct {
	pc     *wire.Client
	failed atomic.Bool
}

// warmFrom returns the client to warm keys from their previous owner id:
// a member, or a departed owner that has not failed.
func (v *view) warmFrom(id string) (*wire.Client, *departed) {
	if pc := v.clients[id]; pc != nil {
		return pc, nil
	}
	if d := v.departed[id]; d != nil && !d.failed.Load() {
		return d.pc, d
	}
	return nil, nil
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

// tend lets fences that gossip never confirmed lapse, and renews this
// node's own fences where gossip has not caught up, until close. It runs
// apart from apply, whose gossip may be held back.
func (cl *cluster) tend() {
	defer cl.tasks.Done()
	tick := time.NewTicker(max(cl.cfg.FenceTTL/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-cl.stop:
			return
		case <-tick.C:
			cl.mu.Lock()
			cl.installLocked()
			cl.mu.Unlock()
			cl.renewFences()
		}
	}
}

// apply installs the rings onChange hands over, one at a time, until
// close.
func (cl *cluster) apply() {
	defer cl.tasks.Done()
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
			cl.tellReturning(r)
			cl.mu.Lock()
			cl.gossip = r
			cl.installLocked()
			cl.mu.Unlock()
		}
	}
}

// tellReturning warns each member that comes back into the ring under the
// boot ID it had when this node saw it go (so it was declared dead, not
// restarted) that it was: it then drops what it owned, which the others
// may have overwritten meanwhile. It is told before this node routes to it
// again; an unreachable one is still partitioned and is told nothing here.
// Either way it is marked returning: this node's fences, and its answers
// to the member's, tell it again until it has answered one of this node's
// (merge.go). The member enters the view as any member does: this node
// owns none of its keys until it has had the member's word.
//
// Interleavings after a partition heals (X and Y each saw the other go):
//   - X's view brings Y back first: Y is told by X's word, then by X's
//     fence, and answers the fence with Dead (Y still holds X gone), so X
//     drops what it holds before it owns a key again.
//   - Both views bring the other back at once: each fence carries Dead,
//     each reply too; both drop everything, twice at worst.
//   - X told Y (gone forgotten) but its fence is not answered yet when Y's
//     fence arrives: X answers it with Dead from returning, so Y cannot
//     settle on the strength of a tell still in flight.
func (cl *cluster) tellReturning(r *ring.Ring) {
	cl.mu.Lock()
	if old := cl.gossip; old != nil {
		for _, n := range old.Nodes() {
			if !r.Has(n.ID) && n.ID != cl.id {
				// The run gossip saw go, besides any this node's view
				// held (a later one it learned of from its fence).
				cl.gone.add(n.ID, cl.gossipBoots[n.ID], cl.srv.cfg.Now())
			}
		}
	}
	var back []peers.Meta
	for _, n := range r.Nodes() {
		if m, ok := cl.peers.Meta(n.ID); ok && m.Boot != "" && cl.gone.take(n.ID, m.Boot) {
			back = append(back, m)
			cl.returning[n.ID] = m.Boot
		}
	}
	cl.mu.Unlock()
	for _, m := range back {
		pc := cl.dial(m.Peer)
		_, err := cl.sendControl(pc, "dead", []byte(m.Boot))
		pc.Close()
		cl.log.Info("told a member that comes back that it was declared dead", "member", m.Peer, "err", err)
	}
}

// effectiveLocked returns the members this node routes to: gossip's, those
// known from fences, less this node while it leaves, less members that
// route differently. mu held.
func (cl *cluster) effectiveLocked(now time.Time) ([]ring.Node, map[string]peers.Meta) {
	metas := make(map[string]peers.Meta)
	gossipBoot := make(map[string]string)
	defer func() { cl.gossipBoots = gossipBoot }()
	var nodes []ring.Node
	if cl.gossip != nil {
		for _, n := range cl.gossip.Nodes() {
			if n.ID == cl.id {
				if !cl.leaving {
					nodes = append(nodes, n)
				}
				continue
			}
			m, ok := cl.peers.Meta(n.ID)
			if !ok {
				continue
			}
			if ok, why := cl.compatible(m); !ok {
				if !cl.warned[n.ID] {
					cl.warned[n.ID] = true
					cl.log.Error("member routes differently; keeping it out of this node's ring", "member", n.ID, "reason", why)
				}
				continue
			}
			if uniqueNode(n.ID) == uniqueNode(cl.id) && !cl.warned["cas:"+n.ID] {
				cl.warned["cas:"+n.ID] = true
				cl.log.Warn("member's name hashes to this node's CAS unique bits; rename one", "member", n.ID)
			}
			gossipBoot[n.ID] = m.Boot
			if f, ok := cl.fenced[n.ID]; ok && f.meta.Boot != m.Boot && !newerRun(m.Boot, f.meta.Boot) && now.Sub(f.at) <= cl.cfg.FenceTTL {
				// The member restarted and told this node so before
				// gossip did: its own word has its new address. Not
				// when gossip's run is the newer: the fence is of a run
				// that newer one replaced, taken before gossip had it.
				m = f.meta
			}
			metas[n.ID] = m
			nodes = append(nodes, n)
		}
	}
	for id, f := range cl.fenced {
		gb, inGossip := gossipBoot[id]
		if (inGossip && gb == f.meta.Boot) || cl.gone.has(id, f.meta.Boot) || now.Sub(f.at) > cl.cfg.FenceTTL {
			delete(cl.fenced, id)
			continue
		}
		if inGossip {
			continue // in the ring already, with the fence's meta
		}
		metas[id] = f.meta
		nodes = append(nodes, ring.Node{ID: id, Weight: f.meta.Weight})
	}
	return nodes, metas
}

// installLocked recomputes this node's view and installs it if it
// changed (mu held). Installing waits for writes under way (keyLocks), so
// that none of them stores under the old view once the new one is in
// place; then it drops every copy, since copies are only as good as the
// ownership they were read under; and if this node gained keys, it fences
// their previous owners (settle) before it serves them.
func (cl *cluster) installLocked() {
	now := cl.srv.cfg.Now()
	nodes, metas := cl.effectiveLocked(now)
	r := ring.New(nodes, ring.Config{VNodes: cl.cfg.Peers.VNodes})
	old := cl.view.Load()
	restarted := false
	var back map[string]bool // members restarted since: they came back empty
	for id, m := range metas {
		if b, ok := cl.boots[id]; ok && b != m.Boot {
			restarted = true
			if back == nil {
				back = make(map[string]bool)
			}
			back[id] = true
		}
		cl.boots[id] = m.Boot
	}
	if !cl.leaving {
		for id := range back {
			// A run replaced in the view while the member stays in the
			// ring (a restart's fence ahead of lagging gossip, that
			// fence's lapse back to gossip's older run): this node may
			// own its keys without it later, and it may come back
			// (found by review).
			if b := old.boots[id]; b != "" && b != metas[id].Boot {
				cl.gone.add(id, b, now)
			}
		}
	}
	if cl.hist.Load() != nil && sameMembers(old.ring, r) && !restarted {
		return
	}
	cl.installs++
	for _, n := range old.ring.Nodes() {
		if n.ID == cl.id || r.Has(n.ID) {
			continue
		}
		// Out of the view for any reason, a fence's lapse included: this
		// node takes its keys, as if gossip had seen it go. The run the
		// view had is told Dead when it comes back, and so is any other
		// run of the member gone before: when gone held one run per
		// member, a restarted member that entered the view by its fence
		// alone, then lapsed, came back told nothing and served what this
		// node had overwritten (found by review).
		if !cl.leaving {
			cl.gone.add(n.ID, old.boots[n.ID], now)
		}
		delete(cl.together, n.ID)
		cl.lackedAt[n.ID] = cl.installs
	}
	// Forgotten for the members out of the ring:
	//   - heard: a word had while out of the view is no word for its
	//     return (a late answer, found by review);
	//   - wordDue: its return waits anew (TestHealWordWaitRestartsOnReturn);
	//   - returning: out of the ring again before a fence told it, gossip
	//     dropped it (gone holds it anew, and its return marks it again),
	//     or it is another run now (nothing to tell).
	forgetOutOf(r, cl.heard)
	forgetOutOf(r, cl.wordDue)
	forgetOutOf(r, cl.returning)
	nv := &view{ring: r, clients: make(map[string]*wire.Client), byHash: make(map[uint64]string),
		sharedReads: make(map[string]bool), sharedFetches: make(map[string]bool),
		departed: make(map[string]*departed), done: make(chan struct{}),
		boots: make(map[string]string), entering: make(map[string]bool), pending: make(map[string]bool),
		heardFrom: make(map[string]bool), heardAll: make(chan struct{})}
	first := cl.hist.Load() == nil
	for _, n := range r.Nodes() {
		if n.ID == cl.id {
			continue
		}
		boot := metas[n.ID].Boot
		nv.boots[n.ID] = boot
		if first {
			cl.together[n.ID] = boot // the members it knew from the start
		}
		// Pending in every view until its word is in, not only the one
		// it entered: a view installed meanwhile for another reason must
		// not lift the hold (found by review).
		if cl.heard[n.ID] != boot {
			nv.pending[n.ID] = true
			if w := cl.wordDue[n.ID]; w.boot != boot {
				cl.wordDue[n.ID] = wordWait{boot: boot, by: now.Add(2 * cl.cfg.PeerTimeout)}
			}
		}
		if !old.ring.Has(n.ID) || back[n.ID] {
			nv.entering[n.ID] = true
		}
	}
	if len(nv.pending) == 0 {
		close(nv.heardAll)
	}
	for _, n := range r.Nodes() {
		nv.byHash[idHash(n.ID)] = n.ID
		if n.ID == cl.id {
			continue
		}
		m := metas[n.ID]
		if m.SharedReads {
			nv.sharedReads[n.ID] = true
		}
		if m.SharedFetches {
			nv.sharedFetches[n.ID] = true
		}
		if pc, ok := old.clients[n.ID]; ok && pc.Addr() == m.Peer {
			nv.clients[n.ID] = pc
			continue
		}
		nv.clients[n.ID] = cl.dial(m.Peer)
	}
	// base is the ring whose owners last held the keys for sure: the last
	// one whose hand-off completed or, on a node that never completed one
	// (it is joining), the ring of the others. The keys this node gains
	// are warmed from their owners in it, for the owner grace: a view
	// installed while a hand-off is under way does not move it, since its
	// owners never served.
	nv.base = cl.settled
	if nv.base == nil && r.Len() > 1 {
		nv.base = r.Without(cl.id)
	}
	if nv.base != nil {
		nv.until = now.Add(cl.cfg.OwnerGrace)
		for _, n := range nv.base.Nodes() {
			if n.ID == cl.id || r.Has(n.ID) {
				continue
			}
			if d := old.departed[n.ID]; d != nil {
				nv.departed[n.ID] = d
			} else if pc := old.clients[n.ID]; pc != nil {
				d := &departed{pc: pc}
				// A flush_all here within the grace may not have reached
				// it (the flushing node's view had dropped it): what it
				// holds may predate the flush, so nothing is warmed from it.
				if at := cl.lastFlush.Load(); at != 0 && now.Sub(time.Unix(0, at)) < cl.cfg.OwnerGrace {
					d.failed.Store(true)
				}
				nv.departed[n.ID] = d
			}
		}
	}

	cl.keys.lockAll()
	cl.hist.Store(cl.hist.Load().push(epoch{seq: cl.srv.store.Seq(), ring: r, at: now}))
	cl.picker.Swap(r)
	cl.view.Store(nv)
	cl.keys.unlockAll()
	cl.dropCopies()
	cl.handBack(old, nv, back)

	for id, pc := range old.clients {
		if d := nv.departed[id]; nv.clients[id] != pc && (d == nil || d.pc != pc) {
			pc.Close()
		}
	}
	for id, d := range old.departed {
		if nv.departed[id] != d {
			d.pc.Close()
		}
	}
	if nv.base != nil {
		nv.gains = gains(nv.base, r, cl.id)
	}
	if cl.leaving || nv.base == nil || (!nv.gains && len(nv.entering) == 0 && len(nv.pending) == 0) {
		cl.settled = r
		close(nv.done)
		if cl.leaving || !cl.returningInLocked(nv) {
			return
		}
		// Nothing to hand off, but a returning member is told Dead in
		// every view until it answers (settle): a view installed and
		// replaced while its fence was lost (a node joined and left)
		// left it to be told at its next gain, an hour on, losing what
		// it acked since (found by review).
	}
	cl.tasks.Add(1)
	go cl.settle(nv)
}

// gains reports whether a node owns keys in r that it did not own in base:
// it is new, or a member of base left or changed weight (a member that
// joins only takes keys away).
func gains(base, r *ring.Ring, self string) bool {
	if !base.Has(self) {
		return r.Has(self)
	}
	for _, n := range base.Nodes() {
		if w, ok := r.Weight(n.ID); !ok || w != n.Weight {
			return true
		}
	}
	return false
}

func sameMembers(a, b *ring.Ring) bool {
	return slices.Equal(a.Nodes(), b.Nodes())
}

// previousOwner returns the node that owned key before the last membership
// change, if that was recent and it was another node.
func (v *view) previousOwner(key, self string, now time.Time) string {
	if v.base == nil || now.After(v.until) {
		return ""
	}
	prev := v.base.Owner(key)
	if prev == self || prev == v.ring.Owner(key) {
		return ""
	}
	return prev
}

// owns reports whether this node owns key in v and may act as its owner:
// the hand-off of a key it gained is complete.
func (cl *cluster) owns(v *view, key string) bool {
	if v.ring.Owner(key) != cl.id {
		return false
	}
	select {
	case <-v.done:
		return true
	default:
		return v.base.Owner(key) == cl.id && !v.holding()
	}
}

// awaitOwnership returns the current view once key's hand-off in it is
// complete or has taken PeerTimeout; the caller checks owns again.
func (cl *cluster) awaitOwnership(key string) *view {
	v := cl.view.Load()
	if v.ring.Owner(key) != cl.id || cl.owns(v, key) {
		return v
	}
	t := time.NewTimer(cl.cfg.PeerTimeout)
	defer t.Stop()
	var heard <-chan struct{} // a key it owned before only waits on word from members
	if v.base != nil && v.base.Owner(key) == cl.id {
		heard = v.heardAll
	}
	select {
	case <-v.done:
	case <-heard:
	case <-t.C:
	}
	return cl.view.Load()
}

// leave makes this node own nothing, at once: it refuses writes and
// routes every read to the others, before it tells them it is going.
func (cl *cluster) leave() {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.leaving = true
	cl.leftView.Store(true)
	cl.installLocked()
}

// valid is the owned store's Valid hook (see viewHistory.valid).
func (cl *cluster) valid(key string, seq uint64) bool {
	h := cl.hist.Load()
	if h == nil {
		return true
	}
	return h.valid(key, seq, cl.id, cl.srv.cfg.Now, cl.cfg.OwnerGrace)
}

// dial returns a client of the peer port at addr.
func (cl *cluster) dial(addr string) *wire.Client {
	return wire.New(wire.Config{Addr: addr, Dial: cl.cfg.dial, MaxIdle: cl.cfg.PeerMaxIdle, MaxValue: cl.srv.cfg.MaxItemSize,
		TLS: cl.cfg.PeerTLS, Secrets: cl.cfg.PeerSecrets})
}

// forgetOutOf deletes from m, a record by member ID, the members r does not
// hold.
func forgetOutOf[V any](r *ring.Ring, m map[string]V) {
	maps.DeleteFunc(m, func(id string, _ V) bool { return !r.Has(id) })
}
