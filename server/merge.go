package server

import (
	"encoding/json"
	"slices"
	"time"
)

// Merges. A node and a member may each have owned keys in views without
// the other: the two sides of a partition (each declared the other dead),
// a node that ran alone before it found the cluster, a node that restarted
// or joined on one side of a partition, two clusters that formed apart.
// Each then acked writes of keys the other also held, so once they meet,
// what either holds may be older than what the other acked. Neither can
// tell by itself: the member's run may be one this node never saw.
//
// So each node keeps, per member, whether that member's run has been in
// every view it installed since its first, or since the member last
// answered one of its fences (cluster.together): if not, it may have owned
// keys apart from it. Every fence and every answer carries that word
// (Apart), and a node drops every item it holds when both it and the
// member were apart. The declared-dead word (Dead) stays: a member that
// this node saw go, which comes back under the same run, kept owning its
// keys while this node owned them too, even if it never saw this node go.
//
// A member whose run's word this node has not had (its fence, or its
// answer to this node's) holds all of this node's keys, in every view
// until the word is in (view.holding): this node may have to drop what it
// holds first. The wait is bounded per member run (wordDue, two peer
// timeouts): then this node drops what it holds and owns its keys empty
// (noWord). A view's fence goes to every member that entered it or whose
// word is awaited, so that their answers, once no view lacked them since
// it was sent, make them together again.
//
// Interleavings worth keeping in mind:
//   - A normal join: the joiner's first view holds the members, so it
//     was apart from none of them; the members were apart from it (they
//     never saw its run) and say so, but only one side was apart: no one
//     drops anything. The same for a restart that rejoins at once, whose
//     handed-back keys (handover.go) therefore stay.
//   - A node that ran alone (its seeds unreachable), then joins: both
//     apart, both drop what they hold.
//   - A partition heals: each side apart from the other, all drop; those
//     declared dead are told so too.
//   - A node restarts on one side of a partition, or joins it: the other
//     side never saw its run, and it owned keys without the other side;
//     both drop at the heal.
//   - An answer is lost: the word is sticky (together is set only by an
//     answer to this node's own fence), so the retried fence gets the same
//     answer.
//   - A view lacking the member is installed while a fence to it is under
//     way: its answer does not make it together (lackedAt), and, arriving
//     while the member is out of the view, is no word for its return.
//   - A view installed for another reason (a join, a leave) while a word
//     is awaited holds as the one before did, and the wait runs on.

// apartFromLocked reports whether this node may have owned keys in a view
// without member id's run boot since that run last answered its fence.
// mu held.
func (cl *cluster) apartFromLocked(id, boot string) bool { return cl.together[id] != boot }

// fenceForLocked is the fence this node sends member id, whose run in
// this node's view is boot, in view v; dead is the boot ID it tells the
// member it was declared dead under ("" for none). mu held.
func (cl *cluster) fenceForLocked(v *view, id, boot string) (payload []byte, dead string) {
	if b, ok := cl.returning[id]; ok && b == boot {
		dead = b
	}
	msg := fenceMsg{ID: cl.id, Meta: cl.selfMeta(), Dead: dead, Apart: cl.apartFromLocked(id, boot)}
	for _, n := range v.ring.Nodes() {
		msg.Members = append(msg.Members, n.ID)
	}
	payload, _ = json.Marshal(msg)
	return payload, dead
}

// hearLocked takes member id's word, from its fence or its answer to this
// node's: its run is boot; dead, it had declared this node dead; apart, it
// owned keys in views without this node. This node drops every item it
// holds if it must, before it owns a key on the strength of that word.
// mu held.
func (cl *cluster) hearLocked(id, boot string, dead, apart bool) {
	switch {
	case dead:
		cl.onDeclaredDead([]byte(cl.boot))
	case apart && cl.apartFromLocked(id, boot):
		cl.log.Warn("a member owned keys apart from this node while this node did without it; dropping every item it held", "member", id)
		cl.srv.counters[ctrMergeDrops].Add(1)
		cl.dropAll()
	}
	if cl.supersededLocked(id, boot) {
		// A run a newer one of the member has replaced: a late answer or
		// fence. Its drops count, not its word: recorded, it would stand
		// for the newer run's, which a later view would then wait for
		// anew.
		return
	}
	cl.heard[id] = boot
	delete(cl.wordDue, id)
	cl.view.Load().hear(id, boot)
}

// supersededLocked reports whether member id's run boot has been replaced
// by a newer run (newerRun) that gossip has or this node's view has.
// mu held.
func (cl *cluster) supersededLocked(id, boot string) bool {
	if m, ok := cl.peers.Meta(id); ok && cl.gossip.Has(id) && newerRun(m.Boot, boot) {
		return true
	}
	return newerRun(cl.view.Load().boots[id], boot)
}

