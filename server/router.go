package server

import (
	"time"

	"spillway/protocol"
	"spillway/store"
)

// router is where a node's request path meets the cluster: who owns a
// key, what this node holds of it and may serve, where a read it does not
// hold goes, and what a write must do before and after it is stored here.
// A single node's router is local (everything is here); a cluster node's
// is its *cluster. New chooses once; the handlers never ask which.
type router interface {
	// self is this node's ID, "" for a single node.
	self() string
	// owner returns the node that owns key in this node's view, and
	// whether that is this node.
	owner(key string) (id string, here bool)
	// ownsNow reports whether this node owns key in its current view,
	// the key's hand-off done: only then is its owned item of the key its
	// to serve and change.
	ownsNow(key string) bool
	// held returns what this node holds of key and may serve now. An
	// owned value is copied into buf's array if it fits
	// (store.GetAppend): it then aliases buf, for a caller that writes it
	// out before it reads another.
	held(key string, buf []byte) (store.Item, bool)
	// keepHere reports whether a read of key, which this node does not
	// hold, should be filled here and the key kept as a copy (a hot key
	// another node owns, hot.go) rather than sent to the node pick
	// chooses.
	keepHere(key string) bool
	// pick chooses the node to serve a read of key that this node does
	// not hold (bounded loads); release, if not nil, ends the read's load.
	pick(key string) (id string, primary bool, release func(), err error)
	// reads opens a request's reads at node id, which pick chose.
	reads(id string) (*remoteReads, error)
	// readHeld reads key at node id, which pick chose, on a connection
	// shared with other requests, if id holds it (wire.ErrNotHeld if id
	// would fill it). The value goes to buf if it fits.
	readHeld(id, key string, buf []byte) (readResult, error)
	// fill loads a key this node does not hold, for a fill that started
	// at the key's generation gen, without asking the nodes in bad.
	fill(key string, bad *unreachable, gen generation) readResult

	// claim makes this node the one to run c's write req and reports
	// true, or answers it (forwarded or refused) and reports false.
	claim(c *conn, req *protocol.Request) bool
	// release ends a claim, whether or not the write happened.
	release(c *conn)
	// written follows a write of key stored here: copies elsewhere are
	// stale.
	written(c *conn, key []byte)
	// touch sets key's expiry where it is owned, for gat.
	touch(c *conn, key string, exp time.Time, exptime int64) (store.Item, error)
	// drop deletes key where it is owned, outside handle's claim (a set
	// refused as too large deletes the old value, as memcached does).
	drop(c *conn, key []byte)

	// flushOthers runs flush_all with delay on every other node and drops
	// their copies; it reports how many of how many nodes (this one
	// included) failed.
	flushOthers(delay int64) (failed, total int)
	// flushCopies empties the copies this node keeps of others' keys, now
	// or at now+delay, and forgets what it could warm from elsewhere.
	flushCopies(delay time.Duration)
}

// local is a single node's router: it owns every key, and there is nobody
// to tell of a write.
type local struct{ s *Server }

func (local) self() string                                     { return "" }
func (local) owner(string) (string, bool)                      { return "", true }
func (local) ownsNow(string) bool                              { return true }
func (l local) held(key string, buf []byte) (store.Item, bool) { return l.s.store.GetAppend(key, buf) }

func (local) pick(string) (string, bool, func(), error) { return "", true, nil, nil }

func (local) reads(string) (*remoteReads, error) { return nil, errNoPeer }

func (local) keepHere(string) bool { return false }

func (local) readHeld(string, string, []byte) (readResult, error) { return readResult{}, errNoPeer }

func (l local) fill(key string, _ *unreachable, gen generation) readResult {
	return l.s.keepOwned(l.s.loadOrigin(key), nil, gen)
}

func (l local) claim(_ *conn, req *protocol.Request) bool {
	l.forgetFills(transient(req.Key))
	return true
}

// forgetFills makes the fills under way of key keep nothing (fillGens).
func (l local) forgetFills(key string) {
	l.s.gens.bump(key)
	l.s.flights.Forget(key)
}

func (local) release(*conn)             {}
func (local) written(*conn, []byte)     {}
func (local) flushCopies(time.Duration) {}

func (l local) touch(_ *conn, key string, exp time.Time, _ int64) (store.Item, error) {
	l.forgetFills(key)
	return l.s.store.Touch(key, exp)
}

func (l local) drop(_ *conn, key []byte) {
	l.forgetFills(string(key))
	l.s.store.Delete(string(key))
}

func (local) flushOthers(int64) (int, int) { return 0, 1 }
