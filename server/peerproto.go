package server

import (
	"bytes"
	"strconv"
	"time"

	"spillway/peers/wire"
	"spillway/protocol"
	"spillway/store"
)

// The protocol nodes speak to each other, on the peer port. It is
// memcached's text protocol, meta commands mostly, with an opaque tag
// (O<kind>.<node>) that says what a peer asks for and who asks:
//
//	mg <key> v f c t O fwd.<n>    a read routed here by entry node n; served
//	                              here, reading through if need be
//	mg <key> v f c t O hld.<n>    a one-key read routed here by entry node n
//	                              on a connection its requests share:
//	                              served from what this node holds, EN if
//	                              nothing could fill it, else NS at once (a
//	                              fill would hold back the requests behind
//	                              it; n asks again with fwd, on a
//	                              connection of the request's own)
//	mg <key> v f c t O get.<n>    a read-through of spilled node n: the owned
//	                              store or the origin, while this node owns
//	                              the key (else EN); n is registered as a
//	                              copy holder first
//	mg <key> v f c t O hgt.<n>    the same on a connection n's requests
//	                              share: served from the owned store, or NS
//	                              at once where get would wait for a write
//	                              round or fill (n asks again with get, on a
//	                              connection of its own)
//	mg <key> v f c t O old.<n>    a new owner n warming from its predecessor:
//	                              the owned store only, within the grace
//	md <key> O old.<n>            new owner n wrote the key: drop what is left
//	md <key> O inv.<n>            owner n wrote the key: drop the copy
//	ms <verb> <len> O ctl.<n>     a membership message (fence.go: fence,
//	                              dead, copies), answered VA <len> with
//	                              the reply's data
//
// Writes that an entry node forwards to a key's owner are the client's
// request rebuilt (forward.go), without noreply; an owner that does not
// own the key in its view answers "SERVER_ERROR not owner <owner>", and
// the entry node retries once with its own view or the named owner.
// flush_all is sent to every node as it is.

// Tag kinds.
const (
	tagForward = "fwd."
	tagHeld    = "hld."
	tagFetch   = "get."
	tagHeldGet = "hgt."
	tagWarm    = "old."
	tagInval   = "inv."
	tagControl = "ctl."
)

// tagKinds are every kind of tag.
var tagKinds = [...]string{tagForward, tagHeld, tagFetch, tagHeldGet, tagWarm, tagInval, tagControl}

// notOwnerReply is the refusal of a write at a node that does not own the
// key; the owner it believes in follows.
const notOwnerReply = "SERVER_ERROR not owner"

// tag returns this node's tag of kind.
func (cl *cluster) tag(kind string) string {
	if t, ok := cl.tags[kind]; ok {
		return t
	}
	return kind + strconv.FormatUint(cl.selfH, 36)
}

// parseTag splits an opaque peer tag into its kind and the asking node.
func parseTag(opaque []byte) (kind string, node uint64, ok bool) {
	if len(opaque) < 5 || opaque[3] != '.' {
		return "", 0, false
	}
	// Kinds are returned as the constants, and the node parsed in place:
	// every peer request comes here, and nothing of it is allocated.
	for _, k := range tagKinds {
		if string(opaque[:4]) == k {
			kind = k
		}
	}
	if kind == "" {
		return "", 0, false
	}
	n, err := strconv.ParseUint(transient(opaque[4:]), 36, 64)
	if err != nil {
		return "", 0, false
	}
	return kind, n, true
}

// notOwner reports whether reply is a refusal, and the owner it names.
func notOwner(reply []byte) (owner string, ok bool) {
	rest, ok := bytes.CutPrefix(reply, []byte(notOwnerReply))
	if !ok {
		return "", false
	}
	return string(bytes.TrimSpace(rest)), true
}

// isTag reports whether opaque is a peer tag. A client's opaque that is
// one is not forwarded (protocol.AppendRequest).
func isTag(opaque []byte) bool {
	_, _, ok := parseTag(opaque)
	return ok
}

