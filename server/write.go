package server

import (
	"errors"
	"strings"
	"sync"
	"time"

	"spillway/peers/wire"
	"spillway/protocol"
)

// Writes run at the key's owner (ARCHITECTURE.md, "Coherence"): a client's
// write at another node is forwarded there; a peer's write at a node that
// does not own the key is refused; at the owner, the key's ownership is
// held while the write is stored, and the copies other nodes hold are
// invalidated before it answers.

// isWrite reports whether req changes its key, and so must run at the
// key's owner: the one decision of what a write is. A plain mg is a read
// (routed by the picker instead); mg with T, N or R writes the item's
// TTL, creates it or hands out its refresh token. gat and gats touch
// several keys, each at its owner (router.touch).
func isWrite(req *protocol.Request) bool {
	switch req.Command {
	case protocol.CmdSet, protocol.CmdAdd, protocol.CmdReplace, protocol.CmdAppend,
		protocol.CmdPrepend, protocol.CmdCas, protocol.CmdDelete, protocol.CmdIncr,
		protocol.CmdDecr, protocol.CmdTouch, protocol.CmdMetaSet, protocol.CmdMetaDelete,
		protocol.CmdMetaArith:
		return true
	case protocol.CmdMetaGet:
		m := &req.Meta
		return m.Flags.Has('T') || m.Flags.Has('N') || m.Flags.Has('R')
	}
	return false
}

func (cl *cluster) claim(c *conn, req *protocol.Request) bool { return c.claimWrite(req, 0) }

func (cl *cluster) release(c *conn) { c.releaseWrite() }

// claimWrite makes this node the one to run a write: if it owns the key
// in its view (and the key's hand-off is complete), it settles a key that
// just moved here, read-locks the key's ownership (released by written or
// releaseWrite) and moves the key's generation on, and reports true.
// Otherwise it answers the request itself and reports false: forwarded to
// the owner from a client's connection, refused on the peer port (the
// sender's view was stale, or this node is leaving).
//
// The lock is what makes the ownership check hold until the write is
// stored: a view change waits for it, so once a new owner has been told
// this node is not the owner any more, no write of this node's is still
// landing.
func (c *conn) claimWrite(req *protocol.Request, attempt int) bool {
	s, cl := c.srv, c.srv.cl
	owner, held := c.holdKey(transient(req.Key), req.Command != protocol.CmdSet)
	switch {
	case held:
		return true
	case owner == "":
		s.counters[ctrRefusedWrites].Add(1)
		c.failWrite(req, errHandoff)
	case c.peer:
		s.counters[ctrRefusedWrites].Add(1)
		c.w.Line(notOwnerReply + " " + owner)
	case attempt > 0:
		// The owner in this node's view refused and named this node;
		// this node's view still names that one: views disagree, and
		// the hand-off will settle it. Answer, never leave the client
		// waiting.
		s.counters[ctrRefusedWrites].Add(1)
		c.failWrite(req, errHandoff)
	default:
		if next := c.forwardWrite(owner, req); next == cl.id {
			return c.claimWrite(req, 1)
		}
	}
	return false
}

// holdKey is claimWrite's part at the owner: if this node owns key, it
// settles a key that just moved here (needValue: the write reads the
// current value), read-locks the key's ownership into c.keyLock, moves the
// key's generation on and reports held. Otherwise it returns the owner in
// this node's view, or "" if this node owns the key but its hand-off did
// not complete in time, or the key's previous owner could not be told of
// the write (settleMoved).
func (c *conn) holdKey(key string, needValue bool) (owner string, held bool) {
	s, cl := c.srv, c.srv.cl
	for range 2 {
		v := cl.awaitOwnership(key)
		if owner := v.ring.Owner(key); owner != cl.id {
			return owner, false
		}
		if !cl.owns(v, key) {
			break
		}
		if err := s.settleMoved(v, key, needValue); err != nil {
			return "", false
		}
		lock := cl.keys.rlock(key)
		if cl.view.Load() != v {
			// The view changed while the key settled: look again.
			lock.RUnlock()
			continue
		}
		c.keyLock = lock
		c.prevRound, c.endRound = cl.holders.begin(key)
		s.gens.bump(key)
		s.flights.Forget(key)
		return cl.id, true
	}
	return "", false
}

// errHandoff is the answer to a write that arrives while its key changes
// owner: the client may retry.
var errHandoff = errors.New("key is changing owner; retry")

// releaseWrite ends claimWrite's hold on the key's ownership, and the
// write's round (see holders.begin) if written did not: a write that
// changed nothing still waits for the round before it.
func (c *conn) releaseWrite() {
	c.unlockKey()
	if c.endRound.open() {
		if c.prevRound != nil {
			t := time.NewTimer(c.srv.cl.cfg.InvalidateTimeout)
			select {
			case <-c.prevRound:
			case <-t.C:
			}
			t.Stop()
		}
		c.endRound.end()
		c.endRound, c.prevRound = writeRound{}, nil
	}
}

// unlockKey releases the key's ownership lock, if held.
func (c *conn) unlockKey() {
	if c.keyLock != nil {
		c.keyLock.RUnlock()
		c.keyLock = nil
	}
}

