package store

import (
	"bytes"
	"strconv"
	"testing"
)

// growUntilDraining writes keys to shard 0 of a one-shard store until its
// index has grown and the old table still holds at least min entries, and
// returns the keys written.
func growUntilDraining(t *testing.T, s *Store, g *segEngine, min int) []string {
	t.Helper()
	sh := &g.shards[0]
	val := bytes.Repeat([]byte("v"), 50)
	var keys []string
	for i := 0; ; i++ {
		sh.mu.Lock()
		ok := sh.old != nil && sh.old.n >= min
		sh.mu.Unlock()
		if ok {
			return keys
		}
		if i > 1_000_000 {
			t.Fatal("the index never grew")
		}
		k := "k" + strconv.Itoa(i)
		s.Set(Item{Key: k, Value: val})
		keys = append(keys, k)
	}
}

// TestLockedReadMovesEntryUnderVersion: a read that falls back to the
// shard's lock (getLocked: after two lock-free tries lost to writers, or
// for a large, expired or flushed item) looks the key up with find,
// which moves the key's entry out of an index being drained: a tomb in the
// old table, then an insert into the new one (which may also shift other
// keys' entries along, Robin Hood). Lock-free reads (read.go) trust a
// miss if the shard's version did not move, so whoever changes a table
// must make the version odd. Interleaving, key k still in the old table:
//
//	lock-free read of k            locked read of k (getLocked)
//	v0 := ver (even)
//	probe the new table: no k
//	                               mu.Lock; find: old slot := tomb,
//	                               insert k into the new table; mu.Unlock
//	probe the old table: tomb
//	ver == v0: "k is not there"    returns k's value
//
// The read misses a live item that was never deleted, evicted or expired.
// The test plays the lock-free read's steps around a getLocked.
func TestLockedReadMovesEntryUnderVersion(t *testing.T) {
	s, g, _ := newSegStore(t, 8<<20, evictS3FIFO)
	if len(g.shards) != 1 {
		t.Fatalf("%d shards; the test wants one", len(g.shards))
	}
	sh := &g.shards[0]
	keys := growUntilDraining(t, s, g, 500)

	// A key whose entry is still in the old table.
	var key string
	var h uint64
	sh.mu.Lock()
	for _, k := range keys {
		h = s.hash(k)
		eq := func(loc uint64) bool {
			kk, _ := keyAt(sh.segs.get(uint32(loc>>segBits)).mem, int(loc&(maxSegSize-1)))
			return string(kk) == k
		}
		if _, ok := sh.old.find(h, eq); ok {
			key = k
			break
		}
	}
	sh.mu.Unlock()
	if key == "" {
		t.Fatal("no key left in the old table")
	}

	eq := func(loc uint64) bool {
		seg := sh.segs.get(uint32(loc >> segBits))
		if seg == nil {
			return false
		}
		k, ok := keyAt(seg.mem, int(loc&(maxSegSize-1)))
		return ok && string(k) == key
	}
	// The lock-free read, first half.
	v0 := sh.ver.Load()
	x := sh.ridx.Load()
	_, inNew := x.find(h, eq)
	// The locked read, in between.
	if _, ok := g.getLocked(sh, key, h, true, nil); !ok {
		t.Fatalf("getLocked(%q): miss", key)
	}
	// The lock-free read, second half.
	_, inOld := x.prev.Load().find(h, eq)
	if !inNew && !inOld && sh.ver.Load() == v0 {
		t.Fatalf("a lock-free read of %q found it in neither table and the shard's version did not move: it would report a miss of a live item", key)
	}
	mustGet(t, s, key)
	checkSegments(t, g)
}