// peerRequest serves the tagged requests of the peer protocol (the table
// at the top of this file), and reports whether req was one. The others
// on the peer port are writes forwarded by entry nodes and flush_all,
// which handle serves as a client's, refusing writes of keys this node
// does not own.
func (c *conn) peerRequest(req *protocol.Request) bool {
	kind, node, ok := parseTag(req.Meta.Opaque)
	if !ok {
		return false
	}
	if kind == tagWarm {
		c.srv.warmReads.Add(1)
	}
	s, cl := c.srv, c.srv.cl
	if req.Command == protocol.CmdMetaGet && kind == tagHeld && !cl.cfg.noSharedReads {
		// Most reads: nothing of the key is kept past the reply. The
		// connection is shared by many requests, which wait behind this
		// one: nothing here may wait. A write round of the key under way
		// would (held waits for it), and a fill: both are refused.
		key := transient(req.Key)
		c.local[statCmdGet]++
		it, ok, writing := cl.heldNoWait(key, nil)
		if writing || !ok && cl.fillable(key) {
			c.w.Line("NS")
			return true
		}
		s.counters[ctrServed].Add(1)
		c.metaGetReply(req, it, ok, false)
		return true
	}
	if req.Command == protocol.CmdMetaGet && kind == tagHeldGet && !cl.cfg.noSharedReads {
		c.local[statCmdGet]++
		buf := s.values.Get().(*[]byte)
		defer s.putValue(buf)
		it, ok, held := c.heldGet(node, req.Key, *buf)
		if !held {
			c.w.Line("NS")
			return true
		}
		c.metaGetReply(req, it, ok, false)
		return true
	}
	key := string(req.Key)
	switch {
	case req.Command == protocol.CmdMetaGet && !req.Meta.Flags.Has('T'):
		// A touch (gat at another node) is a write: handle claims it.
		c.local[statCmdGet]++
		it, ok := c.peerRead(kind, node, key)
		c.metaGetReply(req, it, ok, false)
	case req.Command == protocol.CmdMetaDelete && kind == tagInval:
		// The owner invalidates the copy this node holds.
		_, had := cl.copies.Peek(key)
		s.dropCopy(key)
		c.w.Line(foundCode(had))
	case req.Command == protocol.CmdMetaDelete && kind == tagWarm:
		// The key's new owner wrote it: what this node has left of it
		// must not be warmed back. Never a write at an owner, so no
		// ownership check: dropping is always safe in a cache.
		s.gens.bump(key)
		s.flights.Forget(key)
		err := s.store.Delete(key)
		s.dropCopy(key)
		c.w.Line(foundCode(err == nil))
	case req.Command == protocol.CmdMetaSet && kind == tagControl:
		out := cl.control(key, req.Data)
		if out == nil {
			c.w.Error(protocol.ClientError("unknown membership message"))
			return true
		}
		c.w.MetaValueStart(len(out))
		c.w.MetaEnd(out)
	default:
		return false
	}
	return true
}

func foundCode(found bool) string {
	if found {
		return "HD"
	}
	return "NF"
}

// peerRead serves a read that another node sent with a peer tag of kind.
func (c *conn) peerRead(kind string, node uint64, key string) (it store.Item, ok bool) {
	s := c.srv
	var r readResult
	switch kind {
	case tagForward:
		if it, ok := s.rt.held(key, nil); ok {
			r = readResult{it, true}
		} else {
			r = s.fill(key)
		}
		s.counters[ctrServed].Add(1)
	case tagFetch:
		// A copy only for a node this one could invalidate: one that is
		// not in its view yet (it is joining, and its fence has not
		// arrived) gets a miss, and keeps nothing.
		if _, known := s.cl.view.Load().byHash[node]; !known {
			break
		}
		// Register the holder before reading: a write that lands after
		// the read then finds it and invalidates the copy. A miss gives
		// it nothing to keep: the registration goes again.
		s.cl.addHolder(key, node)
		r = s.fillForPeer(key)
		s.cl.holders.done(key, node, r.found)
	case tagWarm:
		// The owned store whoever owns the key now: the store's Valid
		// hook keeps items of a key this node lost for the owner grace.
		r.it, r.found = s.store.Get(key)
	}
	return r.it, r.found
}

