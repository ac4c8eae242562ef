package store

import (
	"sync/atomic"
	"unsafe"
)

// index maps a key's hash to where its item lives, in one 8-byte slot per
// item and no pointers: an open-addressing table with linear probing and
// Robin Hood placement, in a mapping of its own (mapMem). It does not know
// keys: a lookup gives each slot whose tag matches to a function that
// compares the key in place.
//
// A slot holds the hash's top tagBits bits (the tag) above a location
// (locBits: a segment number and an offset in it); an empty slot is zero,
// which no location is (segment numbers start at 1). A hash's home slot is
// its tag scaled to the table's size (tag × size / 2^tagBits, Lemire's
// fast range), which the slot keeps: the table grows to any size, by a
// quarter at a time, and a slot's probe distance is known, without the
// key. The tag's low bits, below the home, filter lookups: with 2^20 slots
// a lookup compares a key it did not want about once in 64 slots visited.
//
// Robin Hood: an entry being placed takes the slot of one nearer its own
// home and carries that one on, so probe lengths stay even and a lookup
// for a missing key stops as soon as it passes where the key would be.
// Removal shifts the following entries back (no tombstones). The table
// grows past 7/8 full.
//
// Growing is incremental (shard.grow): the new table is published with
// the old one as its prev, and the old table's entries move into the new
// one a few slots per write (drainInto), or when a write touches them.
// An entry moved out of the old table leaves a tomb, so that the entries
// after it stay where lookups look for them; nothing else changes a
// table being drained. A lookup while one drains tries the new table,
// then the old.
//
// Not safe for concurrent use: each shard's mutex guards its index.
// Reads that take no lock (read.go) load prev atomically, and find is
// bounded, whatever the slots hold.
type index struct {
	slots []uint64
	n     int                   // entries
	prev  atomic.Pointer[index] // the table being drained into this one; nil if none
}

const (
	locBits  = 38 // segment number (segIDBits) and offset (segBits)
	tagBits  = 64 - locBits
	locMask  = 1<<locBits - 1
	minIndex = 64           // slots a table starts with
	maxIndex = 1 << tagBits // so that homes are distinct

	// tomb fills the slot of an entry moved out of a table being
	// drained: not empty, and no entry's (locations are never 0).
	tomb = 1 << locBits
)

// indexBytes is what a table of n slots takes.
func indexBytes(n int) int { return 8 * n }

// newIndex returns a table of n slots in mem, which must be zeroed, at
// least indexBytes(n) long and 8-byte aligned (a mapping is).
func newIndex(mem []byte, n int) *index {
	return &index{slots: unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), n)}
}

// home is the slot a hash (or a slot's content) starts probing at.
func (x *index) home(h uint64) int { return int((h >> locBits) * uint64(len(x.slots)) >> tagBits) }

// next is the slot after pos.
func (x *index) next(pos int) int {
	if pos++; pos == len(x.slots) {
		return 0
	}
	return pos
}

// dist is how far the entry at pos is from its home.
func (x *index) dist(pos int) int {
	d := pos - x.home(x.slots[pos])
	if d < 0 {
		d += len(x.slots)
	}
	return d
}

// full reports whether one more entry would take the table past 7/8.
func (x *index) full() bool { return (x.n+1)*8 > len(x.slots)*7 }

// find returns the position of h's entry for which eq(location) holds.
func (x *index) find(h uint64, eq func(loc uint64) bool) (int, bool) {
	tag := h >> locBits
	pos := x.home(h)
	for d := range len(x.slots) {
		s := x.slots[pos]
		switch {
		case s == 0:
			return 0, false
		case s&locMask == 0:
			// A tomb: the entries after it are where they were.
		case x.dist(pos) < d:
			return 0, false
		case s>>locBits == tag && eq(s&locMask):
			return pos, true
		}
		pos = x.next(pos)
	}
	return 0, false
}

// at returns the position of the entry holding loc for hash h, which must
// be in the table.
func (x *index) at(h, loc uint64) int {
	pos, ok := x.find(h, func(l uint64) bool { return l == loc })
	if !ok {
		panic("store: index lost an item")
	}
	return pos
}

// loc is the location held at pos.
func (x *index) loc(pos int) uint64 { return x.slots[pos] & locMask }

// set moves the entry at pos to loc.
func (x *index) set(pos int, loc uint64) { x.slots[pos] = x.slots[pos]&^locMask | loc }

// insert adds an entry for h at loc and returns its position; the table
// must not be full, nor be drained.
func (x *index) insert(h, loc uint64) int {
	e := h&^locMask | loc
	pos, at := x.home(h), -1
	for d := 0; ; d++ {
		s := x.slots[pos]
		if s == 0 {
			x.slots[pos] = e
			x.n++
			if at < 0 {
				at = pos
			}
			return at
		}
		if sd := x.dist(pos); sd < d {
			x.slots[pos], e = e, s
			d = sd
			if at < 0 {
				at = pos
			}
		}
		pos = x.next(pos)
	}
}

// take moves the entry at pos, for hash h, into y, leaving a tomb, and
// returns its position in y.
func (x *index) take(pos int, h uint64, y *index) int {
	s := x.slots[pos]
	x.slots[pos] = tomb
	x.n--
	return y.insert(h, s&locMask)
}

// drainInto moves the entries of up to n slots, from *from on, into y,
// and reports whether x has no entries left.
func (x *index) drainInto(y *index, from *int, n int) bool {
	for ; n > 0 && x.n > 0 && *from < len(x.slots); n, *from = n-1, *from+1 {
		if s := x.slots[*from]; s&locMask != 0 {
			x.take(*from, s, y) // a slot keeps the hash bits insert needs
		}
	}
	return x.n == 0
}

// remove deletes the entry at pos, shifting back the entries after it
// that are away from home.
func (x *index) remove(pos int) {
	for {
		next := x.next(pos)
		if x.slots[next] == 0 || x.dist(next) == 0 {
			x.slots[pos] = 0
			x.n--
			return
		}
		x.slots[pos] = x.slots[next]
		pos = next
	}
}

// moveTo inserts every entry of x into y, which must be large enough.
func (x *index) moveTo(y *index) {
	from := 0
	x.drainInto(y, &from, len(x.slots))
}
