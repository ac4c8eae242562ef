package store

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"
)

// Errors, named after the memcached replies they stand for.
var (
	ErrNotStored = errors.New("not stored")                                      // NOT_STORED
	ErrExists    = errors.New("exists")                                          // EXISTS
	ErrNotFound  = errors.New("not found")                                       // NOT_FOUND
	ErrNotNumber = errors.New("cannot increment or decrement non-numeric value") // CLIENT_ERROR ...
)

// Item is one cached value as callers see it.
type Item struct {
	Key string
	// Value is copied by the store when written. Values returned by the
	// store alias its memory and must not be modified.
	Value   []byte
	Flags   uint32
	Expires time.Time // zero: never
	CAS     uint64
	Stale   bool // meta: marked stale by md I / ms I
	Won     bool // meta: a W (win) flag has been handed out for this stale/vivified item
	// Fetched reports whether the item had been read (Get, Touch) since it
	// was stored, before the call that returned it: memcached's mg h flag
	// and me's fetch=. Get and Touch set it; Peek does not.
	Fetched bool

	// KeepCAS, on an item returned by an Update function, stores CAS as
	// given instead of assigning a new unique: touching or handing out a
	// win token is not a modification in memcached's sense. Ignored
	// elsewhere.
	KeepCAS bool
}

// ItemOverhead is what the Ristretto engine charges per item against
// Config.MaxBytes on top of its key and value allocation (see allocSize):
// the heap one item holds beyond that allocation. It is made of the
// 48-byte entry, ristretto's 56-byte slot in its sharded map and 16-byte
// slot in its policy's cost map, both at the load factors Go's maps run
// at, so it moves with the item count as Go's maps grow by doubling.
// Measured as live heap after a collection, stores of 16 MiB to 256 MiB
// filled twice over: 201-205 bytes with 16-byte values, 253-258 with
// 100-byte ones (BenchmarkMemory, 250k to 2M items of 100 bytes, saw 160
// to 230 counting heap in use instead). The charge is the top of that
// range, so that a full store of copies stays within its budget and the
// Go runtime's memory limit, which the budget sets (cmd/spillway), is
// never below the live heap. (Measured before an entry shared one
// allocation with its key and value, which spares about 16 bytes an
// item: the charge errs on the safe side.) Memcached's equivalent is its
// 56-byte item header plus slab rounding.
const ItemOverhead = 256

// MaxKeyLen is the longest key the store accepts (memcached's own limit is
// 250 bytes; the protocol layer enforces that one).
const MaxKeyLen = 1<<24 - 1

// entry is the stored form of an item: a 48-byte header followed by key
// and value, in one allocation (newEntry). It is immutable once published,
// except for the atomic bits in state; every write makes a new entry, so
// readers never lock and never see a torn item.
type entry struct {
	kv    string // key followed by value
	exp   int64  // expiry in Unix nanoseconds; 0 never
	cas   uint64
	seq   uint64 // store sequence at the write; flush_all compares it with a watermark
	flags uint32
	// state packs the key length (high 24 bits) with the flags below.
	// stateStale and stateWon are fixed at creation; stateLive, stateGone
	// and stateFetched are set at most once each, by whoever first observes
	// the event.
	state atomic.Uint32
}

const (
	stateLive    = 1 << 0 // counted in Stats.CurrItems/Bytes
	stateGone    = 1 << 1 // left ristretto (replaced, deleted, evicted, rejected)
	stateStale   = 1 << 2
	stateWon     = 1 << 3
	stateFetched = 1 << 4 // set by the first read; the only one set after publication besides live/gone
	metaBits     = stateStale | stateWon | stateFetched
	klenShift    = 8
)

