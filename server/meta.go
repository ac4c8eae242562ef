package server

import (
	"bytes"
	"errors"
	"math"
	"strconv"
	"time"

	"spillway/protocol"
	"spillway/store"
)

// The meta commands (mg ms md ma me) answer with a two-letter code followed
// by the flags the client asked to see back, in the order it asked for them,
// as memcached does.

// mg <key> <flag>*
func (c *conn) metaGet(req *protocol.Request) {
	m := &req.Meta
	st := c.srv.store
	key := transient(req.Key)
	touch := m.Flags.Has('T')
	if touch {
		c.local[statCmdTouch]++
	} else {
		c.local[statCmdGet]++
	}

	var it store.Item
	var ok, routed bool
	if !c.peer && c.srv.routed && c.keyLock == nil && !touch && !m.Flags.Has('N') && !c.owns(key) {
		// Not in the owned store (where stale items and win tokens
		// live): a plain read, routed like a get. (Not a claimed write:
		// mg R at the owner holds the key's ownership lock, which a
		// fill would take again.)
		it, ok, routed = c.readOne(req.Key)
	}
	if !routed && !c.owns(key) && !touch && !m.Flags.Has('N') && !m.Flags.Has('R') {
		// A plain read on the peer port of a key this node does not own
		// (writes were claimed in handle): nothing of its to serve.
		routed = true
	}
	if !routed {
		if m.Flags.Has('u') {
			it, ok = st.Peek(key) // u: leave the item's fetched state alone
		} else {
			it, ok = st.Get(key)
		}
		if cl := c.srv.cl; cl != nil && ok && c.keyLock == nil {
			// A plain read of an owned key: a write round open after
			// the look in the store may be the one that stored what it
			// found, whose invalidations are still under way (see
			// cluster.heldNoWait). A claimed write (T, N, R) opened the
			// key's latest round itself, and waits for none.
			cl.holders.await(key, cl.cfg.InvalidateTimeout)
		}
	}
	won := false
	// Writes on read: a new TTL, autovivify on miss, or handing out the
	// single W token of a stale item. Only these take the key's lock.
	recache := m.Flags.Has('R') && ok && !it.Won
	if !routed && (touch || recache || (!ok && m.Flags.Has('N')) || (ok && it.Stale && !it.Won)) {
		it, ok, won = c.metaGetWrite(req, key)
	}
	// The item is read or changed: the reply, which may carry a large
	// value, is written without the key's ownership lock (handle).
	c.unlockKey()
	c.metaGetReply(req, it, ok, won)
}

// metaGetWrite is the write an mg makes on read (a new TTL, autovivify, a
// win token), under the key's lock; it is a method of its own so that the
// plain read allocates nothing for it.
func (c *conn) metaGetWrite(req *protocol.Request, key string) (it store.Item, ok, won bool) {
	m := &req.Meta
	touch := m.Flags.Has('T')
	created := false
	var err error
	it, err = c.srv.store.Update(key, func(cur store.Item, found bool) (store.Item, bool, error) {
		created, won = false, false
		now := c.now()
		if !found {
			if !m.Flags.Has('N') {
				return cur, false, store.ErrNotFound
			}
			cur = store.Item{Key: key, Value: []byte{}, Expires: store.ExpiresAt(m.Vivify, now)}
			created, won = true, true
		}
		if touch {
			cur.Expires = store.ExpiresAt(m.TTL, now)
		}
		// R: the first reader to see the TTL below the recache
		// threshold wins the right to refresh the item.
		if m.Flags.Has('R') && !created && !cur.Won && !cur.Expires.IsZero() &&
			cur.Expires.Before(store.ExpiresAt(m.Recache, now)) {
			won = true
		}
		if cur.Stale && !cur.Won {
			won = true
		}
		if won {
			cur.Won = true
		}
		// A new TTL or a win token is not a new value: the CAS
		// unique stays, as in memcached.
		cur.KeepCAS = !created
		return cur, true, nil
	})
	ok = err == nil
	if ok && (touch || created) {
		c.written(req.Key)
	}
	return it, ok, won
}

