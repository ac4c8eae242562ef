package server

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"spillway/peers/wire"
	"spillway/protocol"
	"spillway/store"
)

// handle executes one request and writes its reply into the connection's
// buffer; the serve loop flushes.
func (c *conn) handle(req *protocol.Request) {
	if req.Command >= protocol.CmdMetaNoop {
		c.local[statCmdMeta]++
	}
	if c.peer && c.peerRequest(req) {
		return
	}
	if isWrite(req) {
		// A write's reply may be written while it holds the key's
		// ownership lock (a refusal, NOT_FOUND, EXISTS ...), and must then
		// never wait for the client: a view change waits for that lock.
		// Make room for it first, outside the lock.
		if c.w.Available() < maxReplyUnderLock {
			c.w.Flush() // an error sticks; the serve loop ends the connection
		}
		if !c.srv.rt.claim(c, req) {
			return
		}
		defer c.srv.rt.release(c)
	}
	switch req.Command {
	case protocol.CmdGet, protocol.CmdGets:
		c.get(req, req.Command == protocol.CmdGets)
	case protocol.CmdGat, protocol.CmdGats:
		c.gat(req, req.Command == protocol.CmdGats)
	case protocol.CmdSet, protocol.CmdAdd, protocol.CmdReplace,
		protocol.CmdAppend, protocol.CmdPrepend, protocol.CmdCas:
		c.update(req)
	case protocol.CmdDelete:
		c.delete(req)
	case protocol.CmdIncr, protocol.CmdDecr:
		c.incr(req)
	case protocol.CmdTouch:
		c.touch(req)
	case protocol.CmdFlushAll:
		c.flushAll(req)
	case protocol.CmdVersion:
		c.w.Line("VERSION " + Version)
	case protocol.CmdVerbosity:
		if len(req.Args) > 0 {
			if n, err := strconv.Atoi(string(req.Args[0])); err == nil {
				c.srv.verbosity.Store(int32(n))
			}
		}
		c.reply(req, protocol.OK)
	case protocol.CmdQuit:
		c.quit = true
	case protocol.CmdStats:
		c.stats(req)
	case protocol.CmdMetaNoop:
		c.w.Status(protocol.MetaNoop)
	case protocol.CmdMetaGet:
		c.metaGet(req)
	case protocol.CmdMetaSet:
		c.metaSet(req)
	case protocol.CmdMetaDelete:
		c.metaDelete(req)
	case protocol.CmdMetaArith:
		c.metaArith(req)
	case protocol.CmdMetaDebug:
		c.metaDebug(req)
	default:
		c.w.Error(protocol.ErrUnknownCommand)
	}
}

// maxReplyUnderLock bounds the reply a write writes before it releases the
// key's ownership lock: every such reply is one short line. (Replies that
// carry a value, of mg and ma, are written after the lock is released.)
const maxReplyUnderLock = 1 << 10

// countForwarded counts a forwarded request in the per-command stats as if
// it had run here, as a client of this node expects.
func (c *conn) countForwarded(req *protocol.Request) {
	switch req.Command {
	case protocol.CmdSet, protocol.CmdAdd, protocol.CmdReplace, protocol.CmdAppend,
		protocol.CmdPrepend, protocol.CmdCas, protocol.CmdMetaSet:
		c.local[statCmdSet]++
	case protocol.CmdTouch:
		c.local[statCmdTouch]++
	case protocol.CmdMetaGet:
		c.local[statCmdGet]++
	}
}

