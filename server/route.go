package server

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"spillway/store"
)

// The read path (ARCHITECTURE.md, "Request flow"):
//
//  1. The entry node holds the key (owned or a copy): it serves it.
//  2. Otherwise it picks a node with the bounded-load ring and, if that is
//     another node, forwards the read there (mg with the fwd tag). A
//     forwarded read is served where it lands, never forwarded again.
//  3. The serving node fills a miss once per key (singleflight): the owner
//     from the previous owner (for a grace period after a membership
//     change), then the origin; a node the read spilled to, from the owner
//     (mg with the get tag, which the owner serves from its store or the
//     origin only), and from the origin only if the owner fails.

// readResult is the outcome of one key's read.
type readResult struct {
	it    store.Item
	found bool
}

// localGet looks in the owned store, then in the copies.
func (s *Server) localGet(key string) (store.Item, bool) {
	if it, ok := s.store.Get(key); ok {
		return it, true
	}
	if s.cl != nil {
		return s.cl.copies.Get(key)
	}
	return store.Item{}, false
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
		s.metrics.forwarded.Add(float64(len(g.keys)))
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

// fillAvoiding is fill for a read whose request has just seen the node bad
// fail: it does not ask that node again, so a dead peer costs one timeout
// per request rather than one per key.
func (s *Server) fillAvoiding(key, bad string) readResult {
	led := false
	s.filling.Add(1)
	defer s.filling.Add(-1)
	v, _, shared := s.flights.Do(key, func() (any, error) {
		led = true
		// Another flight may have filled the key between our miss and
		// this flight starting: look again before going further.
		if it, ok := s.localGet(key); ok {
			return readResult{it, true}, nil
		}
		if s.cl == nil {
			return s.loadOrigin(key, true, 0), nil
		}
		now := s.cfg.Now()
		v := s.cl.view.Load()
		owner := v.ring.Owner(key)
		if owner == s.cl.self || owner == "" {
			return s.fillOwned(key, v, now), nil
		}
		s.counters.spilledServed.Add(1)
		gen := s.cl.gens.current(key)
		if pc := v.clients[owner]; pc != nil && owner != bad {
			res, err := pc.fetch([]string{key}, s.cl.tag(tagFetch), now)
			s.counters.peerFetches.Add(1)
			s.metrics.peerFetches.Inc()
			if err == nil {
				if !res[0].found {
					return readResult{}, nil
				}
				s.putCopy(res[0].item, now, gen)
				return readResult{res[0].item, true}, nil
			}
			s.counters.peerErrors.Add(1)
			s.cfg.Logger.Debug("read-through failed; trying the origin", "key", key, "owner", owner, "err", err)
		}
		return s.loadOrigin(key, false, gen), nil
	})
	s.countMerged(shared, led)
	return v.(readResult)
}

// countMerged counts a read that waited for another read's fill. Only the
// flight's leader runs the function, so "shared and did not lead" is a
// follower.
func (s *Server) countMerged(shared, led bool) {
	if shared && !led {
		s.counters.merged.Add(1)
		s.metrics.merged.Inc()
	}
}

// fillOwned fills a key this node owns: from its previous owner during the
// grace period after a membership change, then from the origin.
func (s *Server) fillOwned(key string, v *view, now time.Time) readResult {
	if prev := v.previousOwner(key, s.cl.self, now); prev != "" {
		if pc := v.clients[prev]; pc != nil {
			res, err := pc.fetch([]string{key}, s.cl.tag(tagWarm), now)
			s.counters.peerFetches.Add(1)
			s.metrics.peerFetches.Inc()
			if err == nil && res[0].found {
				return s.keepOwned(res[0].item)
			}
		}
	}
	return s.loadOrigin(key, true, 0)
}

// settleMoved prepares a write to a key that moved to this node in the
// last membership change (within the owner grace): if the key is not here
// yet, it is read from its previous owner first, so that incr, append, cas,
// add and the rest act on the current value rather than on nothing; and a
// delete removes the previous owner's item as well, so that the next read
// does not warm the deleted value back.
func (s *Server) settleMoved(key string, del bool) {
	v := s.cl.view.Load()
	now := s.cfg.Now()
	prev := v.previousOwner(key, s.cl.self, now)
	if prev == "" || v.ring.Owner(key) != s.cl.self {
		return
	}
	pc := v.clients[prev]
	if pc == nil {
		return
	}
	if _, ok := s.store.Peek(key); !ok {
		res, err := pc.fetch([]string{key}, s.cl.tag(tagWarm), now)
		s.counters.peerFetches.Add(1)
		if err == nil && res[0].found {
			s.keepOwned(res[0].item)
		}
	}
	if del {
		if _, _, err := pc.exchange(mdLine(key, ""), nil); err != nil {
			s.counters.peerErrors.Add(1)
		}
	}
}

// keepOwned stores a filled item unless a client wrote the key while the
// fill was under way: the client's write wins, and is what the reader gets.
func (s *Server) keepOwned(it store.Item) readResult {
	cas, err := s.store.Add(it)
	if err == nil {
		it.CAS = cas
		return readResult{it, true}
	}
	cur, ok := s.store.Get(it.Key)
	return readResult{cur, ok}
}

// fillForPeer serves a read-through from a node the key spilled to: from
// the store, or from the origin if this node owns the key. It never asks
// another peer, so read-throughs cannot chain.
func (s *Server) fillForPeer(key string) readResult {
	if it, ok := s.localGet(key); ok {
		return readResult{it, true}
	}
	if s.cl == nil || s.cl.view.Load().ring.Owner(key) != s.cl.self {
		return readResult{}
	}
	led := false
	v, _, shared := s.flights.Do(key, func() (any, error) {
		led = true
		if it, ok := s.localGet(key); ok {
			return readResult{it, true}, nil
		}
		return s.loadOrigin(key, true, 0), nil
	})
	s.countMerged(shared, led)
	return v.(readResult)
}

// putCopy keeps an item owned elsewhere for at most the copy TTL, and
// never beyond the item's own expiry.
//
// gen is the key's copy generation read before the item was fetched: if a
// write or an invalidation of the key came in since, the item may be the
// old value, and it is not kept.
func (s *Server) putCopy(it store.Item, now time.Time, gen uint64) {
	limit := now.Add(s.cl.cfg.CopyTTL)
	if it.Expires.IsZero() || it.Expires.After(limit) {
		it.Expires = limit
	}
	st := s.cl.gens.stripe(it.Key)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.gen != gen {
		return
	}
	s.cl.copies.Put(it)
}

// dropCopy removes this node's copy of key because the key was written or
// invalidated: the copy generation moves on, so that a fill already under
// way does not store the old value after this, and reads that start now do
// not join that fill.
func (s *Server) dropCopy(key string) {
	st := s.cl.gens.stripe(key)
	st.mu.Lock()
	st.gen++
	s.cl.copies.Delete(key)
	st.mu.Unlock()
	s.flights.Forget(key)
}

// loadOrigin loads key from the origin, with a timeout and at most
// OriginConcurrency loads at once, and keeps it: owned, or as a copy.
// gen is the copy generation for a copy (see putCopy).
func (s *Server) loadOrigin(key string, owned bool, gen uint64) readResult {
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
	s.metrics.originFetches.Inc()
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
	if owned {
		return s.keepOwned(it)
	}
	it.CAS = 0
	s.putCopy(it, s.cfg.Now(), gen)
	if got, ok := s.cl.copies.Get(key); ok {
		it = got
	}
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

// invalidate drops the copies other nodes hold of key, after a write here.
// It waits at most InvalidateTimeout; a copy whose invalidation is lost
// lives no longer than the copy TTL.
func (s *Server) invalidate(key string) {
	if s.cl == nil {
		return
	}
	s.dropCopy(key)
	now := s.cfg.Now()
	nodes := s.cl.holders.take(key, now, s.cl.cfg.CopyTTL)
	if len(nodes) == 0 {
		return
	}
	v := s.cl.view.Load()
	line := mdLine(key, " O"+s.cl.tag(tagInval))
	done := make(chan struct{}, len(nodes))
	sent := 0
	for _, h := range nodes {
		pc := v.clients[v.byHash[h]]
		if pc == nil {
			continue
		}
		sent++
		s.counters.invalidations.Add(1)
		go func() {
			if _, _, err := pc.exchange(line, nil); err != nil {
				s.counters.peerErrors.Add(1)
			}
			done <- struct{}{}
		}()
	}
	timer := time.NewTimer(s.cl.cfg.InvalidateTimeout)
	defer timer.Stop()
	for range sent {
		select {
		case <-done:
		case <-timer.C:
			return
		}
	}
}

// broadcast sends line to every other node and waits for their replies, for
// flush_all.
func (s *Server) broadcast(line string) {
	if s.cl == nil {
		return
	}
	var wg sync.WaitGroup
	for _, pc := range s.cl.view.Load().clients {
		wg.Go(func() {
			if _, _, err := pc.exchange([]byte(line), nil); err != nil {
				s.counters.peerErrors.Add(1)
			}
		})
	}
	wg.Wait()
}

// parseTag splits an opaque peer tag into its kind and the asking node.
func parseTag(opaque []byte) (kind string, node uint64, ok bool) {
	if len(opaque) < 5 || opaque[3] != '.' {
		return "", 0, false
	}
	kind = string(opaque[:4])
	switch kind {
	case tagForward, tagFetch, tagWarm, tagInval:
	default:
		return "", 0, false
	}
	n, err := strconv.ParseUint(string(opaque[4:]), 36, 64)
	if err != nil {
		return "", 0, false
	}
	return kind, n, true
}

// relay writes a peer's reply line to the client, or a clear error when
// the owner could not be reached.
func (c *conn) relay(reply []byte, err error, noreply bool) {
	if err != nil {
		c.w.Line("SERVER_ERROR owner unreachable: " + strings.ReplaceAll(err.Error(), "\r\n", " "))
		return
	}
	if !noreply {
		c.w.Line(string(reply))
	}
}
