package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"spillway/peers"
	"spillway/peers/wire"
)

// The hand-off fence. Views converge at different times on different
// nodes: when B joins, B owns keys that A, which has not heard of B yet,
// still takes for its own. Gossip alone would leave both acking writes of
// those keys. So a node that gains keys (it joined, or a member left or
// died) first sends every member of its view a fence: its meta and its
// members. A member that gets one counts the sender as a member at once
// (until gossip confirms it, or FenceTTL passes), so it stops owning the
// keys the sender gained, waiting for writes under way to finish
// (installLocked), drops all its copies, and answers with the members it
// knows. Only when every member that could have owned a gained key has
// answered does the sender serve those keys; a member it cannot reach
// holds them back until gossip declares that member dead (a later view
// without it), and writes to them fail meanwhile. A member that could not
// have owned them (one that is new in this view) only holds copies; one
// that does not answer within InvalidateTimeout is counted as a lost
// invalidation instead.
//
// Interleavings worth keeping in mind:
//   - Two nodes join at once, each unaware of the other: both fence the
//     old members; whichever reaches a member second learns of the first
//     from its reply, adds it, and fences again with the larger view.
//   - A member's view is held back (slow gossip): the fence installs the
//     sender in it anyway; the gossip view arriving later changes nothing.
//   - A → B → A (B joins and leaves within the owner grace): A's store
//     keeps items of the keys B held, but the view history (ownership.go)
//     refuses them, since A did not own them throughout.
//   - A member that gossip declared dead comes back (a partition healed):
//     it drops everything it owned as soon as it refutes the dead message
//     (peers.Config.OnDeclaredDead), and each node that saw it dead also
//     tells it so before routing to it again (tellReturning), or in the
//     reply to its fence.
//   - A member restarts under its name at another address: its fence
//     carries its new boot ID and address, which win over gossip's meta of
//     the old run until gossip catches up; the fence is renewed
//     (renewFences) while gossip lags, so it does not lapse.
//   - A fence reply names a member that gossip here saw go: it is not
//     brought back (the member that named it lags).

// fenceMsg is what a node that gained keys tells every member.
type fenceMsg struct {
	ID      string     `json:"id"`
	Meta    peers.Meta `json:"meta"`
	Members []string   `json:"members"`
	// Dead, sent to a returning member (cluster.returning), is the boot ID
	// it had when this node saw it go: it was declared dead, and drops
	// what it holds before it answers. Nodes that predate the field ignore
	// it; tellReturning has told them already.
	Dead string `json:"dead,omitempty"`
	// Apart: this node may have owned keys in views without the receiver's
	// run (merge.go).
	Apart bool `json:"apart,omitempty"`
}

// fenceReply is a member's answer: the members it knows (so that two
// nodes joining at once learn of each other) and whether gossip has told
// it of the sender already.
type fenceReply struct {
	Known   bool                  `json:"known"`
	Dead    bool                  `json:"dead,omitempty"`  // this node had declared the sender dead
	Apart   bool                  `json:"apart,omitempty"` // this node may have owned keys in views without the sender's run
	Members map[string]peers.Meta `json:"members"`
	Refused string                `json:"refused,omitempty"`
}

// selfMeta is the meta this node gossips.
func (cl *cluster) selfMeta() peers.Meta {
	m, _ := cl.peers.Meta(cl.id)
	m.Boot, m.Protocol, m.Ring = cl.boot, peerProtocol, cl.ringParams()
	m.SharedReads = !cl.cfg.noSharedReads
	m.SharedFetches = !cl.cfg.noSharedReads
	return m
}