// flushOthers is flush_all's part on the other nodes (see flushAll).
func (cl *cluster) flushOthers(delay int64) (failed, total int) {
	line := []byte("flush_all " + strconv.FormatInt(delay, 10))
	failed, total = cl.broadcast("flush_all", func(pc *wire.Client) error {
		r, err := cl.exchange(pc, line, nil)
		if err == nil && string(r.Line) != "OK" {
			err = fmt.Errorf("%w %q", wire.ErrReply, r.Line)
		}
		return err
	})
	if failed > 0 {
		return failed, total
	}
	// Owners that left but may still drain: flushed too, or never warmed
	// from again here if they cannot be told (other nodes whose views lag
	// give up warming from them on their own: installLocked).
	for id, d := range cl.view.Load().departed {
		if d.failed.Load() {
			continue
		}
		if r, err := cl.exchange(d.pc, line, nil); err != nil || string(r.Line) != "OK" {
			d.failed.Store(true)
			cl.log.Info("flush_all did not reach an owner that left; not warming from it", "node", id, "err", err)
		}
	}
	cl.dropCopiesAfterFlush()
	return cl.broadcast("flush_all's copy drop", func(pc *wire.Client) error {
		_, err := cl.sendControl(pc, "copies", nil)
		return err
	})
}

// flush_all [delay] [noreply]: this node now or at now+delay; from a
// client, every other node too. A node that did not answer is named in an
// error: the client must not take the cache for empty.
//
// In a cluster it takes two rounds. The nodes flush at slightly different
// moments, so a node that has flushed can still read an item through
// from an owner that has not, and keep it as a copy; the owner's flush
// does not tell copy holders. So once every node has flushed, every node
// drops its copies (and fences the copy fills under way) a second time.
func (c *conn) flushAll(req *protocol.Request) {
	c.local[statCmdFlush]++
	s := c.srv
	// The delay is an exptime, read as memcached's realtime() reads it:
	// above 30 days, a Unix time (already past: now). Taken as seconds
	// from now, "flush_all <a Unix time>" scheduled a flush decades away
	// and replaced any pending one (TestFlushAllAbsoluteTime). Peers get
	// the exptime as sent and convert it on their own clocks.
	var delay time.Duration
	if req.Exptime > 0 {
		now := c.now()
		delay = store.ExpiresAt(req.Exptime, now).Sub(now)
	}
	s.flushLocal(delay)
	if c.peer {
		c.reply(req, protocol.OK)
		return
	}
	if failed, total := s.rt.flushOthers(req.Exptime); failed > 0 {
		c.failWrite(req, fmt.Errorf("flush_all failed on %d of %d nodes", failed, total))
		return
	}
	c.reply(req, protocol.OK)
}

// reply writes a status unless the client asked for no reply.
func (c *conn) reply(req *protocol.Request, s protocol.Status) {
	if !req.Noreply {
		c.w.Status(s)
	}
}

func (c *conn) now() time.Time { return c.srv.cfg.Now() }

// get <key>*
// gets <key>*
func (c *conn) get(req *protocol.Request, withCAS bool) {
	s := c.srv
	if s.routed && !c.peer {
		c.getRouted(req, withCAS)
		return
	}
	buf := s.values.Get().(*[]byte)
	defer s.putValue(buf)
	for _, k := range req.Keys {
		c.local[statCmdGet]++
		it, ok := c.srv.rt.held(transient(k), *buf)
		if !ok {
			c.local[statGetMisses]++
			continue
		}
		c.local[statGetHits]++
		c.writeValue(k, it, withCAS) // before the next key reuses buf
	}
	c.w.Status(protocol.End)
}

// getRouted answers a get that may need other nodes or the origin,
// writing each value as soon as it and those before it are known.
func (c *conn) getRouted(req *protocol.Request, withCAS bool) {
	c.readKeys(req.Keys, func(i int, r readResult) {
		c.local[statCmdGet]++
		if !r.found {
			c.local[statGetMisses]++
			return
		}
		c.local[statGetHits]++
		c.writeValue(req.Keys[i], r.it, withCAS)
	})
	c.w.Status(protocol.End)
}

// gat <exptime> <key>*
// gats <exptime> <key>*
func (c *conn) gat(req *protocol.Request, withCAS bool) {
	exp := store.ExpiresAt(req.Exptime, c.now())
	for _, k := range req.Keys {
		c.local[statCmdGet]++
		c.local[statCmdTouch]++
		it, err := c.srv.rt.touch(c, string(k), exp, req.Exptime)
		if err != nil {
			c.local[statGetMisses]++
			c.local[statTouchMisses]++
			continue
		}
		c.local[statGetHits]++
		c.local[statTouchHits]++
		c.writeValue(k, it, withCAS)
	}
	c.w.Status(protocol.End)
}