// readOne reads key as a get does, routed: by its owner, a copy or the
// origin.
func (c *conn) readOne(key []byte) (it store.Item, ok, routed bool) {
	c.readKeys([][]byte{key}, func(_ int, r readResult) {
		it, ok, routed = r.it, r.found, true
		it.Value = bytes.Clone(it.Value) // valid only during this call
	})
	return it, ok, routed
}

// metaGetReply answers an mg: a miss (EN, nothing under q) or the item
// with the flags asked for; won says this request won the item's refresh
// token.
func (c *conn) metaGetReply(req *protocol.Request, it store.Item, ok, won bool) {
	m := &req.Meta
	touch := m.Flags.Has('T')
	if !ok {
		if touch {
			c.local[statTouchMisses]++
		} else {
			c.local[statGetMisses]++
		}
		if !m.Flags.Has('q') {
			c.w.MetaStart("EN")
			c.metaEcho(req, nil)
			c.w.MetaEnd(nil)
		}
		return
	}
	if touch {
		c.local[statTouchHits]++
	} else {
		c.local[statGetHits]++
	}
	if m.Flags.Has('v') {
		c.w.MetaValueStart(len(it.Value))
	} else {
		c.w.MetaStart("HD")
	}
	c.metaEcho(req, &it)
	// A client that already won the right to refresh the item sees Z; a
	// stale item says X, and the first fetch after it went stale wins W.
	if it.Won && !won {
		c.w.MetaFlag('Z')
	}
	if it.Stale {
		c.w.MetaFlag('X')
	}
	if won {
		c.w.MetaFlag('W')
	}
	if m.Flags.Has('v') {
		c.w.MetaEnd(it.Value)
	} else {
		c.w.MetaEnd(nil)
	}
}

// owns reports whether key is in this node's owned store, and this node
// owns it: only then are stale items and win tokens its to hand out.
func (c *conn) owns(key string) bool {
	if !c.srv.rt.ownsNow(key) {
		return false
	}
	_, ok := c.srv.store.Peek(key)
	return ok
}

// metaEcho writes the return flags the request asked for, in its order. With
// no item (a miss), only the opaque and the key are echoed.
func (c *conn) metaEcho(req *protocol.Request, it *store.Item) {
	m := &req.Meta
	for _, f := range m.Order() {
		switch f {
		case 'O':
			c.w.MetaBytes('O', m.Opaque)
		case 'k':
			c.metaKey(req)
		}
		if it == nil {
			continue
		}
		switch f {
		case 's':
			c.w.MetaInt('s', int64(len(it.Value)))
		case 't':
			c.w.MetaInt('t', c.ttl(it.Expires))
		case 'c':
			c.w.MetaUint('c', it.CAS)
		case 'f':
			c.w.MetaUint('f', uint64(it.Flags))
		case 'l':
			c.w.MetaInt('l', 0)
		case 'h':
			c.w.MetaUint('h', boolUint(it.Fetched))
		}
	}
}

// metaKey echoes the key, base64-encoded again if the client sent it so.
// memcached 1.6.18's mg echoes the decoded key, without b; the other meta
// commands encode it again. Spillway answers as memcached does.
func (c *conn) metaKey(req *protocol.Request) {
	c.w.MetaKey(req.Key, req.Meta.Flags.Has('b') && req.Command != protocol.CmdMetaGet)
}

// ttl is the remaining lifetime in whole seconds as mg's t flag reports it:
// -1 for an item that never expires.
func (c *conn) ttl(exp time.Time) int64 {
	if exp.IsZero() {
		return -1
	}
	d := exp.Sub(c.now())
	if d <= 0 {
		return 0
	}
	return int64(math.Round(d.Seconds()))
}

