package store

import (
	"encoding/binary"
	"sync"
)

// A segment is a run of items appended back to back: header, key, value.
// An item's header, little-endian:
//
//	meta   1 byte   hdr* bits below
//	klen   1 byte   key length (keys are at most 255 bytes)
//	vlen   uvarint  value length (1 byte below 128, 2 below 16384, ...)
//	cas    8 bytes
//	seq    4 bytes  store sequence (Store.seq) at the write
//	flags  4 bytes  only if meta&hdrFlags (zero flags are left out)
//	exp    8 bytes  only if meta&hdrExp: Unix nanoseconds (no expiry: left out)
//
// So a 100-byte value with no flags and no expiry costs 15 bytes of
// header, 27 with both; the index adds 8 bytes per slot.
//
// An item is replaced by appending its new version (or rewritten where it
// is, when the new version has the same length: counters, touch, a set of
// a value of the same size) and the old one marked dead; its bytes come
// back when the segment is evicted or compacted (sweep.go).
const (
	hdrFreq    = 0x03 // accesses since insertion or the last eviction pass, saturating at 3
	hdrFetched = 0x04 // read since stored (stateFetched)
	hdrStale   = 0x08 // stateStale
	hdrWon     = 0x10 // stateWon
	hdrFlags   = 0x20
	hdrExp     = 0x40
	hdrDead    = 0x80 // replaced or removed: no index entry points here
)

// MaxSegmentKeyLen is the longest key the Segments engine stores (the
// protocol's limit is 250 bytes); a longer one is refused like an item
// too large for memory.
const MaxSegmentKeyLen = 255

// hdrSize is the header length of an item.
func hdrSize(vlen int, flags uint32, exp int64) int {
	n := 2 + uvarintLen(uint64(vlen)) + 12
	if flags != 0 {
		n += 4
	}
	if exp != 0 {
		n += 8
	}
	return n
}