// touch touches a key where it is owned, for gat: here, or at the owner
// with an mg that touches.
func (cl *cluster) touch(c *conn, key string, exp time.Time, exptime int64) (store.Item, error) {
	s := cl.srv
	owner, held := c.holdKey(key, true)
	if held {
		defer c.releaseWrite()
		it, err := s.store.Touch(key, exp)
		if err == nil {
			c.written([]byte(key))
		}
		return it, err
	}
	if owner == "" || c.peer {
		return store.Item{}, errHandoff
	}
	s.dropCopy(key)
	pc := s.cl.view.Load().clients[owner]
	if pc == nil {
		return store.Item{}, errNoPeer
	}
	res, err := cl.read(pc, []string{key}, tagForward, " T"+strconv.FormatInt(exptime, 10))
	if err != nil {
		s.counters[ctrPeerErrors].Add(1)
		return store.Item{}, err
	}
	if !res[0].found {
		return store.Item{}, store.ErrNotFound
	}
	return res[0].it, nil
}

func (c *conn) writeValue(key []byte, it store.Item, withCAS bool) {
	if withCAS {
		c.w.ValueCAS(key, it.Flags, it.Value, it.CAS)
	} else {
		c.w.Value(key, it.Flags, it.Value)
	}
}

// <set|add|replace|append|prepend> <key> <flags> <exptime> <bytes> [noreply]
// cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]
func (c *conn) update(req *protocol.Request) {
	c.local[statCmdSet]++
	st := c.srv.store
	if c.srv.tooLarge(req.Key, req.Flags, req.Data) {
		c.refuseTooLarge(req, req.Command == protocol.CmdSet)
		return
	}
	it := store.Item{
		Key:     transient(req.Key),
		Value:   req.Data,
		Flags:   req.Flags,
		Expires: store.ExpiresAt(req.Exptime, c.now()),
		CAS:     req.CAS,
	}
	var err error
	switch req.Command {
	case protocol.CmdSet:
		st.Set(it)
	case protocol.CmdAdd:
		_, err = st.Add(it)
	case protocol.CmdReplace:
		_, err = st.Replace(it)
	case protocol.CmdAppend:
		_, err = st.Append(it)
	case protocol.CmdPrepend:
		_, err = st.Prepend(it)
	case protocol.CmdCas:
		_, err = st.CompareAndSwap(it)
		switch {
		case err == nil:
			c.local[statCasHits]++
		case errors.Is(err, store.ErrExists):
			c.local[statCasBadval]++
		case errors.Is(err, store.ErrNotFound):
			c.local[statCasMisses]++
		}
	}
	if err == nil {
		c.written(req.Key)
	}
	c.storeReply(req, err, protocol.Stored)
}

// itemHeader is what memcached 1.6 adds to key and value when it sizes an
// item against its item size limit (-I); client flags add 4 more bytes.
// Counting the same way makes the largest value accepted the same as
// memcached's, byte for byte.
const itemHeader = 59

// tooLarge reports whether an item would exceed the item size limit.
func (s *Server) tooLarge(key []byte, flags uint32, data []byte) bool {
	n := len(key) + len(data) + itemHeader
	if flags != 0 {
		n += 4
	}
	return n > s.cfg.MaxItemSize
}

// refuseTooLarge answers an item over the size limit. Like memcached, a set
// that cannot be stored removes the key's old value, so that readers do not
// keep seeing data the client meant to replace.
func (c *conn) refuseTooLarge(req *protocol.Request, dropOld bool) {
	if dropOld {
		c.srv.rt.drop(c, req.Key)
	}
	if !req.Noreply || req.Command == protocol.CmdMetaSet {
		c.w.Error(protocol.ErrTooLarge)
	}
}