// answeredLocked records that member id's run boot answered a fence this
// node sent at install count sent, which told it dead ("" for nothing):
// it has this node's word, so the two are together again unless a view
// without it came since or a newer run replaced it; and it was told,
// unless it went since and this is a late answer from before its latest
// return (found by review: the same run's next return lost its Dead).
// mu held.
func (cl *cluster) answeredLocked(id, boot, dead string, sent uint64) {
	if cl.lackedAt[id] >= sent {
		return
	}
	if cl.view.Load().ring.Has(id) && !cl.supersededLocked(id, boot) {
		cl.together[id] = boot
	}
	if dead != "" && cl.returning[id] == dead {
		delete(cl.returning, id)
	}
}

// noWord gives up waiting for member id's word in view v: this node drops
// every item it holds, so that whatever the word would have been, it
// serves nothing the member may have overwritten, and owns its keys again.
func (cl *cluster) noWord(v *view, id string, err error) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if !v.pending[id] || v.heardFrom[id] {
		return
	}
	cl.log.Warn("a member that entered the view did not answer; dropping every item this node held and owning its keys without its word",
		"member", id, "err", err)
	cl.srv.counters[ctrMergeDrops].Add(1)
	cl.dropAll()
	// Whatever its word would have been, it could only have made this
	// node drop what it holds: this run's word is as good as in.
	cl.heard[id] = v.boots[id]
	delete(cl.wordDue, id)
	v.hear(id, v.boots[id])
	if cur := cl.view.Load(); cur != v {
		cur.hear(id, v.boots[id])
	}
}

// wordWait is how long this node waits for a member run's word.
type wordWait struct {
	boot string
	by   time.Time
}

// hear records that the word of member id's run boot is in, for v's hold
// (holding). Another run's word is not the one v waits for: a fence or an
// answer of a run that has since restarted can land after v put the new
// run in its place, and the new run may have owned keys apart from this
// node (found by review; installLocked already held a view for any run it
// had not heard). The cluster's mu held.
func (v *view) hear(id, boot string) {
	if !v.pending[id] || v.heardFrom[id] || v.boots[id] != boot {
		return
	}
	v.heardFrom[id] = true
	if len(v.heardFrom) == len(v.pending) {
		close(v.heardAll)
	}
}

// holding reports whether v still waits for a member's word, and this
// node owns none of its keys in it until then.
func (v *view) holding() bool {
	select {
	case <-v.heardAll:
		return false
	default:
		return true
	}
}

// goneRuns holds, per member, the runs this node saw go (out of gossip's
// ring or out of its view, or replaced in its view by another run), for
// goneRunTTL, oldest first. A member whose run comes back (a partition
// healed, a pause ended, a fence lapsed) is told it was declared dead.
// Several runs, not one: a member's runs can leave in an order that is not
// the order they ran (a restart's fence ahead of lagging gossip, whose
// older run leaves after), and a single entry overwritten by the wrong one
// let the run that came back go untold. For a time, not a count: a run
// declared dead need not have ended (a pod rescheduled under its name
// while the old one is cut off), and its replacement's restarts pushed it
// out of a count (both found by review).
type goneRuns map[string][]goneRun

type goneRun struct {
	boot string
	at   time.Time
}

// goneRunTTL is how long a run seen go is remembered: as long as every node
// tries the members declared dead again (peers' reconnect), after which a
// partition's two sides do not merge again by themselves.
const goneRunTTL = 24 * time.Hour

// maxGoneRuns bounds a member's runs kept, the memory of a crash loop:
// at this many, the oldest is forgotten first.
const maxGoneRuns = 1024

// add records member id's run boot as gone at now ("" is none), and
// forgets the member's runs gone for longer than goneRunTTL.
func (g goneRuns) add(id, boot string, now time.Time) {
	if boot == "" || g.has(id, boot) {
		return
	}
	runs := g[id]
	i := 0
	for i < len(runs) && now.Sub(runs[i].at) > goneRunTTL {
		i++
	}
	runs = append(runs[i:], goneRun{boot, now})
	if len(runs) > maxGoneRuns {
		runs = runs[len(runs)-maxGoneRuns:]
	}
	g[id] = runs
}

// has reports whether member id's run boot is gone.
func (g goneRuns) has(id, boot string) bool { return g.index(id, boot) >= 0 }

func (g goneRuns) index(id, boot string) int {
	return slices.IndexFunc(g[id], func(r goneRun) bool { return r.boot == boot })
}

// take forgets member id's run boot, which has come back, and reports
// whether it was gone.
func (g goneRuns) take(id, boot string) bool {
	i := g.index(id, boot)
	if i < 0 {
		return false
	}
	if runs := slices.Delete(g[id], i, i+1); len(runs) == 0 {
		delete(g, id)
	} else {
		g[id] = runs
	}
	return true
}
