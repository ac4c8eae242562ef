package store

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// indexModel drives an index and a map with the same operations. Keys are
// small integers; their hashes come from a table the test fills, so that
// many keys can share a home slot, a tag or the whole hash, and the
// comparison function (eq) is what tells them apart. A key's location
// encodes the key, so that eq needs no other state. It grows as a shard
// does: the old table is drained into the new one a couple of slots per
// step, and an entry a step touches moves at once.
type indexModel struct {
	t       testing.TB
	x       *index
	mem     []byte
	old     *index // being drained into x; nil if none
	oldMem  []byte
	drained int
	hash    func(key int) uint64
	locOf   map[int]uint64 // key -> location, for the keys in the index
	ver     uint64
}

func newIndexModel(t testing.TB, n int, hash func(int) uint64) *indexModel {
	mem, err := mapMem(indexBytes(n))
	if err != nil {
		t.Fatal(err)
	}
	m := &indexModel{t: t, x: newIndex(mem, n), mem: mem, hash: hash, locOf: map[int]uint64{}}
	t.Cleanup(func() { // the tables in use then: drain unmaps the ones it leaves
		unmapMem(m.mem)
		if m.old != nil {
			unmapMem(m.oldMem)
		}
	})
	return m
}

// loc makes a new location for key: never 0, key in the high bits.
func (m *indexModel) loc(key int) uint64 {
	m.ver++
	return uint64(key+1)<<20 | m.ver&(1<<20-1)
}

func keyOfLoc(loc uint64) int { return int(loc>>20) - 1 }

// find looks key up in the new table, then the old one, moving it out of
// the old one if take is set (as shard.find does).
func (m *indexModel) find(key int, take bool) (int, bool) {
	eq := func(loc uint64) bool { return keyOfLoc(loc) == key }
	if pos, ok := m.x.find(m.hash(key), eq); ok {
		return pos, true
	}
	if m.old == nil {
		return 0, false
	}
	pos, ok := m.old.find(m.hash(key), eq)
	if ok && take {
		pos = m.old.take(pos, m.hash(key), m.x)
	}
	return pos, ok
}

// drain moves n slots' entries out of the old table, as shard.drain does.
func (m *indexModel) drain(n int) {
	if m.old != nil && m.old.drainInto(m.x, &m.drained, n) {
		unmapMem(m.oldMem)
		m.old, m.oldMem = nil, nil
	}
}

func (m *indexModel) step(op byte, key int) {
	m.drain(2)
	pos, found := m.find(key, true)
	want, in := m.locOf[key]
	if found != in {
		m.t.Fatalf("key %d: index has it %v, model %v", key, found, in)
	}
	if found && m.x.loc(pos) != want {
		m.t.Fatalf("key %d: location %x, model %x", key, m.x.loc(pos), want)
	}
	switch op % 4 {
	case 0, 1: // insert or move
		l := m.loc(key)
		switch {
		case found:
			m.x.set(pos, l)
		case m.x.n+m.oldN() < len(m.x.slots):
			m.x.insert(m.hash(key), l)
		default:
			return
		}
		m.locOf[key] = l
	case 2:
		if found {
			m.x.remove(pos)
			delete(m.locOf, key)
		}
	case 3: // at: by location
		if found && m.x.at(m.hash(key), want) != pos {
			m.t.Fatalf("key %d: at() disagrees with find()", key)
		}
	}
	m.check()
}

func (m *indexModel) oldN() int {
	if m.old == nil {
		return 0
	}
	return m.old.n
}