// drop deletes key where it is owned: here, or at its owner.
//
// It runs outside handle (a value too large is refused while it is read),
// so it claims the key itself; where it cannot (a peer's request for a key
// this node does not own), the owner keeps its value.
func (cl *cluster) drop(c *conn, key []byte) {
	s := c.srv
	k := string(key)
	if c.keyLock == nil {
		v := s.cl.view.Load()
		if !s.cl.owns(v, k) {
			if owner := v.ring.Owner(k); owner != s.cl.id && !c.peer {
				s.forward(owner, k, wire.DeleteLine(k, ""), nil)
			}
			return
		}
		c.keyLock = s.cl.keys.rlock(k)
		if s.cl.view.Load() != v {
			c.releaseWrite()
			return
		}
		s.gens.bump(k)
	}
	s.store.Delete(k)
	c.written(key)
}

// storeReply maps a store error to its reply word, in one place.
func (c *conn) storeReply(req *protocol.Request, err error, ok protocol.Status) {
	switch {
	case err == nil:
		c.reply(req, ok)
	case errors.Is(err, store.ErrNotStored):
		c.reply(req, protocol.NotStored)
	case errors.Is(err, store.ErrExists):
		c.reply(req, protocol.Exists)
	case errors.Is(err, store.ErrNotFound):
		c.reply(req, protocol.NotFound)
	case errors.Is(err, store.ErrNotNumber):
		if !req.Noreply {
			c.w.Error(protocol.ClientError(store.ErrNotNumber.Error()))
		}
	default:
		c.w.Error(protocol.ServerError(err.Error()))
	}
}

// delete <key> [noreply]
func (c *conn) delete(req *protocol.Request) {
	err := c.srv.store.Delete(transient(req.Key))
	c.written(req.Key)
	if err == nil {
		c.local[statDeleteHits]++
	} else {
		c.local[statDeleteMisses]++
	}
	c.storeReply(req, err, protocol.Deleted)
}

// incr <key> <value> [noreply]
// decr <key> <value> [noreply]
func (c *conn) incr(req *protocol.Request) {
	decr := req.Command == protocol.CmdDecr
	n, err := c.srv.store.Incr(string(req.Key), req.Delta, decr)
	c.countIncr(err, decr)
	if err != nil {
		c.storeReply(req, err, protocol.Stored)
		return
	}
	c.written(req.Key)
	if !req.Noreply {
		c.w.Uint(n)
	}
}

// countIncr counts an incr or decr (classic or meta) in the stats.
func (c *conn) countIncr(err error, decr bool) {
	switch {
	case err == nil && decr:
		c.local[statDecrHits]++
	case err == nil:
		c.local[statIncrHits]++
	case errors.Is(err, store.ErrNotFound) && decr:
		c.local[statDecrMisses]++
	case errors.Is(err, store.ErrNotFound):
		c.local[statIncrMisses]++
	}
}

// touch <key> <exptime> [noreply]
func (c *conn) touch(req *protocol.Request) {
	c.local[statCmdTouch]++
	_, err := c.srv.store.Touch(string(req.Key), store.ExpiresAt(req.Exptime, c.now()))
	if err == nil {
		c.written(req.Key)
		c.local[statTouchHits]++
	} else {
		c.local[statTouchMisses]++
	}
	c.storeReply(req, err, protocol.Touched)
}

// stats [settings|reset|<other>]
func (c *conn) stats(req *protocol.Request) {
	if len(req.Args) == 0 {
		c.writeStats()
		return
	}
	switch string(req.Args[0]) {
	case "settings":
		c.writeSettings()
	case "reset":
		c.srv.resetStats()
		c.w.Line("RESET")
	case "detail":
		c.w.Error(protocol.ClientError("usage: stats detail on|off|dump"))
	case "cluster":
		c.writeClusterStats()
	default:
		c.w.Error(protocol.ErrUnknownCommand)
	}
}
