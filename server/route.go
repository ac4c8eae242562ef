package server

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"spillway/store"
)

// The read path (ARCHITECTURE.md, "Request flow"):
//
//  1. The entry node holds the key (it owns it in its current view, or
//     keeps a copy): it serves it.
//  2. Otherwise it picks a node with the bounded-load ring and, if that is
//     another node, forwards the read there (mg with the fwd tag). A
//     forwarded read is served where it lands, never forwarded again.
//  3. The serving node fills a miss once per key (singleflight): the owner
//     from the previous owner (for a grace period after a membership
//     change), then the origin; a node the read spilled to, from the owner
//     (mg with the get tag, which the owner serves from its store or the
//     origin only, and only while it owns the key), and from the origin
//     only if the owner fails, without keeping a copy (no owner would
//     know to invalidate it).
//
// Every fill remembers the key's generation when it starts (fillGens) and
// keeps its result only if no write, delete, touch, invalidation or flush
// of the key came in since; a reader that joins a fill started before such
// a write it may have seen acknowledged takes a miss instead.

// readResult is the outcome of one key's read.
type readResult struct {
	it    store.Item
	found bool
}

// localGet serves key from what this node holds: the owned store if it
// owns the key in its current view, then the copies.
func (s *Server) localGet(key string) (store.Item, bool) {
	if s.cl == nil {
		return s.store.Get(key)
	}
	if s.cl.owns(s.cl.view.Load(), key) {
		s.cl.holders.await(key, s.cl.cfg.InvalidateTimeout)
		if it, ok := s.store.Get(key); ok {
			return it, true
		}
	}
	return s.cl.copies.Get(key)
}

// routed reports whether reads may need more than the local store.
func (s *Server) routed() bool { return s.cl != nil || s.origin != nil }

// readKeys answers the keys of a client's get at this entry node, in
// order. Keys held here are served at once; the others are grouped by the
// node the picker chooses, and each group is fetched in one pipelined batch,
// the groups in parallel.
func (c *conn) readKeys(keys [][]byte, out []readResult) {
	s := c.srv
	type group struct {
		idx      []int
		keys     []string
		releases []func()
		primary  []bool
	}
	var groups map[string]*group
	for i, k := range keys {
		key := string(k)
		if it, ok := s.localGet(key); ok {
			out[i] = readResult{it, true}
			_, owned := s.ownerOf(key)
			s.countServed(s.selfID(), owned, true)
			continue
		}
		if s.cl == nil {
			out[i] = s.fill(key)
			s.countServed("", true, true)
			continue
		}
		id, primary, release, err := s.cl.picker.Pick(key)
		if err != nil || id == s.cl.self {
			out[i] = s.fill(key)
			if release != nil {
				release()
			}
			s.countServed(s.cl.self, primary || err != nil, true)
			continue
		}
		if groups == nil {
			groups = make(map[string]*group)
		}
		g := groups[id]
		if g == nil {
			g = &group{}
			groups[id] = g
		}
		g.idx = append(g.idx, i)
		g.keys = append(g.keys, key)
		g.releases = append(g.releases, release)
		g.primary = append(g.primary, primary)
	}
	if len(groups) == 0 {
		return
	}
	v := s.cl.view.Load()
	fetchGroup := func(id string, g *group) {
		defer func() {
			for _, r := range g.releases {
				r()
			}
		}()
		pc := v.clients[id]
		var res []fetched
		err := errNoPeer
		if pc != nil {
			res, err = pc.fetch(g.keys, s.cl.tag(tagForward), s.cfg.Now())
		}
		s.counters.forwarded.Add(uint64(len(g.keys)))
		if err != nil {
			s.counters.peerErrors.Add(1)
		}
		for j, i := range g.idx {
			if err != nil {
				// The chosen node did not answer: serve it here
				// rather than fail the client.
				out[i] = s.fillAvoiding(g.keys[j], id)
				s.countServed(s.cl.self, false, true)
				continue
			}
			out[i] = readResult{res[j].item, res[j].found}
			s.countServed(id, g.primary[j], false)
		}
	}
	if len(groups) == 1 { // the common case: no goroutine
		for id, g := range groups {
			fetchGroup(id, g)
		}
		return
	}
	var wg sync.WaitGroup
	for id, g := range groups {
		wg.Go(func() { fetchGroup(id, g) })
	}
	wg.Wait()
}