// settle fences every member of v and, once the previous owners have all
// answered, completes v's hand-off (closes v.done). It gives up when a
// later view replaces v: that view settles on its own.
func (cl *cluster) settle(v *view) {
	defer cl.tasks.Done()
	type fenceTo struct {
		payload []byte
		dead    string
		wordBy  time.Time // when this node stops waiting for the member's word
	}
	cl.mu.Lock()
	sent := cl.installs
	fences := make(map[string]fenceTo, len(v.clients))
	for id := range v.clients {
		// A returning member is fenced in every view until it has
		// answered a fence with Dead: a view installed for another reason
		// (a join) replaced the one whose Dead fence was lost, and left it
		// told by a reply only, so told again at its next gain, an hour
		// on, losing what it had acked since (found by review).
		if !v.gains && !v.entering[id] && !v.pending[id] && !cl.returningLocked(id) {
			continue // only the word on owning apart is due (merge.go)
		}
		payload, dead := cl.fenceForLocked(v, id, cl.boots[id])
		fences[id] = fenceTo{payload, dead, cl.wordDue[id].by}
	}
	cl.mu.Unlock()

	var mu sync.Mutex
	learned := make(map[string]peers.Meta)
	unknown := make(map[string]bool) // members whose gossip has not told them of this node
	var wg sync.WaitGroup
	for id, pc := range v.clients {
		f, ok := fences[id]
		if !ok {
			continue
		}
		// It may have owned a key this node gained, or it must learn it
		// was declared dead.
		mustAnswer := v.base.Has(id) || f.dead != ""
		// This node owns none of its keys until it has the member's word
		// (merge.go), or for two peer timeouts: then it drops what it
		// holds and owns its keys empty rather than not at all, since a
		// member whose peer port is out of reach (its TLS or secret
		// differs, a firewall) may stay in gossip for good.
		waitWord := v.pending[id]
		wordBy := f.wordBy // per member run, not per view
		wg.Go(func() {
			deadline := cl.srv.cfg.Now().Add(cl.cfg.InvalidateTimeout)
			for {
				reply, err := cl.fence(pc, f.payload)
				now := cl.srv.cfg.Now()
				if err != nil && waitWord && now.After(wordBy) {
					cl.noWord(v, id, err)
					waitWord = false
				}
				if err == nil {
					cl.answered(id, reply, f.dead, sent)
					mu.Lock()
					unknown[id] = !reply.Known
					for mid, m := range reply.Members {
						if mid != cl.id && !v.ring.Has(mid) {
							learned[mid] = m
						}
					}
					mu.Unlock()
					if m, ok := reply.Members[id]; ok && waitWord && m.Boot != v.boots[id] {
						// Another run answered at the member's address
						// (it restarted, and gossip has yet to say so):
						// its word is not the one v waits for (hear),
						// and no answer of the run v has will come. Give
						// up on it at its time, as for no answer. Had
						// settle returned, v's hand-off would complete,
						// and this node own its keys held or not (owns):
						// without the word and without a drop
						// (TestHoldEndsWhenAnotherRunAnswers).
						cl.awaitWordDue(v, id, wordBy)
					}
					return
				}
				if !mustAnswer && !waitWord && now.After(deadline) {
					cl.srv.lostInvalidation("fence", id, err)
					return
				}
				if !cl.pause(50*time.Millisecond) || cl.view.Load() != v {
					return
				}
			}
		})
	}
	wg.Wait()

	cl.mu.Lock()
	defer cl.mu.Unlock()
	for id, u := range unknown {
		if u {
			cl.unconfirmed[id] = true
		} else {
			delete(cl.unconfirmed, id)
		}
	}
	if cl.view.Load() != v {
		return
	}
	if len(learned) > 0 {
		now := cl.srv.cfg.Now()
		for id, m := range learned {
			if cl.gone.has(id, m.Boot) {
				continue // gossip saw it go; the member that named it lags
			}
			if b, left := cl.peers.Left(id); left && b == m.Boot {
				continue // the same, for a run this node never had in its view
			}
			if ok, _ := cl.compatible(m); ok {
				cl.fenced[id] = fenceRecord{meta: m, at: now}
			}
		}
		cl.installLocked() // a larger view, fenced anew
		if cl.view.Load() != v {
			return
		}
	}
	cl.settled = v.ring
	select {
	case <-v.done: // closed at install: only returning members were told
	default:
		close(v.done)
	}
}

// returningLocked reports whether member id's run in this node's view is
// returning: this node's fences tell it it was declared dead. mu held.
func (cl *cluster) returningLocked(id string) bool {
	b, ok := cl.returning[id]
	return ok && b == cl.boots[id]
}

// returningInLocked reports whether a member of v is returning. mu held.
func (cl *cluster) returningInLocked(v *view) bool {
	for id := range v.clients {
		if cl.returningLocked(id) {
			return true
		}
	}
	return false
}

