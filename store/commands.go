package store

import "time"

// The memcached commands. Each runs under its key's stripe mutex (see
// Store.modify), so that its read and its write are one atomic step.

// expiry is the entry form of it.Expires.
func expiry(it *Item) int64 { return unixNanos(it.Expires) }

// Set stores it unconditionally and returns its new CAS unique. it.CAS is
// ignored.
func (s *Store) Set(it Item) (cas uint64) {
	e := s.overwrite(it.Key, func(_ *entry, _ int64) (*entry, error) {
		n := s.nextSeq()
		return newEntry(it.Key, it.Value, it.Flags, expiry(&it), s.casFor(n), n, bitsOf(&it)), nil
	})
	return e.cas
}

// Put stores it as it is, keeping it.CAS: for copies of items another node
// owns, whose CAS uniques clients must keep seeing.
func (s *Store) Put(it Item) {
	s.overwrite(it.Key, func(_ *entry, _ int64) (*entry, error) {
		return newEntry(it.Key, it.Value, it.Flags, expiry(&it), it.CAS, s.nextSeq(), bitsOf(&it)), nil
	})
}

// Add stores it only if the key holds no live item; otherwise ErrNotStored.
func (s *Store) Add(it Item) (uint64, error) {
	return s.casOf(s.modify(it.Key, func(cur *entry, _ int64) (*entry, error) {
		if cur != nil {
			return nil, ErrNotStored
		}
		n := s.nextSeq()
		return newEntry(it.Key, it.Value, it.Flags, expiry(&it), s.casFor(n), n, bitsOf(&it)), nil
	}))
}

// Replace stores it only if the key holds a live item; otherwise
// ErrNotStored.
func (s *Store) Replace(it Item) (uint64, error) {
	return s.casOf(s.modify(it.Key, func(cur *entry, _ int64) (*entry, error) {
		if cur == nil {
			return nil, ErrNotStored
		}
		n := s.nextSeq()
		return newEntry(it.Key, it.Value, it.Flags, expiry(&it), s.casFor(n), n, bitsOf(&it)), nil
	}))
}

// Append adds it.Value after the live item's value, keeping its flags and
// expiry; ErrNotStored if there is none. Only it.Key and it.Value are used.
func (s *Store) Append(it Item) (uint64, error) { return s.concat(it, false) }

// Prepend adds it.Value before the live item's value; see Append.
func (s *Store) Prepend(it Item) (uint64, error) { return s.concat(it, true) }

func (s *Store) concat(it Item, prepend bool) (uint64, error) {
	return s.casOf(s.modify(it.Key, func(cur *entry, _ int64) (*entry, error) {
		if cur == nil {
			return nil, ErrNotStored
		}
		old := cur.value()
		v := make([]byte, 0, len(old)+len(it.Value))
		if prepend {
			v = append(append(v, it.Value...), old...)
		} else {
			v = append(append(v, old...), it.Value...)
		}
		n := s.nextSeq()
		return newEntry(it.Key, v, cur.flags, cur.exp, s.casFor(n), n, 0), nil
	}))
}

// CompareAndSwap stores it if the live item's CAS unique is it.CAS:
// ErrNotFound if there is no live item, ErrExists if it was modified since.
func (s *Store) CompareAndSwap(it Item) (uint64, error) {
	return s.casOf(s.modify(it.Key, func(cur *entry, _ int64) (*entry, error) {
		switch {
		case cur == nil:
			return nil, ErrNotFound
		case cur.cas != it.CAS:
			return nil, ErrExists
		}
		n := s.nextSeq()
		return newEntry(it.Key, it.Value, it.Flags, expiry(&it), s.casFor(n), n, bitsOf(&it)), nil
	}))
}

// Incr adds delta to the item's decimal value (wrapping at 2^64), or with
// decr subtracts it (stopping at 0), and returns the result: ErrNotFound if
// there is no live item, ErrNotNumber if its value is not a number (see
// ParseCounter). The item gets a new CAS unique; a result not longer than
// the old value is padded with spaces to its length, as memcached does.
func (s *Store) Incr(key string, delta uint64, decr bool) (uint64, error) {
	var n uint64
	_, err := s.modify(key, func(cur *entry, _ int64) (*entry, error) {
		if cur == nil {
			return nil, ErrNotFound
		}
		old := cur.value()
		var buf [32]byte // most counters fit: no allocation
		v, num, err := AddDelta(buf[:0], old, delta, decr)
		if err != nil {
			return nil, err
		}
		n = v
		sq := s.nextSeq()
		var bits uint32
		if len(num) == len(old) {
			// memcached rewrites the item in place, keeping its flags.
			bits = cur.bits()
		}
		return newEntry(key, num, cur.flags, cur.exp, s.casFor(sq), sq, bits), nil
	})
	return n, err
}