// ms <key> <datalen> <flag>*
func (c *conn) metaSet(req *protocol.Request) {
	m := &req.Meta
	c.local[statCmdSet]++
	st := c.srv.store
	if c.srv.tooLarge(req.Key, m.ClientFlags, req.Data) {
		c.refuseTooLarge(req, true)
		return
	}
	it := store.Item{
		Key:     transient(req.Key),
		Value:   req.Data,
		Flags:   m.ClientFlags,
		Expires: store.ExpiresAt(m.TTL, c.now()),
		CAS:     m.CAS,
	}
	hasCAS := m.Flags.Has('C')
	var cas uint64
	var err error
	switch mode := m.Mode; {
	case mode == 'E':
		cas, err = st.Add(it)
	case mode == 'A' || mode == 'P':
		cas, err = c.metaConcat(it, hasCAS, mode == 'P')
	case hasCAS && m.Flags.Has('I'):
		cas, err = c.metaSetInvalidate(it)
	case hasCAS:
		cas, err = st.CompareAndSwap(it)
	case mode == 'R':
		cas, err = st.Replace(it)
	default:
		cas = st.Set(it)
	}
	if err == nil {
		c.written(req.Key)
	}
	code := metaCode(err)
	if code == "HD" && m.Flags.Has('q') {
		return
	}
	if code == "" {
		c.storeReply(req, err, protocol.Stored)
		return
	}
	c.w.MetaStart(code)
	for _, f := range m.Order() {
		switch f {
		case 'O':
			c.w.MetaBytes('O', m.Opaque)
		case 'k':
			c.metaKey(req)
		case 'c':
			c.w.MetaUint('c', cas)
		}
	}
	c.w.MetaEnd(nil)
}

// metaConcat appends or prepends, checking the CAS unique first if given.
func (c *conn) metaConcat(it store.Item, hasCAS, prepend bool) (uint64, error) {
	next, err := c.srv.store.Update(it.Key, func(cur store.Item, ok bool) (store.Item, bool, error) {
		if !ok {
			return cur, false, store.ErrNotStored
		}
		if hasCAS && cur.CAS != it.CAS {
			return cur, false, store.ErrExists
		}
		v := make([]byte, 0, len(cur.Value)+len(it.Value))
		if prepend {
			v = append(append(v, it.Value...), cur.Value...)
		} else {
			v = append(append(v, cur.Value...), it.Value...)
		}
		cur.Value = v
		return cur, true, nil
	})
	return next.CAS, err
}

// metaSetInvalidate is ms with C and I: a write whose CAS unique is older
// than the item's is still stored, but marked stale, so readers know to
// refresh it.
func (c *conn) metaSetInvalidate(it store.Item) (uint64, error) {
	next, err := c.srv.store.Update(it.Key, func(cur store.Item, ok bool) (store.Item, bool, error) {
		if !ok {
			return cur, false, store.ErrNotFound
		}
		switch {
		case cur.CAS == it.CAS:
		case it.CAS < cur.CAS:
			it.Stale = true
			it.Expires = cur.Expires
		default:
			return cur, false, store.ErrExists
		}
		return it, true, nil
	})
	return next.CAS, err
}

// metaCode maps a store error to a meta reply code; "" means the error has a
// full memcached error line instead.
func metaCode(err error) string {
	switch {
	case err == nil:
		return "HD"
	case errors.Is(err, store.ErrNotStored):
		return "NS"
	case errors.Is(err, store.ErrExists):
		return "EX"
	case errors.Is(err, store.ErrNotFound):
		return "NF"
	}
	return ""
}

// md <key> <flag>*
func (c *conn) metaDelete(req *protocol.Request) {
	m := &req.Meta
	key := string(req.Key)
	var err error
	if m.Flags.Has('I') || m.Flags.Has('C') {
		_, err = c.srv.store.Update(key, func(cur store.Item, ok bool) (store.Item, bool, error) {
			if !ok {
				return cur, false, store.ErrNotFound
			}
			if m.Flags.Has('C') && cur.CAS != m.CAS {
				return cur, false, store.ErrExists
			}
			if !m.Flags.Has('I') {
				return cur, false, errDeleteNow
			}
			// Invalidate: keep the item for stale reads, and let the next
			// reader win the right to refresh it.
			cur.Stale, cur.Won = true, false
			if m.Flags.Has('T') {
				cur.Expires = store.ExpiresAt(m.TTL, c.now())
			}
			return cur, true, nil
		})
		if errors.Is(err, errDeleteNow) {
			err = c.srv.store.Delete(key)
		}
	} else {
		err = c.srv.store.Delete(key)
	}
	if err == nil {
		c.written(req.Key)
		c.local[statDeleteHits]++
	} else {
		c.local[statDeleteMisses]++
	}
	code := metaCode(err)
	if code == "HD" && m.Flags.Has('q') {
		return
	}
	c.w.MetaStart(code)
	c.metaEcho(req, nil)
	c.w.MetaEnd(nil)
}

