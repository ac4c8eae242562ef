package store

import "time"

// The memcached commands. Each is one writeOp that the engine runs under
// its key's lock (engine.write), handing the key's live record to
// Store.apply, so that a command's read and its write are one atomic step.
// apply is the only place that knows what the commands mean.

// rec is a stored item as apply sees it. value aliases the engine's memory
// (or, for a record apply makes, the caller's): it is good only while the
// key's lock is held.
type rec struct {
	value []byte
	exp   int64 // Unix nanoseconds; 0 never
	cas   uint64
	seq   uint64 // store sequence at the write (Store.seq)
	flags uint32
	bits  uint32 // metaBits: stateStale, stateWon, stateFetched
}

type opKind uint8

const (
	opSet opKind = iota
	opPut
	opAdd
	opReplace
	opAppend
	opPrepend
	opCAS
	opIncr
	opTouch
	opUpdate
	opDelete
)

// writeOp is one command, passed by value so that it stays on the stack.
type writeOp struct {
	kind  opKind
	it    Item   // the item to store; opTouch: it.Expires
	delta uint64 // opIncr
	decr  bool   // opIncr
	// seq is the store sequence the write's record takes: read before the
	// key's item is checked (Store.begin), not when the record is made.
	seq uint64
	// fn is opUpdate's function.
	fn func(cur Item, ok bool) (next Item, store bool, err error)
}

// lookup reports whether the op depends on the current item. Set and Put
// do not, and do not count as an access to it (ristretto's TinyLFU).
func (op *writeOp) lookup() bool { return op.kind != opSet && op.kind != opPut }

// returnsItem reports whether the caller gets the resulting item back.
func (op *writeOp) returnsItem() bool { return op.kind == opTouch || op.kind == opUpdate }

// outcome is what a write did. apply fills in all but item, which the
// engine makes from what it stored (or from the current record when an
// Update stored nothing), in memory the caller may keep.
type outcome struct {
	next    rec  // to store, if store
	store   bool // store next
	remove  bool // delete the key's item (opDelete)
	err     error
	n       uint64 // opIncr: the new number
	fetched bool   // opTouch: the item had been fetched before
	item    Item   // opTouch, opUpdate
	// same: the stored record is the old item with new metadata (a
	// touch, an Update with KeepCAS) or rewritten in place (an incr or
	// decr whose result is no longer than the old value), not a new
	// item: memcached counts none of them in total_items.
	same bool
}

// expiry is the record form of it.Expires.
func expiry(it *Item) int64 { return unixNanos(it.Expires) }

// fresh is the record of a new write of it, with a new CAS unique.
func (s *Store) fresh(it *Item, seq uint64) rec { return s.record(it, s.unique(), seq) }

// record is the record of a write of it with the given CAS unique and
// store sequence.
func (s *Store) record(it *Item, cas, seq uint64) rec {
	return rec{value: it.Value, flags: it.Flags, exp: expiry(it), cas: cas, seq: seq, bits: bitsOf(it)}
}

// apply is op's meaning: given key's live record cur (nil if absent,
// expired or flushed), what to store. It runs under the key's lock.
func (s *Store) apply(op *writeOp, key string, cur *rec) outcome {
	var o outcome
	if o.err = refusal(op, cur); o.err != nil {
		return o
	}
	it := &op.it
	switch op.kind {
	case opSet, opAdd, opReplace, opCAS:
		o.next = s.fresh(it, op.seq)
	case opPut:
		o.next = s.record(it, it.CAS, op.seq)
	case opAppend, opPrepend:
		v := make([]byte, 0, len(cur.value)+len(it.Value))
		if op.kind == opPrepend {
			v = append(append(v, it.Value...), cur.value...)
		} else {
			v = append(append(v, cur.value...), it.Value...)
		}
		o.next = rec{value: v, flags: cur.flags, exp: cur.exp, cas: s.unique(), seq: op.seq}
	case opIncr:
		// The digits get an allocation of their own: a buffer on the
		// engine's stack would escape with every write's outcome.
		n, num, err := AddDelta(nil, cur.value, op.delta, op.decr)
		if err != nil {
			o.err = err
			return o
		}
		o.n = n
		var bits uint32
		if len(num) == len(cur.value) {
			// memcached rewrites the item in place, keeping its flags,
			// and links no new item: total_items stays (o.same). Counted,
			// "incr n 1" on "10" made total_items one more than memcached
			// 1.6.18's (TestTotalItemsIncrInPlace).
			bits = cur.bits
			o.same = true
		}
		o.next = rec{value: num, flags: cur.flags, exp: cur.exp, cas: s.unique(), seq: op.seq, bits: bits}
	case opTouch:
		// Not a modification: the CAS unique and sequence stay.
		o.fetched = cur.bits&stateFetched != 0
		o.next = *cur
		o.next.exp = expiry(it)
		o.next.bits |= stateFetched
		o.same = true
	case opUpdate:
		var curItem Item
		if cur != nil {
			curItem = cur.item(key)
		}
		next, store, err := op.fn(curItem, cur != nil)
		if err != nil || !store {
			o.err = err
			return o
		}
		if next.KeepCAS {
			o.next = s.record(&next, next.CAS, op.seq)
			o.same = true
		} else {
			o.next = s.fresh(&next, op.seq)
		}
	case opDelete:
		o.remove = true
		return o
	}
	o.store = true
	return o
}