// newEntry copies key and value into one allocation, behind the entry
// itself: a []byte, which the collector marks but never scans, so that a
// full Ristretto store of copies costs a collection one object per item
// rather than two, one of them scanned (BenchmarkGCPause). The entry's one
// pointer, kv, points into that same allocation: the collector need not see
// it, since whatever keeps the entry keeps its bytes. (So such an entry's
// kv must never point anywhere else: newEntryKV, which shares another
// entry's bytes, makes an ordinary entry, which the collector scans.) bits
// holds metaBits.
func newEntry(key string, value []byte, flags uint32, exp int64, cas, seq uint64, bits uint32) *entry {
	if len(key) > MaxKeyLen {
		panic("store: key longer than MaxKeyLen")
	}
	n := len(key) + len(value)
	buf := make([]byte, entrySize+n)
	e := (*entry)(unsafe.Pointer(&buf[0])) // a size class: 8-byte aligned
	if n > 0 {
		kv := buf[entrySize:]
		copy(kv, key)
		copy(kv[len(key):], value)
		// kv is never written again, so it may back an immutable string.
		e.kv = unsafe.String(&kv[0], n)
	}
	e.exp, e.cas, e.seq, e.flags = exp, cas, seq, flags
	e.state.Store(uint32(len(key))<<klenShift | bits&metaBits)
	return e
}

const entrySize = int(unsafe.Sizeof(entry{}))

// newEntryKV makes an entry that shares kv (an existing entry's key and
// value) when only the metadata changes.
func newEntryKV(kv string, klen int, flags uint32, exp int64, cas, seq uint64, bits uint32) *entry {
	e := &entry{kv: kv, exp: exp, cas: cas, seq: seq, flags: flags}
	e.state.Store(uint32(klen)<<klenShift | bits&metaBits)
	return e
}

func (e *entry) klen() int    { return int(e.state.Load() >> klenShift) }
func (e *entry) key() string  { return e.kv[:e.klen()] }
func (e *entry) bits() uint32 { return e.state.Load() & metaBits }

// value returns the value bytes without copying; callers must not modify
// them.
func (e *entry) value() []byte {
	v := e.kv[e.klen():]
	if len(v) == 0 {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(v), len(v))
}

// cost is what the item is charged against MaxBytes: its key and value
// allocation as the Go allocator rounds it, and ItemOverhead.
func (e *entry) cost() int64 { return int64(allocSize(len(e.kv))) + ItemOverhead }

// allocSize is what the Go allocator spends on n bytes of pointer-free
// memory: n rounded up to its size class (up to 12.5% more: a 4,105-byte
// key and value take 4,864), or to whole 8 KiB pages past the largest
// class. Without it a store of 4 KiB values held 22% more than its limit.
func allocSize(n int) int {
	if n == 0 {
		return 0
	}
	if i, _ := slices.BinarySearch(sizeClasses, n); i < len(sizeClasses) {
		return sizeClasses[i]
	}
	const page = 8 << 10
	return (n + page - 1) &^ (page - 1)
}

// sizeClasses are the allocator's size classes for small objects, read
// from the running runtime (append rounds a new slice's capacity up to
// its class) rather than copied from a Go release.
var sizeClasses = func() []int {
	const maxSmall = 32 << 10 // the runtime's _MaxSmallSize
	src := make([]byte, maxSmall)
	var classes []int
	for n := 1; n <= maxSmall; {
		c := cap(append([]byte(nil), src[:n]...))
		classes = append(classes, c)
		n = c + 1
	}
	return classes
}()

// rec is e as Store.apply sees it.
func (e *entry) rec() rec {
	return rec{value: e.value(), exp: e.exp, cas: e.cas, seq: e.seq, flags: e.flags, bits: e.bits()}
}

// item converts e to the caller's view.
func (e *entry) item() Item {
	st := e.state.Load()
	klen := int(st >> klenShift)
	it := Item{
		Key:     e.kv[:klen],
		Flags:   e.flags,
		CAS:     e.cas,
		Stale:   st&stateStale != 0,
		Won:     st&stateWon != 0,
		Fetched: st&stateFetched != 0,
	}
	it.Value = e.value()
	if e.exp != 0 {
		it.Expires = time.Unix(0, e.exp)
	}
	return it
}

