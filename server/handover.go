package server

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"time"
)

// Handing keys over, on a graceful leave and back on a join: the leaving
// node tells each node that takes some of its keys which ones it holds (a
// "handover" control message of key names) — as every node tells a node
// that joins, or returns empty after a restart, the keys it now owns
// (handBack) — and that node warms them from the sender at once,
// with the warm reads a miss there would make during the owner grace
// (fillOwned) — the same reads, fenced the same way (keepOwned): each key's
// generation is taken before its read, and a write, delete, touch or flush
// of the key at the new owner since then wins over what comes back. So a
// rolling restart does not lose the keys nobody happened to read while
// their owner was away: they are at the interim owners when it comes back,
// and it warms them from there in turn.
//
// Interleavings, and why they are safe:
//   - A client writes K at the new owner N while N warms K: the write bumps
//     K's generation, so the warmed value is not kept; the write also
//     clears K at the leaver (settleMoved), so a later warm finds nothing.
//   - A client deletes K at N before the handover reaches N: the delete
//     cleared K at the leaver too, and bumped the generation: nothing
//     comes back.
//   - N has not installed the view without the leaver yet (gossip lags),
//     or its hand-off of the keys is under way: N waits a moment for them
//     (awaitGained), then skips the keys it does not own; a later read of
//     them warms them as before.
//   - The leaver is gone before N reads: N's read fails, the keys are left
//     to the origin, as without a handover.
//   - flush_all during the leave: the flushing node flushes the leaver
//     too if it knows it as departed (flushOthers), and N, once it
//     applied the flush, warms nothing from the leaver: a departed
//     record it has is marked failed (flushCopies), and one it makes
//     within the owner grace after the flush is made failed
//     (installLocked), since N's view may have lagged the flushing
//     node's, which did not flush the leaver.

// handoverBatch bounds the key names of one handover message.
const handoverBatch = 64 << 10

// handover tells the nodes that now own this node's keys which keys it
// holds (those in only, if not nil), and waits until they have warmed
// them or ctx, which must have a deadline, ends. Each node gets its
// batches one after another (it reads each batch back from here before it
// answers), and the nodes are told at once.
//
// A leaving node hands over all it holds (Shutdown). A node that sees
// another join, or come back after a restart, empty, hands that one the
// keys it now owns (installLocked): without it, a rolling restart would
// lose every key its node owned and nobody read within the owner grace
// after it came back.
func (cl *cluster) handover(ctx context.Context, only map[string]bool) {
	s := cl.srv
	v := cl.view.Load()
	batches := make(map[string][][]byte)
	start := time.Now()
	keys := 0
	err := s.store.Keys(func(key string) bool {
		if ctx.Err() != nil {
			return false
		}
		owner := v.ring.Owner(key)
		if owner == "" || owner == cl.id || v.clients[owner] == nil || (only != nil && !only[owner]) {
			return true
		}
		if _, ok := s.store.Peek(key); !ok {
			return true // expired, or no longer this node's to give
		}
		bs := batches[owner]
		if len(bs) == 0 || len(bs[len(bs)-1])+len(key)+1 > handoverBatch {
			bs = append(bs, make([]byte, 0, 4<<10))
		}
		bs[len(bs)-1] = append(append(bs[len(bs)-1], key...), '\n')
		batches[owner] = bs
		keys++
		return true
	})
	if err != nil || keys == 0 {
		return
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	warmed := 0
	for owner, bs := range batches {
		pc := v.clients[owner]
		wg.Go(func() {
			dl, _ := ctx.Deadline()
			for _, b := range bs {
				timeout := time.Until(dl)
				if timeout <= 0 || ctx.Err() != nil {
					return
				}
				out, err := pc.Control(timeout, cl.tag(tagControl), "handover", b)
				if err != nil {
					s.cfg.Logger.Warn("handover: a node that takes keys from here did not warm them", "node", owner, "err", err)
					return
				}
				n, _ := strconv.Atoi(string(out))
				mu.Lock()
				warmed += n
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	s.cfg.Logger.Info("handed keys over to their new owners", "keys", keys, "warmed", warmed, "took", time.Since(start).Round(time.Millisecond))
}

// handBack hands the keys this node holds over to the members of v that
// joined since old, or came back restarted (empty), in the background,
// for at most the owner grace (they warm keys from here only that long).
func (cl *cluster) handBack(old, v *view, restarted map[string]bool) {
	if cl.leaving || old.ring.Len() == 0 {
		return
	}
	var joined map[string]bool
	for _, n := range v.ring.Nodes() {
		if n.ID != cl.id && (!old.ring.Has(n.ID) || restarted[n.ID]) {
			if joined == nil {
				joined = make(map[string]bool)
			}
			joined[n.ID] = true
		}
	}
	if joined == nil {
		return
	}
	cl.tasks.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cl.cfg.OwnerGrace)
		defer cancel()
		go func() {
			select {
			case <-cl.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		cl.handover(ctx, joined)
	})
}

// onHandover warms the keys a leaving node listed (newline-separated in
// payload) that this node now owns and does not hold, from their previous
// owner, and answers how many it kept.
func (cl *cluster) onHandover(payload []byte) []byte {
	s := cl.srv
	lines := bytes.Split(bytes.TrimSuffix(payload, []byte("\n")), []byte("\n"))
	if len(lines) == 0 || len(lines[0]) == 0 {
		return []byte("0")
	}
	v := cl.awaitGained(string(lines[0]), 4*cl.cfg.PeerTimeout)
	now := s.cfg.Now()
	type warm struct {
		keys []string
		gens []generation
	}
	from := make(map[string]*warm)
	for _, l := range lines {
		key := string(l)
		if !cl.owns(v, key) {
			continue
		}
		if _, ok := s.store.Peek(key); ok {
			continue
		}
		prev := v.previousOwner(key, cl.id, now)
		if prev == "" {
			continue
		}
		w := from[prev]
		if w == nil {
			w = &warm{}
			from[prev] = w
		}
		// The generation before the read: a write of the key here
		// since then wins over what the read brings (keepOwned).
		w.keys = append(w.keys, key)
		w.gens = append(w.gens, s.gens.current(key))
	}
	kept := 0
	for prev, w := range from {
		pc, d := v.warmFrom(prev)
		if pc == nil {
			continue
		}
		res, err := cl.read(pc, w.keys, tagWarm, "")
		s.counters[ctrPeerFetches].Add(uint64(len(w.keys)))
		if err != nil {
			if d != nil {
				d.failed.Store(true)
			}
			continue
		}
		for i, r := range res {
			if r.found && s.keepOwned(r, v, w.gens[i]).found {
				kept++
			}
		}
	}
	return strconv.AppendInt(nil, int64(kept), 10)
}

// awaitGained waits, up to timeout, until this node owns key, and returns
// its view then (or at the timeout): a leaver's handover can come before
// this node learned of the leave, or before its hand-off of the keys it
// gains completed.
func (cl *cluster) awaitGained(key string, timeout time.Duration) *view {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		v := cl.view.Load()
		if cl.owns(v, key) {
			return v
		}
		select {
		case <-v.done:
			if cl.view.Load() == v {
				// Settled, and gossip has not brought the leave yet.
				select {
				case <-time.After(10 * time.Millisecond):
				case <-t.C:
					return v
				}
			}
		case <-t.C:
			return cl.view.Load()
		}
	}
}