// Touch sets the live item's expiry, marks it fetched and returns it,
// keeping its CAS unique (memcached's touch and gat do not change it);
// ErrNotFound if there is none. An expiry in the past deletes the item.
func (s *Store) Touch(key string, exp time.Time) (Item, error) {
	var fetched bool
	e, err := s.modify(key, func(cur *entry, _ int64) (*entry, error) {
		if cur == nil {
			return nil, ErrNotFound
		}
		fetched = cur.bits()&stateFetched != 0
		return newEntryKV(cur.kv, cur.klen(), cur.flags, unixNanos(exp), cur.cas, cur.seq, cur.bits()|stateFetched), nil
	})
	if err != nil {
		return Item{}, err
	}
	it := e.item()
	it.Fetched = fetched
	return it, nil
}

// Delete removes the key's live item; ErrNotFound if there is none.
func (s *Store) Delete(key string) error {
	h := s.hash(key)
	st := s.stripe(h)
	st.mu.Lock()
	defer st.mu.Unlock()
	now := s.now()
	s.flush.advance(now, s.seq.Load)
	cur := s.find(st, key, h)
	if cur == nil || !s.deleteLocked(st, key, h) {
		return ErrNotFound
	}
	if expired, flushed := s.invalid(cur, now); expired || flushed {
		s.ctr.reclaimed.Add(1)
		return ErrNotFound
	}
	return nil
}

// Flush invalidates every item stored before now+delay, at now+delay
// (memcached's flush_all [delay]); a delay of zero or less flushes now. The
// items' memory is reclaimed as they are met or evicted.
func (s *Store) Flush(delay time.Duration) {
	s.flush.flush(s.now(), delay, s.seq.Load())
}

// Update runs fn under the key's lock: the general atomic read-modify-write
// used by meta commands. fn gets the current item (ok=false if absent,
// expired or flushed) and returns the item to store, or store=false to leave
// the key as it is. The stored item gets a new CAS unique unless
// next.KeepCAS; its key is always key, its Stale, Won and Fetched are stored
// as given, and an Expires in the past deletes it. Update returns the stored item, or the current one (zero if none) when
// nothing was stored; fn's error is returned as-is. fn must not call the
// Store.
func (s *Store) Update(key string, fn func(cur Item, ok bool) (next Item, store bool, err error)) (Item, error) {
	var out Item
	_, err := s.modify(key, func(cur *entry, _ int64) (*entry, error) {
		var curItem Item
		if cur != nil {
			curItem = cur.item()
		}
		next, store, err := fn(curItem, cur != nil)
		if err != nil || !store {
			out = curItem
			return nil, err
		}
		sq := s.nextSeq()
		cas := s.casFor(sq)
		if next.KeepCAS {
			cas = next.CAS
		}
		var e *entry
		if cur != nil && sameBytes(next.Value, cur.value()) {
			// Only metadata changed: share the key and value bytes.
			e = newEntryKV(cur.kv, cur.klen(), next.Flags, expiry(&next), cas, sq, bitsOf(&next))
		} else {
			e = newEntry(key, next.Value, next.Flags, expiry(&next), cas, sq, bitsOf(&next))
		}
		out = e.item()
		return e, nil
	})
	return out, err
}

// casOf adapts modify's result to the (cas, error) the storage commands
// return.
func (s *Store) casOf(e *entry, err error) (uint64, error) {
	if err != nil {
		return 0, err
	}
	return e.cas, nil
}

// bitsOf is the entry form of it's meta flags.
func bitsOf(it *Item) uint32 {
	var b uint32
	if it.Stale {
		b |= stateStale
	}
	if it.Won {
		b |= stateWon
	}
	if it.Fetched {
		b |= stateFetched
	}
	return b
}

// sameBytes reports whether a and b are the same memory, as when an Update
// function hands back the value it was given.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