// failWrite answers a write that could not run, as a SERVER_ERROR (nothing
// under noreply).
func (c *conn) failWrite(req *protocol.Request, err error) {
	if !req.Noreply {
		c.w.Error(protocol.ServerError(strings.ReplaceAll(err.Error(), "\r\n", " ")))
	}
}

// forwardWrite sends a client's write to the key's owner and relays the
// answer. An owner that refuses (its view says otherwise) is retried once
// with this node's current view, or the owner it named; forwardWrite
// returns this node's ID when that is this node, for the caller to run the
// write here.
func (c *conn) forwardWrite(owner string, req *protocol.Request) (next string) {
	s := c.srv
	c.countForwarded(req)
	for attempt := 0; ; attempt++ {
		reply, value, err := c.sendWrite(owner, req)
		named, refused := notOwner(reply)
		if err != nil || !refused {
			c.relayWrite(req, reply, value, err)
			return ""
		}
		next = s.cl.view.Load().ring.Owner(string(req.Key))
		if next == owner && named != "" {
			next = named
		}
		if next == s.cl.id {
			return next
		}
		if attempt > 0 || next == owner || next == "" {
			c.failWrite(req, errHandoff)
			return ""
		}
		owner = next
	}
}

// written is called after a successful write of key here: copies elsewhere
// are now stale.
//
// It ends claimWrite's hold on the key's ownership first: the write is
// stored, and invalidating waits on other nodes.
func (c *conn) written(key []byte) { c.srv.rt.written(c, key) }

func (cl *cluster) written(c *conn, key []byte) {
	c.unlockKey()
	prev, round := c.prevRound, c.endRound
	if !round.open() {
		// Not claimed (router.drop, outside handle): a round of its own.
		prev, round = cl.holders.begin(transient(key))
	}
	c.endRound, c.prevRound = writeRound{}, nil
	c.srv.invalidate(transient(key), prev)
	round.end()
}

// forward sends a write to the key's owner and returns its reply line. The
// entry node's own copy of the key is dropped: it is about to be stale.
func (s *Server) forward(owner, key string, line, data []byte) (reply, value []byte, err error) {
	return s.forwardQuiet(owner, key, line, data, false, nil)
}

// forwardQuiet is forward for a request that may have no reply (meta q):
// it is followed by mn, and a nil reply means the owner sent none. A
// reply that is not quiet is read into *buf if buf is not nil (see
// wire.Client.ExchangeAppend), else into memory of its own.
func (s *Server) forwardQuiet(owner, key string, line, data []byte, quiet bool, buf *[]byte) (reply, value []byte, err error) {
	s.dropCopy(key)
	pc := s.cl.view.Load().clients[owner]
	if pc == nil {
		return nil, nil, errNoPeer
	}
	s.counters[ctrForwardedWrites].Add(1)
	var r wire.Reply
	switch {
	case quiet:
		r, err = pc.ExchangeQuiet(s.cl.cfg.PeerTimeout, line, data)
	case buf != nil:
		r, *buf, err = pc.ExchangeAppend(s.cl.cfg.PeerTimeout, line, data, *buf)
	default:
		r, err = s.cl.exchange(pc, line, data)
	}
	reply, value = r.Line, r.Value
	if err != nil {
		s.counters[ctrPeerErrors].Add(1)
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
	nodes := s.cl.holders.take(key, now)
	if len(nodes) == 0 && prev == nil {
		return
	}
	v := s.cl.view.Load()
	// The deletes go on the connections the holder's reads share
	// (wire.Client.Delete): one sent twice drops nothing more. The key is
	// copied: a holder's delete may outlast the request's buffer (the
	// timeout below).
	kept, tag := strings.Clone(key), s.cl.tag(tagInval)
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
			// The holder left this node's view. Its own view change
			// dropped its copies, unless it has not seen that change
			// yet: it cannot be told, so count it.
			s.lostInvalidation(key, id, errNoPeer)
			continue
		}
		pending[id] = true
		s.counters[ctrInvalidations].Add(1)
		go func() {
			_, err := pc.Delete(s.cl.cfg.PeerTimeout, kept, tag)
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
				s.counters[ctrPeerErrors].Add(1)
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
	s.counters[ctrLostInvalidations].Add(1)
	s.cfg.Logger.Warn("invalidation lost: a copy may be served until the copy TTL", "key", what, "holder", node, "err", err)
}

// broadcast runs send towards every other node at once and waits for
// them, for flush_all. It returns how many of how many nodes (this one
// included) failed.
func (cl *cluster) broadcast(what string, send func(pc *wire.Client) error) (failed, total int) {
	s := cl.srv
	clients := cl.view.Load().clients
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, pc := range clients {
		wg.Go(func() {
			if err := send(pc); err != nil {
				mu.Lock()
				failed++
				mu.Unlock()
				s.counters[ctrPeerErrors].Add(1)
				s.cfg.Logger.Warn(what+" did not reach a node", "node", id, "err", err)
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
	c.w.Line(transient(reply))
}