// itemSize is the bytes an item takes in a segment.
func itemSize(klen, vlen int, flags uint32, exp int64) int {
	return hdrSize(vlen, flags, exp) + klen + vlen
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// metaOf is the header's meta byte for r, with access count freq.
func metaOf(r *rec, freq byte) byte {
	m := freq & hdrFreq
	if r.bits&stateFetched != 0 {
		m |= hdrFetched
	}
	if r.bits&stateStale != 0 {
		m |= hdrStale
	}
	if r.bits&stateWon != 0 {
		m |= hdrWon
	}
	if r.flags != 0 {
		m |= hdrFlags
	}
	if r.exp != 0 {
		m |= hdrExp
	}
	return m
}

// encode writes an item at b[0:], which must be itemSize long, and
// returns its size.
func encode(b []byte, key string, value []byte, r *rec, freq byte) int {
	b[0] = metaOf(r, freq)
	b[1] = byte(len(key))
	p := 2 + binary.PutUvarint(b[2:], uint64(len(value)))
	binary.LittleEndian.PutUint64(b[p:], r.cas)
	binary.LittleEndian.PutUint32(b[p+8:], uint32(r.seq))
	p += 12
	if r.flags != 0 {
		binary.LittleEndian.PutUint32(b[p:], r.flags)
		p += 4
	}
	if r.exp != 0 {
		binary.LittleEndian.PutUint64(b[p:], uint64(r.exp))
		p += 8
	}
	p += copy(b[p:], key)
	p += copy(b[p:], value)
	return p
}

// view is a decoded item header; offsets are from the segment's start.
type view struct {
	off, size int
	meta      byte
	key, val  int // where the key and the value start
	vlen      int
	cas       uint64
	seq       uint64
	flags     uint32
	exp       int64
}

// keyAt returns the key of the item at off, decoding no more than it must:
// index lookups call it for each slot whose tag matches. ok is false if
// mem does not hold a whole header and key at off, which only a read
// racing a writer (read.go) can meet.
func keyAt(mem []byte, off int) (key []byte, ok bool) {
	if off < 0 || off+2 > len(mem) {
		return nil, false
	}
	_, n := binary.Uvarint(mem[off+2:])
	if n <= 0 {
		return nil, false
	}
	p := off + 2 + n + 12
	meta := mem[off]
	if meta&hdrFlags != 0 {
		p += 4
	}
	if meta&hdrExp != 0 {
		p += 8
	}
	end := p + int(mem[off+1])
	if end > len(mem) {
		return nil, false
	}
	return mem[p:end], true
}

// decode reads the header of the item at off, which must be one.
func decode(mem []byte, off int) view {
	v, ok := parse(mem, off)
	if !ok {
		panic("store: no item where the index or a segment says one is")
	}
	return v
}

// parse reads the header of the item at off; ok is false if mem does not
// hold a whole item there, which only a read racing a writer (read.go)
// can meet.
func parse(mem []byte, off int) (v view, ok bool) {
	if off < 0 || off+2 > len(mem) {
		return view{}, false
	}
	v = view{off: off, meta: mem[off]}
	klen := int(mem[off+1])
	vlen, n := binary.Uvarint(mem[off+2:])
	if n <= 0 || vlen > uint64(len(mem)) {
		return view{}, false
	}
	v.vlen = int(vlen)
	p := off + 2 + n
	v.key = p + 12
	if v.meta&hdrFlags != 0 {
		v.key += 4
	}
	if v.meta&hdrExp != 0 {
		v.key += 8
	}
	if v.key+klen+v.vlen > len(mem) {
		return view{}, false
	}
	v.cas = binary.LittleEndian.Uint64(mem[p:])
	v.seq = uint64(binary.LittleEndian.Uint32(mem[p+8:]))
	p += 12
	if v.meta&hdrFlags != 0 {
		v.flags = binary.LittleEndian.Uint32(mem[p:])
		p += 4
	}
	if v.meta&hdrExp != 0 {
		v.exp = int64(binary.LittleEndian.Uint64(mem[p:]))
	}
	v.val = v.key + klen
	v.size = v.val + v.vlen - off
	return v, true
}

func (v *view) freq() byte              { return v.meta & hdrFreq }
func (v *view) fetched() bool           { return v.meta&hdrFetched != 0 }
func (v *view) end() int                { return v.off + v.size }
func (v *view) dead() bool              { return v.meta&hdrDead != 0 }
func (v *view) keyOf(mem []byte) []byte { return mem[v.key:v.val] }

// rec is the item as Store.apply sees it; value aliases mem.
func (v *view) rec(mem []byte) rec {
	r := rec{value: mem[v.val:v.end()], exp: v.exp, cas: v.cas, seq: v.seq, flags: v.flags}
	if v.meta&hdrFetched != 0 {
		r.bits |= stateFetched
	}
	if v.meta&hdrStale != 0 {
		r.bits |= stateStale
	}
	if v.meta&hdrWon != 0 {
		r.bits |= stateWon
	}
	return r
}

// segment is one mapped run of items. Its fields are guarded by its
// shard's mutex.
type segment struct {
	mem   []byte
	id    uint32 // the shard's number for it, in index locations; never 0
	large bool   // holds one item too large for a shared segment, in a mapping of its own
	q     uint8  // the queue it is in (qSmall, qMain), or noQueue

	prev, next uint32 // neighbours in its queue, oldest first; 0 none

	used  int // bytes appended
	live  int // bytes of items not dead
	nlive int

	// Hints for the sweeper, kept conservative: no item appended here
	// expires before minExp (0: none expires) or was written before minSeq.
	minExp int64
	minSeq uint64
}

// free is the room left at the end.
func (g *segment) free() int { return len(g.mem) - g.used }

// noted records an item appended here, or rewritten in place.
func (g *segment) noted(r *rec) {
	if r.exp != 0 && (g.minExp == 0 || r.exp < g.minExp) {
		g.minExp = r.exp
	}
	if g.nlive == 0 || r.seq < g.minSeq {
		g.minSeq = r.seq
	}
}

// reset empties g for reuse.
func (g *segment) reset() {
	g.used, g.live, g.nlive, g.minExp, g.minSeq = 0, 0, 0, 0, 0
	g.prev, g.next = 0, 0
}

// pool hands out the mapped memory of shared segments. It maps chunks of
// segments at a time (a mapping each would run into the kernel's limit on
// mappings per process) and never unmaps them before Close; a segment
// given back has its pages dropped, so it costs no memory until reused.
// Safe for concurrent use.
type pool struct {
	size int // of a segment

	mu     sync.Mutex
	free   [][]byte
	chunks [][]byte
}

// chunkSegments is how many segments pool maps at once.
const chunkSegments = 16

func (p *pool) get() ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) == 0 {
		c, err := mapMem(p.size * chunkSegments)
		if err != nil {
			return nil, err
		}
		p.chunks = append(p.chunks, c)
		for i := chunkSegments - 1; i >= 0; i-- {
			p.free = append(p.free, c[i*p.size:(i+1)*p.size:(i+1)*p.size])
		}
	}
	b := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	return b, nil
}

func (p *pool) put(b []byte) {
	dropMem(b)
	p.mu.Lock()
	p.free = append(p.free, b)
	p.mu.Unlock()
}

// close unmaps every chunk; no segment may be in use.
func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.chunks {
		unmapMem(c)
	}
	p.chunks, p.free = nil, nil
}