// refusal is the error a command gets from whether the key holds a live
// item (cur) alone, if any.
func refusal(op *writeOp, cur *rec) error {
	switch op.kind {
	case opAdd:
		if cur != nil {
			return ErrNotStored
		}
	case opReplace, opAppend, opPrepend:
		if cur == nil {
			return ErrNotStored
		}
	case opCAS:
		switch {
		case cur == nil:
			return ErrNotFound
		case cur.cas != op.it.CAS:
			return ErrExists
		}
	case opIncr, opTouch, opDelete:
		if cur == nil {
			return ErrNotFound
		}
	}
	return nil
}

// item is r as the caller sees it; Value aliases r.value.
func (r *rec) item(key string) Item {
	it := Item{
		Key:     key,
		Value:   r.value,
		Flags:   r.flags,
		CAS:     r.cas,
		Stale:   r.bits&stateStale != 0,
		Won:     r.bits&stateWon != 0,
		Fetched: r.bits&stateFetched != 0,
	}
	if r.exp != 0 {
		it.Expires = time.Unix(0, r.exp)
	}
	return it
}

// Set stores it unconditionally and returns its new CAS unique. it.CAS is
// ignored.
func (s *Store) Set(it Item) (cas uint64) {
	return s.write(it.Key, writeOp{kind: opSet, it: it}).next.cas
}

// Put stores it as it is, keeping it.CAS: for copies of items another node
// owns, whose CAS uniques clients must keep seeing.
func (s *Store) Put(it Item) {
	s.write(it.Key, writeOp{kind: opPut, it: it})
}

// Add stores it only if the key holds no live item; otherwise ErrNotStored.
func (s *Store) Add(it Item) (uint64, error) { return s.store(opAdd, it) }

// Replace stores it only if the key holds a live item; otherwise
// ErrNotStored.
func (s *Store) Replace(it Item) (uint64, error) { return s.store(opReplace, it) }

// Append adds it.Value after the live item's value, keeping its flags and
// expiry; ErrNotStored if there is none. Only it.Key and it.Value are used.
func (s *Store) Append(it Item) (uint64, error) { return s.store(opAppend, it) }

// Prepend adds it.Value before the live item's value; see Append.
func (s *Store) Prepend(it Item) (uint64, error) { return s.store(opPrepend, it) }

// CompareAndSwap stores it if the live item's CAS unique is it.CAS:
// ErrNotFound if there is no live item, ErrExists if it was modified since.
func (s *Store) CompareAndSwap(it Item) (uint64, error) { return s.store(opCAS, it) }

// store runs a storage command and returns the new item's CAS unique.
func (s *Store) store(kind opKind, it Item) (uint64, error) {
	o := s.write(it.Key, writeOp{kind: kind, it: it})
	if o.err != nil {
		return 0, o.err
	}
	return o.next.cas, nil
}

// Incr adds delta to the item's decimal value (wrapping at 2^64), or with
// decr subtracts it (stopping at 0), and returns the result: ErrNotFound if
// there is no live item, ErrNotNumber if its value is not a number (see
// ParseCounter). The item gets a new CAS unique; a result not longer than
// the old value is padded with spaces to its length, as memcached does.
func (s *Store) Incr(key string, delta uint64, decr bool) (uint64, error) {
	o := s.write(key, writeOp{kind: opIncr, delta: delta, decr: decr})
	return o.n, o.err
}

// Touch sets the live item's expiry, marks it fetched and returns it,
// keeping its CAS unique (memcached's touch and gat do not change it);
// ErrNotFound if there is none. An expiry in the past deletes the item.
// The returned item's Fetched says whether it had been fetched before.
func (s *Store) Touch(key string, exp time.Time) (Item, error) {
	o := s.write(key, writeOp{kind: opTouch, it: Item{Expires: exp}})
	if o.err != nil {
		return Item{}, o.err
	}
	o.item.Fetched = o.fetched
	return o.item, nil
}

// Delete removes the key's live item; ErrNotFound if there is none.
func (s *Store) Delete(key string) error {
	return s.write(key, writeOp{kind: opDelete}).err
}

// Flush invalidates every item stored before now+delay, at now+delay
// (memcached's flush_all [delay]); a delay of zero or less flushes now.
// The engine reclaims the items' memory as it meets them (Ristretto) or in
// the background (Segments).
func (s *Store) Flush(delay time.Duration) {
	s.flush.flush(s.now(), delay, s.seq.Load)
	s.eng.flushed()
}

// Update runs fn under the key's lock: the general atomic read-modify-write
// used by meta commands. fn gets the current item (ok=false if absent,
// expired or flushed) and returns the item to store, or store=false to leave
// the key as it is. The stored item gets a new CAS unique unless
// next.KeepCAS; its key is always key, its Stale, Won and Fetched are stored
// as given, and an Expires in the past deletes it. Update returns the
// stored item, or the current one (zero if none) when nothing was stored;
// fn's error is returned as-is. fn must not call the Store, nor keep
// cur.Value after it returns.
func (s *Store) Update(key string, fn func(cur Item, ok bool) (next Item, store bool, err error)) (Item, error) {
	o := s.write(key, writeOp{kind: opUpdate, fn: fn})
	return o.item, o.err
}

// bitsOf is the record form of it's meta flags.
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