// answered takes member id's answer to a fence sent at install count
// sent, which told it dead ("" for nothing).
func (cl *cluster) answered(id string, reply fenceReply, dead string, sent uint64) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	boot := cl.boots[id]
	if m, ok := reply.Members[id]; ok {
		boot = m.Boot // the run that answered
	}
	cl.hearLocked(id, boot, reply.Dead, reply.Apart)
	if !cl.view.Load().ring.Has(id) {
		// A late answer: it went meanwhile, and this is no word for its
		// return (found by review).
		delete(cl.heard, id)
	}
	cl.answeredLocked(id, boot, dead, sent)
}

// renewFences fences again the members that had not heard of this node
// from gossip at its last fence. A fence lapses after FenceTTL, and gossip
// can take longer than that (a name that comes back at another address
// waits for its old run's death and for a push-pull); the fence holds
// until gossip catches up.
//
// A leaving node renews none, as it settles no view (installLocked): the
// others have seen it leave, or soon will, and a fence from it would bring
// it back into their views. Found by the history checker's leave scenario
// (about 1 run in 10): the leaver, draining, renewed its fence to a
// member that had not confirmed its join; that member, whose gossip had
// seen it leave, took the fence for its return, put it back in its ring
// — with no peer address, which the leaver's own meta no longer carries
// once it has left the gossip — and routed a third of the keys to it
// (misses, refused writes) until the fence lapsed, up to FenceTTL and a
// quarter later. A renewal (or a settle's fence) already sent when the
// node starts leaving can still land after the member's gossip saw it go:
// the member refuses it (onFence), since a run that left never comes back.
func (cl *cluster) renewFences() {
	cl.mu.Lock()
	if cl.leaving {
		cl.mu.Unlock()
		return
	}
	v := cl.view.Load()
	todo := make(map[string]*wire.Client)
	for id := range cl.unconfirmed {
		if pc := v.clients[id]; pc != nil {
			todo[id] = pc
		} else {
			delete(cl.unconfirmed, id)
		}
	}
	sent := cl.installs
	payloads, deads := make(map[string][]byte), make(map[string]string)
	for id := range todo {
		payloads[id], deads[id] = cl.fenceForLocked(v, id, cl.boots[id])
	}
	cl.mu.Unlock()
	for id, pc := range todo {
		cl.tasks.Go(func() {
			reply, err := cl.fence(pc, payloads[id])
			if err != nil {
				return
			}
			cl.answered(id, reply, deads[id], sent)
			cl.mu.Lock()
			if reply.Known {
				delete(cl.unconfirmed, id)
			}
			cl.mu.Unlock()
		})
	}
}

// awaitWordDue gives up on member id's word in v at wordBy (noWord), unless
// v is replaced or the node stops first.
func (cl *cluster) awaitWordDue(v *view, id string, wordBy time.Time) {
	if cl.pause(wordBy.Sub(cl.srv.cfg.Now())) && cl.view.Load() == v {
		cl.noWord(v, id, errors.New("answered by another run of the member"))
	}
}

// pause waits for d, or less if the node stops first, and reports whether
// it is still running.
func (cl *cluster) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-cl.stop:
		return false
	case <-t.C:
		return true
	}
}

// fence sends one fence and reads the answer.
func (cl *cluster) fence(pc *wire.Client, payload []byte) (fenceReply, error) {
	var reply fenceReply
	value, err := cl.sendControl(pc, "fence", payload)
	if err != nil {
		return reply, err
	}
	if err := json.Unmarshal(value, &reply); err != nil {
		return reply, fmt.Errorf("fence reply: %w", err)
	}
	if reply.Refused != "" {
		return reply, fmt.Errorf("fence refused: %s", reply.Refused)
	}
	return reply, nil
}

