package server

import (
	"errors"
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
// Fills are in fill.go; writes, forwarded or not, in write.go.

// readResult is the outcome of one key's read.
type readResult struct {
	it    store.Item
	found bool
}

// held serves key from what this node holds: the owned store if it owns
// the key in its current view, then the copies.
func (cl *cluster) held(key string) (store.Item, bool) {
	if cl.owns(cl.view.Load(), key) {
		cl.holders.await(key, cl.cfg.InvalidateTimeout)
		if it, ok := cl.srv.store.Get(key); ok {
			return it, true
		}
	}
	return cl.copies.Get(key)
}

// pick chooses the node to serve a read with the bounded-load ring.
func (cl *cluster) pick(key string) (string, bool, func(), error) { return cl.picker.Pick(key) }

// fetch sends reads the picker routed to node id there, in one batch.
func (cl *cluster) fetch(id string, keys []string) ([]readResult, error) {
	pc := cl.view.Load().clients[id]
	if pc == nil {
		return nil, errNoPeer
	}
	return cl.read(pc, keys, tagForward, "")
}

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
	var bad unreachable
	self := s.rt.self()
	for i, k := range keys {
		key := string(k)
		if it, ok := s.rt.held(key); ok {
			out[i] = readResult{it, true}
			_, owned := s.rt.owner(key)
			s.countServed(self, owned, true)
			continue
		}
		id, primary, release, err := s.rt.pick(key)
		if err != nil || id == self {
			out[i] = s.fillAvoiding(key, &bad)
			if release != nil {
				release()
			}
			s.countServed(self, primary || err != nil, true)
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
	fetchGroup := func(id string, g *group) {
		defer func() {
			for _, r := range g.releases {
				r()
			}
		}()
		var res []readResult
		err := errUnreachable
		if !bad.has(id) {
			res, err = s.rt.fetch(id, g.keys)
			s.counters[ctrForwarded].Add(uint64(len(g.keys)))
			if err != nil {
				s.counters[ctrPeerErrors].Add(1)
				bad.add(id)
			}
		}
		for j, i := range g.idx {
			if err != nil {
				// The chosen node did not answer: serve it here
				// rather than fail the client.
				out[i] = s.fillAvoiding(g.keys[j], &bad)
				s.countServed(self, false, true)
				continue
			}
			out[i] = res[j]
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

var (
	errNoPeer      = errors.New("no connection to that node")
	errUnreachable = errors.New("that node failed earlier in this request")
)

// putCopy keeps an item owned elsewhere for at most the copy TTL, and
// never beyond the item's own expiry.
//
// gen is the key's generation read before the item was fetched: if a
// write or an invalidation of the key came in since, the item may be the
// old value, and it is not kept.
//
// A node that is leaving keeps none: the owners drop it from their views
// and would not tell it of later writes, while it may still answer the
// clients it has.
func (s *Server) putCopy(it store.Item, now time.Time, gen uint64) {
	if s.cl.leftView.Load() {
		return
	}
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
	s.rt.flushCopies(delay)
}

func (cl *cluster) flushCopies(delay time.Duration) { cl.copies.Flush(delay) }

// owner returns the node that owns key in this node's view, and whether
// that is this node.
func (cl *cluster) owner(key string) (string, bool) {
	o := cl.view.Load().ring.Owner(key)
	return o, o == cl.id || o == ""
}

func (cl *cluster) self() string { return cl.id }

func (cl *cluster) ownsNow(key string) bool { return cl.owns(cl.view.Load(), key) }
