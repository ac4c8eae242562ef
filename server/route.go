package server

import (
	"errors"
	"time"

	"spillway/peers/wire"
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
// the key in its current view, then the copies. A read of an owned key
// that a write round is open for waits for the round (holders.await).
func (cl *cluster) held(key string, buf []byte) (store.Item, bool) {
	it, ok, writing := cl.heldNoWait(key, buf)
	if writing {
		cl.holders.await(key, cl.cfg.InvalidateTimeout)
	}
	return it, ok
}

// heldNoWait is held for a caller that may not wait: writing reports that
// a write round of the owned key was open after the read, and the item
// must then not be served before the round ends.
func (cl *cluster) heldNoWait(key string, buf []byte) (it store.Item, ok, writing bool) {
	it, ok, owned, writing := cl.heldOwned(key, buf)
	if owned && ok {
		return it, true, writing
	}
	it, ok = cl.copies.Get(key) // the copy store's memory: never written to
	return it, ok, writing
}

// heldOwned reads key from the owned store if this node owns it in its
// current view (owned), and reports whether a write round of the key was
// open after the read (writing).
//
// The round is looked at after the read, never only before it: a write
// whose round opened after that look could store its value before the
// read, which would serve it while the write's invalidations are on their
// way; another holder could then serve the value before it to a later
// read (new, then old). A write stores only once its round is open
// (claimWrite), so a read that finds its value finds the round open after,
// or the round over and every copy invalidated.
func (cl *cluster) heldOwned(key string, buf []byte) (it store.Item, ok, owned, writing bool) {
	if !cl.owns(cl.view.Load(), key) {
		return store.Item{}, false, false, false
	}
	if h := cl.cfg.beforeOwnedRead; h != nil {
		h(key)
	}
	it, ok = cl.srv.store.GetAppend(key, buf)
	return it, ok, true, cl.holders.roundOpen(key)
}

// keepHere counts a read of key that this node does not hold, and reports
// whether the key is another node's and read here often enough to keep a
// copy of. A leaving node keeps no copies (putCopy): it asks the others.
func (cl *cluster) keepHere(key string) bool {
	if cl.leftView.Load() || cl.view.Load().ring.Owner(key) == cl.id {
		return false
	}
	return cl.hot.add(key)
}

// pick chooses the node to serve a read with the bounded-load ring.
func (cl *cluster) pick(key string) (string, bool, func(), error) { return cl.picker.Pick(key) }

// reads opens a request's reads at node id.
func (cl *cluster) reads(id string) (*remoteReads, error) {
	pc := cl.view.Load().clients[id]
	if pc == nil {
		return nil, errNoPeer
	}
	st, err := pc.Open(cl.fetchTimeout)
	if err != nil {
		return nil, err
	}
	return &remoteReads{cl: cl, node: id, st: st, sent: cl.srv.cfg.Now()}, nil
}

// remoteReads is one request's reads routed to another node (mg with the
// fwd tag), on a connection of their own while the request lasts.
type remoteReads struct {
	cl   *cluster
	node string
	st   *wire.Stream
	sent time.Time // before the first request: remaining TTLs count from it
}

func (r *remoteReads) send(key string) { r.st.Send(key, r.cl.tag(tagForward), "") }

// next returns the answer to the oldest key sent and not yet answered; its
// value is valid until the next call.
func (r *remoteReads) next(key string) (readResult, error) {
	v, err := r.st.Next()
	if err != nil || !v.Found {
		return readResult{}, err
	}
	return readResult{r.cl.item(key, v, r.sent), true}, nil
}

func (r *remoteReads) close() { r.st.Close() }

// readAheadKeys and readAheadBytes bound how far a multi-key read runs
// ahead of what it has answered: how many keys, and how many bytes of
// values held here, wait to be written to the client. Values coming from
// other nodes wait in the socket buffers of the request's own connections
// to them, not here.
const (
	readAheadKeys  = 64
	readAheadBytes = 1 << 20
)

// readStep is one key of a multi-key read, from the moment it is looked
// at until it is answered.
type readStep struct {
	key     string
	it      store.Item
	held    bool
	reads   *remoteReads // the node serving it, if not this one
	primary bool
	release func()
}

// readKeys answers the keys of a client's get at this entry node, handing
// each key's result to emit in the client's order as soon as it and those
// before it are known. A result's value is valid only during emit.
//
// Keys held here are served from here. The others go where the picker
// sends them: to another node, on a connection this request keeps to it
// while it lasts, the requests written ahead of the replies (up to
// readAheadKeys) so that the round trips overlap; or filled here, in turn.
// A node that fails is not asked again by this request: its keys are
// filled here, so it costs the request one timeout.
func (c *conn) readKeys(keys [][]byte, emit func(i int, r readResult)) {
	if len(keys) == 1 && c.readKey(keys[0], emit) {
		return
	}
	var bad unreachable
	var nodes map[string]*remoteReads
	defer func() {
		for _, r := range nodes {
			r.close()
		}
	}()
	var steps [readAheadKeys]readStep
	ahead, heldBytes := 0, 0
	for i := range keys {
		for ahead < len(keys) && ahead-i < readAheadKeys && (ahead == i || heldBytes < readAheadBytes) {
			st := &steps[ahead%readAheadKeys]
			*st = c.startRead(string(keys[ahead]), &bad, &nodes)
			heldBytes += len(st.it.Value)
			ahead++
		}
		st := &steps[i%readAheadKeys]
		heldBytes -= len(st.it.Value)
		emit(i, c.finishRead(st, &bad))
		*st = readStep{}
	}
}

// readKey answers a one-key read, most reads, as readKeys does, but a
// key sent to another node goes on a connection that node shares with
// other requests' reads (router.readHeld), and its value comes to a
// pooled buffer. It reports false, having done nothing, if that node
// would have to fill the key: readKeys then reads it on a connection of
// the request's own, where a slow fill holds back no other request.
func (c *conn) readKey(k []byte, emit func(i int, r readResult)) bool {
	s := c.srv
	key := transient(k) // kept by nothing past the request: not by fills (readKeys)
	buf := s.values.Get().(*[]byte)
	defer s.putValue(buf)
	// A held value is not taken as the next buffer even when it did not
	// fit: a copy's is the copy store's own memory.
	if it, ok := s.rt.held(key, *buf); ok {
		_, owned := s.rt.owner(key)
		s.countServed(s.rt.self(), owned, true)
		emit(0, readResult{it, true})
		return true
	}
	if s.rt.keepHere(key) {
		// A hot key another node owns: read it through from the owner
		// and keep it, as a spilled key is (fill.go).
		r := s.fillAvoiding(string(k), nil)
		s.countServed(s.rt.self(), false, true)
		emit(0, r)
		return true
	}
	id, primary, release, err := s.rt.pick(key)
	if err != nil || id == s.rt.self() {
		if release != nil {
			release()
		}
		return false
	}
	if release != nil {
		defer release()
	}
	r, err := s.rt.readHeld(id, key, *buf)
	switch {
	case err == nil:
		s.counters[ctrForwarded].Add(1)
		s.countServed(id, primary, false)
		if cap(r.it.Value) > cap(*buf) {
			*buf = r.it.Value[:0]
		}
		emit(0, r)
		return true
	case errors.Is(err, wire.ErrNotHeld):
		s.counters[ctrPeerStreamed].Add(1)
		return false
	}
	s.counters[ctrPeerErrors].Add(1)
	// The chosen node did not answer: serve the key here rather than
	// fail the client, and do not ask that node again for it.
	var bad unreachable
	bad.add(id)
	r = s.fillAvoiding(string(k), &bad)
	s.countServed(s.rt.self(), false, true)
	emit(0, r)
	return true
}

// putValue gives back a buffer readKey took, unless it grew past what is
// worth keeping.
func (s *Server) putValue(buf *[]byte) {
	if cap(*buf) <= keepValueBuffer {
		s.values.Put(buf)
	}
}

// keepValueBuffer is the largest value buffer the pool keeps, and
// valueBuffer the size of a new one.
const (
	keepValueBuffer = 64 << 10
	valueBuffer     = 2 << 10
)

// startRead looks at one key of readKeys: held here, sent to the node the
// picker chose, or to be filled here.
func (c *conn) startRead(key string, bad *unreachable, nodes *map[string]*remoteReads) readStep {
	s := c.srv
	if it, ok := s.rt.held(key, nil); ok { // kept until emitted, maybe after others
		return readStep{key: key, it: it, held: true}
	}
	if s.rt.keepHere(key) {
		return readStep{key: key} // filled here (finishRead), and kept
	}
	id, primary, release, err := s.rt.pick(key)
	st := readStep{key: key, primary: primary || err != nil, release: release}
	if err != nil || id == s.rt.self() || bad.has(id) {
		return st
	}
	r := (*nodes)[id]
	if r == nil {
		if r, err = s.rt.reads(id); err != nil {
			s.counters[ctrPeerErrors].Add(1)
			bad.add(id)
			st.primary = false
			return st
		}
		if *nodes == nil {
			*nodes = make(map[string]*remoteReads)
		}
		(*nodes)[id] = r
	}
	r.send(key)
	s.counters[ctrForwarded].Add(1)
	st.reads = r
	return st
}

// finishRead answers one key of readKeys.
func (c *conn) finishRead(st *readStep, bad *unreachable) readResult {
	s := c.srv
	self := s.rt.self()
	if st.release != nil {
		defer st.release()
	}
	if st.held {
		_, owned := s.rt.owner(st.key)
		s.countServed(self, owned, true)
		return readResult{st.it, true}
	}
	if !c.awaitable(st.reads == nil) {
		return readResult{} // nobody is left to read the answer
	}
	if st.reads != nil {
		r, err := st.reads.next(st.key)
		if err == nil {
			s.countServed(st.reads.node, st.primary, false)
			return r
		}
		if !bad.has(st.reads.node) {
			s.counters[ctrPeerErrors].Add(1)
			bad.add(st.reads.node)
		}
		// The chosen node did not answer: serve the key here rather
		// than fail the client.
		st.primary = false
	}
	r := s.fillAvoiding(st.key, bad)
	s.countServed(self, st.primary, true)
	return r
}

// streamAhead is how much of a multi-key get's reply may wait in the
// connection's buffer while the request waits for a node.
const streamAhead = 16 << 10

// awaitable is asked before a multi-key read waits (for another node, or,
// slow, a fill here): it sends what the client can have so far, if it is
// much or the wait may be long, and reports false once the connection is
// gone, a write to it failed or Shutdown gave up on it, so that the rest
// of the request does no work for a client that will never read it.
func (c *conn) awaitable(slow bool) bool {
	if c.gone.Load() {
		return false
	}
	if n := c.w.Buffered(); n > 0 && (slow || n >= streamAhead) {
		if err := c.w.Flush(); err != nil {
			c.gone.Store(true)
			return false
		}
	}
	return true
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
func (s *Server) putCopy(it store.Item, now time.Time, gen generation) {
	if s.cl.leftView.Load() {
		return
	}
	limit := now.Add(s.cl.cfg.CopyTTL)
	if it.Expires.IsZero() || it.Expires.After(limit) {
		it.Expires = limit
	}
	s.gens.keepCopy(it.Key, gen, func() { s.cl.copies.Put(it) })
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
//
// It leaves the owned fills under way alone (bumpCopies, not bumpAll):
// one that read an older view keeps nothing anyway (keepOwned), and one
// that read the current view fills a key this node owns in it. Fencing
// them lost a leaver's keys: when node2 leaves, node0 and node1 both gain
// keys and fence each other (settle). node0's own fence is answered, so
// it owns its gained keys; node2's handover reaches it, and onHandover
// takes the keys' generations and reads them from node2; node1's fence
// reaches node0 now (it settles on its own time, as late as its gossip)
// and drops node0's copies; the warm read answers, and not one key is
// kept. The keys nobody read before node2 was gone were then loaded from
// the origin.
func (cl *cluster) dropCopies() {
	cl.srv.gens.bumpCopies()
	cl.copies.Flush(0)
}

// dropCopiesAfterFlush is dropCopies for flush_all's second round, which
// fences every fill under way, owned ones too, as the flush itself did
// (flushLocal): between the rounds, a new owner may still have warmed a
// key from a previous owner the flush had not reached yet.
func (cl *cluster) dropCopiesAfterFlush() {
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

// flushCopies empties the copies, and stops warming keys from the owners
// that left: they did not see this flush_all, and what they hold is
// older than it. It notes when, for the owners that leave this node's
// view later (installLocked): this node's view may have been behind the
// flushing node's, which had dropped the leaver and did not flush it.
func (cl *cluster) flushCopies(delay time.Duration) {
	cl.copies.Flush(delay)
	cl.lastFlush.Store(cl.srv.cfg.Now().UnixNano())
	for _, d := range cl.view.Load().departed {
		d.failed.Store(true)
	}
}

// owner returns the node that owns key in this node's view, and whether
// that is this node.
func (cl *cluster) owner(key string) (string, bool) {
	o := cl.view.Load().ring.Owner(key)
	return o, o == cl.id || o == ""
}

func (cl *cluster) self() string { return cl.id }

func (cl *cluster) ownsNow(key string) bool { return cl.owns(cl.view.Load(), key) }