// heldGet answers a read-through of a key spilled to node on a
// connection that node's requests share (the hgt tag) as peerRead
// answers one with the get tag — node registered as a holder before the
// read; a miss, and nothing to keep, if node is not in this node's view
// or this node does not own the key — but from the owned store only, and
// without waiting: held is false where get would wait for a write round
// of the key or fill it (node then asks again with get, on a connection
// of its own). The value is copied into buf's array if it fits.
func (c *conn) heldGet(node uint64, k, buf []byte) (it store.Item, ok, held bool) {
	cl := c.srv.cl
	key := transient(k)
	if _, known := cl.view.Load().byHash[node]; !known {
		return store.Item{}, false, true
	}
	kept := string(k) // the registry keeps it
	cl.addHolder(kept, node)
	it, ok, owned, writing := cl.heldOwned(key, buf)
	held = !owned || !writing && (ok || !cl.fillable(key))
	cl.holders.done(kept, node, ok && held)
	if !held {
		return store.Item{}, false, false
	}
	return it, ok, true
}

// addHolder registers node as a holder of a copy of key before a read of
// it (holders.add), counting and logging the holders the registry forgot
// to stay within its budget.
func (cl *cluster) addHolder(key string, node uint64) {
	if forgot := cl.holders.add(key, node, cl.srv.cfg.Now()); forgot > 0 {
		cl.srv.counters[ctrLostInvalidations].Add(uint64(forgot))
		cl.srv.cfg.Logger.Warn("copy holder registry full: forgot holders, whose copies live until the copy TTL", "forgot", forgot)
	}
}

// fillable reports whether a read of key that this node does not hold
// could fill it from somewhere: the origin, the owner (a key spilled
// here), or a previous owner within the grace. A key it owns with none of
// these is a miss, now as after a fill.
func (cl *cluster) fillable(key string) bool {
	if cl.srv.origin != nil {
		return true
	}
	v := cl.view.Load()
	return !cl.owns(v, key) || v.previousOwner(key, cl.id, cl.srv.cfg.Now()) != ""
}

// readHeld reads key at node id on a connection shared with other
// requests (wire.Client.Read).
func (cl *cluster) readHeld(id, key string, buf []byte) (readResult, error) {
	v := cl.view.Load()
	pc := v.clients[id]
	if pc == nil {
		return readResult{}, errNoPeer
	}
	if !v.sharedReads[id] {
		return readResult{}, wire.ErrNotHeld // a node of before: the older way
	}
	sent := cl.srv.cfg.Now()
	val, err := pc.Read(cl.cfg.PeerTimeout, key, cl.tag(tagHeld), buf)
	if err != nil || !val.Found {
		return readResult{}, err
	}
	return readResult{cl.item(key, val, sent), true}, nil
}

// read reads keys from a peer with reads of kind (tagForward, tagFetch or
// tagWarm) and extra mg flags, as items.
func (cl *cluster) read(pc *wire.Client, keys []string, kind, extra string) ([]readResult, error) {
	now := cl.srv.cfg.Now()
	timeout := cl.fetchTimeout // the peer may load the key from the origin
	if kind == tagWarm {
		timeout = cl.cfg.PeerTimeout // served from its store only
	}
	vals, err := pc.Fetch(timeout, keys, cl.tag(kind), extra)
	if err != nil {
		return nil, err
	}
	out := make([]readResult, len(vals))
	for i, v := range vals {
		if v.Found {
			out[i] = readResult{cl.item(keys[i], v, now), true}
		}
	}
	return out, nil
}

// item is a value read from a peer as an item, its remaining lifetime
// counted from now, a time before the request was sent. The owner rounds
// the remaining lifetime to the nearest second, and now is before the
// owner looked: now+ttl-0.5s is never after the item's own expiry, so a
// copy never outlives it.
func (cl *cluster) item(key string, v wire.Value, now time.Time) store.Item {
	it := store.Item{Key: key, Value: v.Data, Flags: v.Flags, CAS: v.CAS}
	if v.TTL >= 0 {
		it.Expires = now.Add(time.Duration(v.TTL)*time.Second - time.Second/2)
	}
	return it
}

// exchange sends a peer one request that is not a read and returns its
// reply.
func (cl *cluster) exchange(pc *wire.Client, line, data []byte) (wire.Reply, error) {
	return pc.Exchange(cl.cfg.PeerTimeout, line, data)
}

// sendControl sends a peer a membership message (fence.go) and returns its
// answer.
func (cl *cluster) sendControl(pc *wire.Client, verb string, payload []byte) ([]byte, error) {
	return pc.Control(cl.cfg.PeerTimeout, cl.tag(tagControl), verb, payload)
}