// markLive counts e as stored unless it already left the cache. It reports
// whether this call counted it.
func (e *entry) markLive() bool {
	for {
		old := e.state.Load()
		if old&(stateLive|stateGone) != 0 {
			return false
		}
		if e.state.CompareAndSwap(old, old|stateLive) {
			return true
		}
	}
}

// markGone records that e left the cache. It reports whether e had been
// counted, so that the caller uncounts it exactly once.
func (e *entry) markGone() bool {
	old := e.state.Or(stateGone)
	return old&stateLive != 0 && old&stateGone == 0
}

func (e *entry) gone() bool { return e.state.Load()&stateGone != 0 }

// fetch marks e as read, writing only the first time so that a hot key's
// readers do not all write its cache line.
func (e *entry) fetch() {
	if e.state.Load()&stateFetched == 0 {
		e.state.Or(stateFetched)
	}
}

// unixNanos converts an expiry to the entry's form: 0 for never, at least 1
// otherwise, saturating for times Go cannot express in int64 nanoseconds.
func unixNanos(t time.Time) int64 {
	switch {
	case t.IsZero():
		return 0
	case t.Unix() >= math.MaxInt64/int64(time.Second):
		return math.MaxInt64
	case t.Unix() <= 0:
		return 1
	}
	return t.UnixNano()
}

// ParseCounter reads a stored value as memcached's incr/decr do (its
// safe_strtoull): leading white space, an optional sign, at least one
// decimal digit, then the end of the value, white space or a NUL byte. A
// '-' wraps modulo 2^64 like strtoull, and is refused when the result would
// be negative as a signed number ("-0" is 0, "-1" is an error). Values above
// 2^64-1 are refused. The error is ErrNotNumber.
func ParseCounter(b []byte) (uint64, error) {
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	neg := false
	if i < len(b) && (b[i] == '+' || b[i] == '-') {
		neg = b[i] == '-'
		i++
	}
	start := i
	var n uint64
	for ; i < len(b) && '0' <= b[i] && b[i] <= '9'; i++ {
		d := uint64(b[i] - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, ErrNotNumber // strtoull's ERANGE
		}
		n = n*10 + d
	}
	if i == start || i < len(b) && !isSpace(b[i]) && b[i] != 0 {
		return 0, ErrNotNumber
	}
	if neg {
		n = -n
		if int64(n) < 0 {
			return 0, ErrNotNumber
		}
	}
	return n, nil
}

// isSpace is C's isspace in the "C" locale.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// AddDelta is incr/decr on a stored value, as memcached does it: old is
// parsed with ParseCounter (ErrNotNumber if it is not a number), delta is
// added (wrapping at 2^64) or, with decr, subtracted (stopping at 0). It
// returns the new number and appends the value to store to dst (see
// appendCounter: padded with spaces to the old length when not longer).
// Incr and the meta arithmetic command share it.
func AddDelta(dst, old []byte, delta uint64, decr bool) (uint64, []byte, error) {
	n, err := ParseCounter(old)
	if err != nil {
		return 0, dst, err
	}
	switch {
	case !decr:
		n += delta
	case delta > n:
		n = 0
	default:
		n -= delta
	}
	return n, appendCounter(dst, n, len(old)), nil
}

// appendCounter appends n as memcached writes an incr/decr result: when the
// number is not longer than the old value, memcached rewrites the item in
// place and pads the rest with spaces, so "10" decremented by one reads
// back as "9 " (memcached 1.6 do_add_delta).
func appendCounter(dst []byte, n uint64, oldLen int) []byte {
	start := len(dst)
	dst = strconv.AppendUint(dst, n, 10)
	for len(dst)-start < oldLen {
		dst = append(dst, ' ')
	}
	return dst
}