var errNoPeer = errors.New("no connection to that node")

// selfID is this node's ID, or "" for a single node.
func (s *Server) selfID() string {
	if s.cl == nil {
		return ""
	}
	return s.cl.self
}

// fill serves a key this node does not hold, once per key at a time.
func (s *Server) fill(key string) readResult { return s.fillAvoiding(key, "") }

// flight is what a fill hands its followers: the result, and the key's
// generation when the fill started.
type flight struct {
	res readResult
	gen uint64
}

// fillAvoiding is fill for a read whose request has just seen the node bad
// fail: it does not ask that node again, so a dead peer costs one timeout
// per request rather than one per key.
func (s *Server) fillAvoiding(key, bad string) readResult {
	led := false
	joined := s.gens.current(key)
	s.filling.Add(1)
	defer s.filling.Add(-1)
	v, _, shared := s.flights.Do(key, func() (any, error) {
		led = true
		gen := s.gens.current(key)
		// Another flight may have filled the key between our miss and
		// this flight starting: look again before going further.
		if it, ok := s.localGet(key); ok {
			return flight{readResult{it, true}, gen}, nil
		}
		return flight{s.fillFrom(key, bad, gen), gen}, nil
	})
	s.countMerged(shared, led)
	f := v.(flight)
	if f.gen < joined {
		// The fill started before a write this reader may have seen
		// acknowledged: what it fetched may be older than that write.
		return readResult{}
	}
	return f.res
}

// fillFrom fetches key for a fill that started at generation gen: as its
// owner, or from its owner as a copy.
func (s *Server) fillFrom(key, bad string, gen uint64) readResult {
	if s.cl == nil {
		return s.keepOwned(s.loadOrigin(key), nil, gen)
	}
	now := s.cfg.Now()
	v := s.cl.view.Load()
	owner := v.ring.Owner(key)
	if owner == s.cl.self || owner == "" {
		if !s.cl.owns(v, key) {
			return readResult{} // hand-off under way: not ours to fill yet
		}
		return s.fillOwned(key, v, now, gen)
	}
	s.counters.spilledServed.Add(1)
	if pc := v.clients[owner]; pc != nil && owner != bad {
		res, err := pc.fetch([]string{key}, s.cl.tag(tagFetch), now)
		s.counters.peerFetches.Add(1)
		if err == nil {
			if res[0].found {
				s.putCopy(res[0].item, now, gen)
			}
			return readResult{res[0].item, res[0].found}
		}
		s.counters.peerErrors.Add(1)
		s.cfg.Logger.Debug("read-through failed; trying the origin", "key", key, "owner", owner, "err", err)
	}
	// The owner could not be asked: serve the origin's value to this read,
	// but keep no copy, since no owner would invalidate it.
	r := s.loadOrigin(key)
	r.it.CAS = 0
	return r
}

// countMerged counts a read that waited for another read's fill. Only the
// flight's leader runs the function, so "shared and did not lead" is a
// follower.
func (s *Server) countMerged(shared, led bool) {
	if shared && !led {
		s.counters.merged.Add(1)
	}
}