// check verifies the tables: their counts, that every entry is found from
// its home without crossing an empty slot, Robin Hood's order in the new
// table (along a run, an entry's distance from home grows by at most one
// per slot), and that the old table holds only entries and tombs.
func (m *indexModel) check() {
	x := m.x
	n := 0
	for pos, s := range x.slots {
		if s == 0 {
			continue
		}
		n++
		prev := (pos + len(x.slots) - 1) % len(x.slots)
		if d := x.dist(pos); d > 0 && (x.slots[prev] == 0 || x.dist(prev) < d-1) {
			m.t.Fatalf("slot %d: distance %d after a slot at distance %d (empty: %v)", pos, d, x.dist(prev), x.slots[prev] == 0)
		}
		if key := keyOfLoc(s & locMask); m.locOf[key] != s&locMask {
			m.t.Fatalf("slot %d holds a location of key %d the model does not have", pos, key)
		}
	}
	old := 0
	if m.old != nil {
		for pos, s := range m.old.slots {
			if s != 0 && s != tomb {
				old++
				if key := keyOfLoc(s & locMask); m.locOf[key] != s&locMask {
					m.t.Fatalf("old slot %d holds a location of key %d the model does not have", pos, key)
				}
			}
		}
		if old != m.old.n {
			m.t.Fatalf("%d old slots used, old index counts %d", old, m.old.n)
		}
	}
	if n != x.n || n+old != len(m.locOf) {
		m.t.Fatalf("%d+%d slots used, index counts %d, model %d", n, old, x.n, len(m.locOf))
	}
	for key := range m.locOf {
		if _, ok := m.find(key, false); !ok {
			m.t.Fatalf("key %d is in neither table", key)
		}
	}
}

// grow starts draining the table into one a quarter larger, as a shard
// does, after draining the previous one.
func (m *indexModel) grow() {
	m.drain(len(m.x.slots) + 1)
	n := len(m.x.slots) + len(m.x.slots)/4
	mem, err := mapMem(indexBytes(n))
	if err != nil {
		m.t.Fatal(err)
	}
	m.old, m.oldMem, m.drained = m.x, m.mem, 0
	m.x, m.mem = newIndex(mem, n), mem
	m.check()
}

// clusteredHash gives keys few distinct hashes: 8 homes' worth of top
// bits, and tags that repeat, so probe runs wrap around the table and
// collide.
func clusteredHash(key int) uint64 {
	h := uint64(key%8)<<61 | uint64(key%3)<<40
	if key%5 == 0 {
		h |= uint64(key) << 38 // a distinct tag now and then
	}
	return h
}

func TestIndexModel(t *testing.T) {
	hashes := map[string]func(int) uint64{
		"clustered": clusteredHash,
		"spread":    func(key int) uint64 { return rand.New(rand.NewPCG(uint64(key), 7)).Uint64() },
		"one-hash":  func(int) uint64 { return 0xdead << 48 },
	}
	for name, hash := range hashes {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			m := newIndexModel(t, 16, hash) // runs wrap and fill up
			for i := range 30000 {
				m.step(byte(rng.IntN(4)), rng.IntN(24))
				if i%10000 == 9999 {
					m.grow() // 20 slots, then 25
				}
			}
		})
	}
}

// FuzzIndex runs the model on operations read from the input: each pair
// of bytes is an operation and a key.
func FuzzIndex(f *testing.F) {
	f.Add([]byte{0, 1, 0, 9, 2, 1, 0, 17, 3, 9})
	f.Add(binary.LittleEndian.AppendUint64(nil, 0x0102030405060708))
	f.Fuzz(func(t *testing.T, ops []byte) {
		m := newIndexModel(t, 8, clusteredHash)
		for i := 0; i+1 < len(ops); i += 2 {
			if ops[i] == 0xff {
				// At most 40 keys: a table past 4,096 slots shows nothing
				// more, and a quarter more a step grows without bound.
				if len(m.x.slots) < 4096 {
					m.grow()
				}
				continue
			}
			m.step(ops[i], int(ops[i+1]%40))
		}
	})
}

func BenchmarkIndexFind(b *testing.B) {
	const n = 1 << 20
	mem, err := mapMem(indexBytes(n))
	if err != nil {
		b.Fatal(err)
	}
	defer unmapMem(mem)
	x := newIndex(mem, n)
	rng := rand.New(rand.NewPCG(1, 1))
	hs := make([]uint64, len(x.slots)*7/8)
	for i := range hs {
		hs[i] = rng.Uint64()
		x.insert(hs[i], uint64(i+1))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		h := hs[i%len(hs)]
		if _, ok := x.find(h, func(loc uint64) bool { return true }); !ok {
			b.Fatal("lost")
		}
	}
}