// onFence takes a fence from another node: count it as a member now, drop
// every copy, and answer with the members this node knows.
func (cl *cluster) onFence(payload []byte) []byte {
	var msg fenceMsg
	var reply fenceReply
	if err := json.Unmarshal(payload, &msg); err != nil || msg.ID == "" {
		reply.Refused = "malformed fence"
		b, _ := json.Marshal(reply)
		return b
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if ok, why := cl.compatible(msg.Meta); !ok {
		reply.Refused = why
		b, _ := json.Marshal(reply)
		return b
	}
	if boot, left := cl.peers.Left(msg.ID); left && boot == msg.Meta.Boot {
		// A fence the sender sent before it started leaving, landing
		// after gossip here saw it leave: taken, it would be the run's
		// return (gone, below), and bring a node that has gone back into
		// this node's view until the fence lapsed. A run that left never
		// comes back.
		reply.Refused = "that run of " + msg.ID + " left the cluster"
		b, _ := json.Marshal(reply)
		return b
	}
	// This node's word on owning apart, before hearing the sender's (which
	// does not change it: only an answer to this node's own fence does).
	reply.Apart = cl.apartFromLocked(msg.ID, msg.Meta.Boot)
	// Before the reply and before the sender is in this node's view: what
	// this node holds may be stale.
	cl.hearLocked(msg.ID, msg.Meta.Boot, msg.Dead == cl.boot, msg.Apart)
	if cl.supersededLocked(msg.ID, msg.Meta.Boot) {
		// A run that a newer one of the member has replaced: its fence
		// is late (it crashed since, and its kernel delivered what it
		// had queued) or it lives on, cut off, while the newer run has
		// its name. It is told it is dead, and nothing else of it is
		// taken: not as the member, or its fence would stand in this
		// node's view for the newer run, whose word this node would then
		// not wait for, though that run may have owned keys apart from
		// it (TestLateFenceOfAReplacedRun); not as a return, so that it
		// stays gone and is told again if it comes back.
		reply.Dead = true
		reply.Members = map[string]peers.Meta{cl.id: cl.selfMeta()}
		b, _ := json.Marshal(reply)
		return b
	}
	if cl.gone.take(msg.ID, msg.Meta.Boot) {
		// The sender was declared dead and never knew: it comes back
		// with what it owned then, which others have owned since.
		reply.Dead = true
		// Sticky until a fence of this node's own, carrying Dead, is
		// answered by the sender (settle): this reply may be lost.
		cl.returning[msg.ID] = msg.Meta.Boot
	} else if b, ok := cl.returning[msg.ID]; ok && b == msg.Meta.Boot {
		// This node saw the sender go and has not yet had a fence of its
		// own answered by it: tellReturning's word may still be on its
		// way, and the sender may settle before it arrives.
		reply.Dead = true
	}
	gm, inGossip := cl.peers.Meta(msg.ID)
	reply.Known = inGossip && cl.gossip.Has(msg.ID) && gm.Boot == msg.Meta.Boot
	if !reply.Known {
		cl.fenced[msg.ID] = fenceRecord{meta: msg.Meta, at: cl.srv.cfg.Now()}
	}
	cl.installLocked()
	// Copies of keys the sender gained were read from their previous
	// owner, who will not tell this node when the sender overwrites them.
	cl.dropCopies()
	reply.Members = map[string]peers.Meta{cl.id: cl.selfMeta()}
	for _, n := range cl.view.Load().ring.Nodes() {
		if n.ID == cl.id || n.ID == msg.ID {
			continue
		}
		if f, ok := cl.fenced[n.ID]; ok {
			reply.Members[n.ID] = f.meta
		} else if m, ok := cl.peers.Meta(n.ID); ok {
			reply.Members[n.ID] = m
		}
	}
	b, _ := json.Marshal(reply)
	return b
}

// onDeclaredDead is told by a member that it had declared this node dead
// (with this boot ID): the others have owned this node's keys meanwhile,
// so nothing it holds may be served again.
func (cl *cluster) onDeclaredDead(boot []byte) []byte {
	if string(boot) != cl.boot {
		return []byte("other incarnation")
	}
	cl.log.Warn("the cluster declared this node dead; dropping every item it held")
	cl.srv.counters[ctrDeclaredDead].Add(1)
	cl.dropAll()
	return []byte("flushed")
}

// dropAll drops every item this node holds, owned and copies, and fences
// the fills under way.
func (cl *cluster) dropAll() {
	// Not through Server.flushLocal: this can run while New is still
	// joining, before the server knows its cluster.
	cl.srv.gens.bumpAll()
	cl.srv.store.Flush(0)
	cl.copies.Flush(0)
}

// control answers a membership message on the peer port.
func (cl *cluster) control(verb string, payload []byte) []byte {
	switch verb {
	case "fence":
		return cl.onFence(payload)
	case "dead":
		return cl.onDeclaredDead(payload)
	case "handover":
		// A leaving node lists keys this node takes (handover.go).
		return cl.onHandover(payload)
	case "copies":
		// flush_all's second round (see conn.flushAll).
		cl.dropCopiesAfterFlush()
		return []byte("dropped")
	}
	return nil
}