// errDeleteNow tells metaDelete that the CAS matched and a plain delete
// follows.
var errDeleteNow = errors.New("delete")

// ma <key> <flag>*
func (c *conn) metaArith(req *protocol.Request) {
	m := &req.Meta
	key := string(req.Key)
	decr := m.Mode == 'D'
	created := false
	var n uint64 // the result; the stored value may be padded (see store.AddDelta)
	it, err := c.srv.store.Update(key, func(cur store.Item, ok bool) (store.Item, bool, error) {
		created = false
		if !ok {
			if !m.Flags.Has('N') {
				return cur, false, store.ErrNotFound
			}
			created, n = true, m.Initial
			cur = store.Item{Key: key, Expires: store.ExpiresAt(m.Vivify, c.now())}
			cur.Value = strconv.AppendUint(nil, m.Initial, 10)
			return cur, true, nil
		}
		if m.Flags.Has('C') && cur.CAS != m.CAS {
			return cur, false, store.ErrExists
		}
		var err error
		if n, cur.Value, err = store.AddDelta(nil, cur.Value, m.Delta, decr); err != nil {
			return cur, false, err
		}
		if m.Flags.Has('T') {
			cur.Expires = store.ExpiresAt(m.TTL, c.now())
		}
		return cur, true, nil
	})
	if !created { // memcached counts neither a hit nor a miss for an item N creates
		c.countIncr(err, decr)
	}
	if err == nil {
		c.written(req.Key)
	}
	code := metaCode(err)
	if code == "" {
		c.storeReply(req, err, protocol.Stored)
		return
	}
	if err != nil {
		c.w.MetaStart(code)
		c.metaEcho(req, nil)
		c.w.MetaEnd(nil)
		return
	}
	// memcached's q hides a nominal ma reply, but not the one for an item
	// it has just created.
	if m.Flags.Has('q') && !created {
		return
	}
	var num []byte
	if m.Flags.Has('v') {
		num = strconv.AppendUint(nil, n, 10) // the number, not the padded value
		c.w.MetaValueStart(len(num))
	} else {
		c.w.MetaStart("HD")
	}
	for _, f := range m.Order() {
		switch f {
		case 'c':
			c.w.MetaUint('c', it.CAS)
		case 't':
			c.w.MetaInt('t', c.ttl(it.Expires))
		case 'O':
			c.w.MetaBytes('O', m.Opaque)
		case 'k':
			c.metaKey(req)
		}
	}
	c.w.MetaEnd(num)
}

// me <key>
func (c *conn) metaDebug(req *protocol.Request) {
	it, ok := c.srv.store.Peek(string(req.Key))
	if !ok {
		c.w.Line("EN")
		return
	}
	exp := int64(-1)
	if !it.Expires.IsZero() {
		// memcached 1.6.18 prints the remaining TTL negated; clients that
		// parse me compare against it, so keep its sign.
		exp = -c.ttl(it.Expires)
	}
	fetch := "no"
	if it.Fetched {
		fetch = "yes"
	}
	size := len(req.Key) + len(it.Value) + itemHeader
	if it.Flags != 0 {
		size += 4
	}
	line := "ME " + string(req.Key) +
		" exp=" + strconv.FormatInt(exp, 10) +
		" la=0" +
		" cas=" + strconv.FormatUint(it.CAS, 10) +
		" fetch=" + fetch +
		" cls=1" +
		" size=" + strconv.Itoa(size)
	c.w.Line(line)
}
