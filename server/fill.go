package server

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"spillway/peers/wire"
)

// Fills: what a node does when a read misses everything it holds. Every
// fill remembers the key's generation when it starts (fillGens) and keeps
// its result only if no write, delete, touch, invalidation or flush of the
// key came in since; a reader that joins a fill started before such a
// write it may have seen acknowledged takes a miss instead.

// fill serves a key this node does not hold, once per key at a time.
func (s *Server) fill(key string) readResult { return s.fillAvoiding(key, nil) }

// unreachable is the nodes one request has seen fail: the rest of the
// request does not wait for them again, so a dead peer costs a request
// one timeout rather than one per key. The zero value is empty; a nil
// one is empty and stays so.
type unreachable struct {
	mu    sync.Mutex
	nodes []string
}

func (u *unreachable) add(id string) {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if !slices.Contains(u.nodes, id) {
		u.nodes = append(u.nodes, id)
	}
}

func (u *unreachable) has(id string) bool {
	if u == nil {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Contains(u.nodes, id)
}

// flight is what a fill hands its followers: the result, and the key's
// generation when the fill started.
type flight struct {
	res readResult
	gen generation
}

// fillAvoiding is fill for a read whose request has seen the nodes in bad
// fail: it does not ask them, and adds the owner to bad if it fails. The
// fill is shared with other requests' reads of the key (singleflight):
// theirs wait for what this one's leader found.
func (s *Server) fillAvoiding(key string, bad *unreachable) readResult {
	led := false
	joined := s.gens.current(key)
	v, _, shared := s.flights.Do(key, func() (any, error) {
		led = true
		gen := s.gens.current(key)
		// Another flight may have filled the key between our miss and
		// this flight starting: look again before going further.
		if it, ok := s.rt.held(key, nil); ok {
			return flight{readResult{it, true}, gen}, nil
		}
		return flight{s.rt.fill(key, bad, gen), gen}, nil
	})
	s.countMerged(shared, led)
	f := v.(flight)
	if f.gen.before(joined) {
		// The fill started before a write this reader may have seen
		// acknowledged: what it fetched may be older than that write.
		return readResult{}
	}
	return f.res
}

// fill fetches key for a fill that started at generation gen: as its
// owner, or from its owner as a copy.
func (cl *cluster) fill(key string, bad *unreachable, gen generation) readResult {
	s := cl.srv
	now := s.cfg.Now()
	v := s.cl.view.Load()
	owner := v.ring.Owner(key)
	if owner == s.cl.id || owner == "" {
		if !s.cl.owns(v, key) {
			return readResult{} // hand-off under way: not ours to fill yet
		}
		return s.fillOwned(key, v, now, gen)
	}
	s.counters[ctrSpilledServed].Add(1)
	if pc := v.clients[owner]; pc != nil && !bad.has(owner) {
		res, err := s.cl.fetch(v, owner, pc, key)
		s.counters[ctrPeerFetches].Add(1)
		if err == nil {
			if res.found {
				s.putCopy(res.it, now, gen)
			}
			return res
		}
		s.counters[ctrPeerErrors].Add(1)
		bad.add(owner)
		s.cfg.Logger.Debug("read-through failed: a miss", "key", key, "owner", owner, "err", err)
	}
	// The owner could not be asked: a miss. The owner is where the key's
	// writes are ordered; the origin's value, read past it, can be newer
	// than a copy another node still serves of the key (its invalidation
	// needs the owner), so that a client sees the new value, then the old
	// one (the fault harness's checker found this at a kill -9: a read here
	// got the origin's value after a database update whose cache delete
	// failed at the dead owner, and a read at a node with a copy got the
	// value before it), or older than a write the owner acknowledged.
	return readResult{}
}

// fetch reads key through from its owner id, for a copy: first on the
// connections this node's requests to id share, where the owner answers
// if it holds the key and no write of it is under way (hgt); else, or if
// id does not answer there (a node of before), on a connection of the
// fill's own, where the owner may wait for a write round or fill the key.
func (cl *cluster) fetch(v *view, id string, pc *wire.Client, key string) (readResult, error) {
	if v.sharedFetches[id] {
		sent := cl.srv.cfg.Now()
		// The value is kept as a copy: it gets memory of its own.
		val, err := pc.Read(cl.cfg.PeerTimeout, key, cl.tag(tagHeldGet), nil)
		switch {
		case err == nil && val.Found:
			return readResult{cl.item(key, val, sent), true}, nil
		case err == nil:
			return readResult{}, nil
		case !errors.Is(err, wire.ErrNotHeld):
			return readResult{}, err
		}
		cl.srv.counters[ctrPeerStreamed].Add(1)
	}
	res, err := cl.read(pc, []string{key}, tagFetch, "")
	if err != nil {
		return readResult{}, err
	}
	return res[0], nil
}

// countMerged counts a read that waited for another read's fill. Only the
// flight's leader runs the function, so "shared and did not lead" is a
// follower.
func (s *Server) countMerged(shared, led bool) {
	if shared && !led {
		s.counters[ctrMerged].Add(1)
	}
}

// fillOwned fills a key this node owns: from its previous owner during the
// grace period after a membership change, then from the origin.
func (s *Server) fillOwned(key string, v *view, now time.Time, gen generation) readResult {
	if prev := v.previousOwner(key, s.cl.id, now); prev != "" {
		if pc, d := v.warmFrom(prev); pc != nil {
			res, err := s.cl.read(pc, []string{key}, tagWarm, "")
			s.counters[ctrPeerFetches].Add(1)
			if err == nil && res[0].found {
				return s.keepOwned(res[0], v, gen)
			}
			if err != nil && d != nil {
				d.failed.Store(true) // it finished draining
			}
		}
	}
	return s.keepOwned(s.loadOrigin(key), v, gen)
}

// settleMoved prepares a write to a key that moved to this node in view
// v's change (within the owner grace). If the write needs the current
// value (all but set) and the key is not here yet, it is read from its
// previous owner first, so that incr, append, cas, add, touch and the rest
// act on it rather than on nothing; and every write clears the previous
// owner's item, so that no later warm read brings back an older value. If
// the previous owner, still a member, cannot be told, the write must not
// happen (a miss here would warm the old value back after it): the error
// says so.
func (s *Server) settleMoved(v *view, key string, needValue bool) error {
	now := s.cfg.Now()
	prev := v.previousOwner(key, s.cl.id, now)
	if prev == "" {
		return nil
	}
	pc, d := v.warmFrom(prev)
	if pc == nil {
		return nil // gone, or failed: nothing will warm from it
	}
	if _, ok := s.store.Peek(key); needValue && !ok {
		gen := s.gens.current(key)
		res, err := s.cl.read(pc, []string{key}, tagWarm, "")
		s.counters[ctrPeerFetches].Add(1)
		if err == nil && res[0].found {
			s.keepOwned(res[0], v, gen)
		}
	}
	if _, err := s.cl.exchange(pc, wire.DeleteLine(key, " O"+s.cl.tag(tagWarm)), nil); err != nil {
		s.counters[ctrPeerErrors].Add(1)
		if d != nil {
			// A departed owner that cannot be told is never warmed from
			// again, so the write may go on.
			d.failed.Store(true)
			return nil
		}
		return err
	}
	return nil
}

// keepOwned stores a filled item as owned, unless a client wrote, deleted,
// touched or flushed the key since the fill started at generation gen (the
// write wins, and the reader gets the current item or a miss), or this
// node's view changed from v meanwhile (nil: a single node).
func (s *Server) keepOwned(r readResult, v *view, gen generation) readResult {
	if !r.found {
		return r
	}
	if v != nil {
		lock := s.cl.keys.rlock(r.it.Key)
		defer lock.RUnlock()
		if s.cl.view.Load() != v {
			return readResult{}
		}
	}
	var err error
	kept := s.gens.keep(r.it.Key, gen, func() {
		var cas uint64
		if cas, err = s.store.Add(r.it); err == nil {
			r.it.CAS = cas
		}
	})
	if kept && err == nil {
		return r
	}
	// What a write stored since the fill started: its round may still be
	// open, its invalidations under way (see cluster.heldNoWait).
	cur, ok := s.store.Get(r.it.Key)
	if ok && s.cl != nil {
		s.cl.holders.await(r.it.Key, s.cl.cfg.InvalidateTimeout)
	}
	return readResult{cur, ok}
}

// fillForPeer serves a read-through from a node the key spilled to: from
// the store, or filled as any owned key is (previous owner, then origin),
// while this node owns the key. It never
// asks another peer, so read-throughs cannot chain; a node that does not
// own the key answers a miss, and the asking node keeps no copy.
func (s *Server) fillForPeer(key string) readResult {
	v := s.cl.view.Load()
	if !s.cl.owns(v, key) {
		return readResult{}
	}
	// Each look in the store is followed by the wait for a write round,
	// not preceded (see cluster.heldNoWait).
	it, ok := s.store.Get(key)
	s.cl.holders.await(key, s.cl.cfg.InvalidateTimeout)
	if ok {
		return readResult{it, true}
	}
	led := false
	joined := s.gens.current(key)
	res, _, shared := s.flights.Do(key, func() (any, error) {
		led = true
		gen := s.gens.current(key)
		it, ok := s.store.Get(key)
		s.cl.holders.await(key, s.cl.cfg.InvalidateTimeout)
		if ok {
			return flight{readResult{it, true}, gen}, nil
		}
		return flight{s.fillOwned(key, v, s.cfg.Now(), gen), gen}, nil
	})
	s.countMerged(shared, led)
	f := res.(flight)
	if f.gen.before(joined) {
		return readResult{}
	}
	return f.res
}

// loadOrigin loads key from the origin, with a timeout and at most
// OriginConcurrency loads at once. The caller decides whether to keep it.
func (s *Server) loadOrigin(key string) readResult {
	if s.origin == nil {
		return readResult{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.OriginTimeout)
	defer cancel()
	select {
	case s.originSem <- struct{}{}:
	case <-ctx.Done():
		s.counters[ctrOriginErrors].Add(1)
		return readResult{}
	}
	s.counters[ctrOriginFetches].Add(1)
	it, err := s.origin.Load(ctx, key)
	<-s.originSem
	if err != nil {
		if !errors.Is(err, ErrOriginMiss) {
			s.counters[ctrOriginErrors].Add(1)
			s.cfg.Logger.Warn("origin load failed", "key", key, "err", err)
		}
		return readResult{}
	}
	it.Key = key
	return readResult{it, true}
}