// fillOwned fills a key this node owns: from its previous owner during the
// grace period after a membership change, then from the origin.
func (s *Server) fillOwned(key string, v *view, now time.Time, gen uint64) readResult {
	if prev := v.previousOwner(key, s.cl.self, now); prev != "" {
		if pc := v.clients[prev]; pc != nil {
			res, err := pc.fetch([]string{key}, s.cl.tag(tagWarm), now)
			s.counters.peerFetches.Add(1)
			if err == nil && res[0].found {
				return s.keepOwned(readResult{res[0].item, true}, v, gen)
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
// owner's item, so that no later warm read brings back an older value.
func (s *Server) settleMoved(v *view, key string, needValue bool) {
	now := s.cfg.Now()
	prev := v.previousOwner(key, s.cl.self, now)
	if prev == "" {
		return
	}
	pc := v.clients[prev]
	if pc == nil {
		return
	}
	if _, ok := s.store.Peek(key); needValue && !ok {
		gen := s.gens.current(key)
		res, err := pc.fetch([]string{key}, s.cl.tag(tagWarm), now)
		s.counters.peerFetches.Add(1)
		if err == nil && res[0].found {
			s.keepOwned(readResult{res[0].item, true}, v, gen)
		}
	}
	if _, _, err := pc.exchange(mdLine(key, " O"+s.cl.tag(tagWarm)), nil); err != nil {
		s.counters.peerErrors.Add(1)
	}
}

// keepOwned stores a filled item as owned, unless a client wrote, deleted,
// touched or flushed the key since the fill started at generation gen (the
// write wins, and the reader gets the current item or a miss), or this
// node's view changed from v meanwhile (nil: a single node).
func (s *Server) keepOwned(r readResult, v *view, gen uint64) readResult {
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
	cur, ok := s.store.Get(r.it.Key)
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
	s.cl.holders.await(key, s.cl.cfg.InvalidateTimeout)
	if it, ok := s.store.Get(key); ok {
		return readResult{it, true}
	}
	led := false
	joined := s.gens.current(key)
	res, _, shared := s.flights.Do(key, func() (any, error) {
		led = true
		gen := s.gens.current(key)
		if it, ok := s.store.Get(key); ok {
			return flight{readResult{it, true}, gen}, nil
		}
		return flight{s.fillOwned(key, v, s.cfg.Now(), gen), gen}, nil
	})
	s.countMerged(shared, led)
	f := res.(flight)
	if f.gen < joined {
		return readResult{}
	}
	return f.res
}

// putCopy keeps an item owned elsewhere for at most the copy TTL, and
// never beyond the item's own expiry.
//
// gen is the key's generation read before the item was fetched: if a
// write or an invalidation of the key came in since, the item may be the
// old value, and it is not kept.
func (s *Server) putCopy(it store.Item, now time.Time, gen uint64) {
	limit := now.Add(s.cl.cfg.CopyTTL)
	if it.Expires.IsZero() || it.Expires.After(limit) {
		it.Expires = limit
	}
	s.gens.keep(it.Key, gen, func() { s.cl.copies.Put(it) })
}

// dropCopy removes this node's copy of key because the key was written or
// invalidated: the generation moves on, so that a fill already under way
// does not store the old value after this, and reads that start now do
// not join that fill.
func (s *Server) dropCopy(key string) {
	s.gens.bump(key)
	s.cl.copies.Delete(key)
	s.flights.Forget(key)
}

// dropCopies drops every copy this node holds, and fences the copy fills
// under way, on a change of ownership.
func (cl *cluster) dropCopies() {
	cl.srv.gens.bumpAll()
	cl.copies.Flush(0)
}

// flushLocal empties this node's owned store and copies, now or at
// now+delay, and fences the fills under way.
func (s *Server) flushLocal(delay time.Duration) {
	s.gens.bumpAll()
	s.store.Flush(delay)
	if s.cl != nil {
		s.cl.copies.Flush(delay)
	}
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
		s.counters.originErrors.Add(1)
		return readResult{}
	}
	s.counters.originFetches.Add(1)
	it, err := s.origin.Load(ctx, key)
	<-s.originSem
	if err != nil {
		if !errors.Is(err, ErrOriginMiss) {
			s.counters.originErrors.Add(1)
			s.cfg.Logger.Warn("origin load failed", "key", key, "err", err)
		}
		return readResult{}
	}
	it.Key = key
	return readResult{it, true}
}

// ownerOf returns the node that owns key, and whether that is this node.
func (s *Server) ownerOf(key string) (string, bool) {
	if s.cl == nil {
		return "", true
	}
	o := s.cl.view.Load().ring.Owner(key)
	return o, o == s.cl.self || o == ""
}

// forward sends a write to the key's owner and returns its reply line. The
// entry node's own copy of the key is dropped: it is about to be stale.
func (s *Server) forward(owner, key string, line, data []byte) (reply, value []byte, err error) {
	return s.forwardQuiet(owner, key, line, data, false)
}

// forwardQuiet is forward for a request that may have no reply (meta q):
// it is followed by mn, and a nil reply means the owner sent none.
func (s *Server) forwardQuiet(owner, key string, line, data []byte, quiet bool) (reply, value []byte, err error) {
	s.dropCopy(key)
	pc := s.cl.view.Load().clients[owner]
	if pc == nil {
		return nil, nil, errNoPeer
	}
	s.counters.forwardedWrites.Add(1)
	if quiet {
		reply, value, err = pc.exchangeQuiet(line, data)
	} else {
		reply, value, err = pc.exchange(line, data)
	}
	if err != nil {
		s.counters.peerErrors.Add(1)
	}
	return reply, value, err
}

// invalidate drops the copies other nodes hold of key, after a write here
// (in the write's round, see holders.begin: prev is the round before it,
// which must be over too before the write answers, since it took the
// holders this one would otherwise have found). It waits at most
// InvalidateTimeout; a holder that has not answered by then (or failed)
// is counted and logged as a lost invalidation: its copy may be served
// until the copy TTL.
func (s *Server) invalidate(key string, prev <-chan struct{}) {
	s.dropCopy(key)
	now := s.cfg.Now()
	nodes := s.cl.holders.take(key, now, s.cl.cfg.CopyTTL)
	if len(nodes) == 0 && prev == nil {
		return
	}
	v := s.cl.view.Load()
	line := mdLine(key, " O"+s.cl.tag(tagInval))
	type answer struct {
		node string
		err  error
	}
	answers := make(chan answer, len(nodes))
	pending := make(map[string]bool, len(nodes))
	for _, h := range nodes {
		id := v.byHash[h]
		pc := v.clients[id]
		if pc == nil {
			// The holder left the view: ring changes drop copies,
			// so it holds none by now.
			continue
		}
		pending[id] = true
		s.counters.invalidations.Add(1)
		go func() {
			_, _, err := pc.exchange(line, nil)
			answers <- answer{id, err}
		}()
	}
	timer := time.NewTimer(s.cl.cfg.InvalidateTimeout)
	defer timer.Stop()
	for len(pending) > 0 || prev != nil {
		select {
		case <-prev:
			prev = nil
		case a := <-answers:
			delete(pending, a.node)
			if a.err != nil {
				s.counters.peerErrors.Add(1)
				s.lostInvalidation(key, a.node, a.err)
			}
		case <-timer.C:
			// An earlier round counts its own losses.
			for id := range pending {
				s.lostInvalidation(key, id, errInvalidateTimeout)
			}
			return
		}
	}
}

var errInvalidateTimeout = errors.New("no answer within the invalidation timeout")

// lostInvalidation counts and logs a copy that may outlive a write.
func (s *Server) lostInvalidation(what, node string, err error) {
	s.counters.lostInvalidations.Add(1)
	s.cfg.Logger.Warn("invalidation lost: a copy may be served until the copy TTL", "key", what, "holder", node, "err", err)
}

// broadcast sends line to every other node and waits for their replies, for
// flush_all. It returns how many of how many nodes (this one included)
// failed to answer OK.
func (s *Server) broadcast(line string) (failed, total int) {
	if s.cl == nil {
		return 0, 1
	}
	clients := s.cl.view.Load().clients
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, pc := range clients {
		wg.Go(func() {
			reply, _, err := pc.exchange([]byte(line), nil)
			if err != nil || string(reply) != "OK" {
				mu.Lock()
				failed++
				mu.Unlock()
				s.counters.peerErrors.Add(1)
				s.cfg.Logger.Warn("flush_all did not reach a node", "node", id, "err", err, "reply", string(reply))
			}
		})
	}
	wg.Wait()
	return failed, len(clients) + 1
}

// relay writes a peer's reply line to the client, or a clear error when
// the owner could not be reached; under noreply, nothing at all, as
// memcached sends nothing (a line the client does not expect would be read
// as the reply to its next request).
func (c *conn) relay(reply []byte, err error, noreply bool) {
	if noreply {
		return
	}
	if err != nil {
		c.w.Line("SERVER_ERROR owner unreachable: " + strings.ReplaceAll(err.Error(), "\r\n", " "))
		return
	}
	c.w.Line(string(reply))
}
