package server

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestHolders(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ttl := 5 * time.Second
	type step struct {
		op   string // add, done, miss, take
		key  string
		node uint64
		at   time.Duration
		want []uint64 // take's answer
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"a hit is registered until a write takes it", []step{
			{op: "add", key: "k", node: 1}, {op: "done", key: "k", node: 1},
			{op: "take", key: "k", at: time.Second, want: []uint64{1}},
			{op: "take", key: "k", at: time.Second, want: nil},
		}},
		{"a miss is not registered", []step{
			{op: "add", key: "k", node: 1}, {op: "miss", key: "k", node: 1},
			{op: "take", key: "k", want: nil},
		}},
		{"a copy lives the TTL at most", []step{
			{op: "add", key: "k", node: 1}, {op: "done", key: "k", node: 1},
			{op: "take", key: "k", at: ttl + time.Millisecond, want: nil},
		}},
		{"a read under way when a write takes the key stays registered", []step{
			{op: "add", key: "k", node: 1}, {op: "add", key: "k", node: 2}, {op: "done", key: "k", node: 2},
			{op: "take", key: "k", want: []uint64{1, 2}},
			{op: "done", key: "k", node: 1}, // it read the written value
			{op: "take", key: "k", want: []uint64{1}},
		}},
		{"a read under way that misses after the write leaves nothing", []step{
			{op: "add", key: "k", node: 1},
			{op: "take", key: "k", want: []uint64{1}},
			{op: "miss", key: "k", node: 1},
			{op: "take", key: "k", want: nil},
		}},
		{"one of two reads found the key", []step{
			{op: "add", key: "k", node: 1}, {op: "add", key: "k", node: 1},
			{op: "done", key: "k", node: 1}, {op: "miss", key: "k", node: 1},
			{op: "take", key: "k", want: []uint64{1}},
		}},
		{"registered again, the entry outlives its first TTL", []step{
			{op: "add", key: "k", node: 1}, {op: "done", key: "k", node: 1},
			{op: "add", key: "k", node: 1, at: 4 * time.Second}, {op: "done", key: "k", node: 1},
			{op: "add", key: "other", node: 1, at: 6 * time.Second}, // expires what is due
			{op: "take", key: "k", at: 7 * time.Second, want: []uint64{1}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHolders(ttl, 1<<20)
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				switch s.op {
				case "add":
					h.add(s.key, s.node, now)
				case "done", "miss":
					h.done(s.key, s.node, s.op == "done")
				case "take":
					got := h.take(s.key, now)
					slices.Sort(got)
					if !slices.Equal(got, s.want) {
						t.Fatalf("step %d: take %s = %v, want %v", i, s.key, got, s.want)
					}
				}
			}
		})
	}
}

// The registry stays within its budget however many keys are read
// through, forgetting the oldest (counted), and a key's registration
// costs the same whether the registry is empty or full.
func TestHoldersBudget(t *testing.T) {
	now := time.Unix(1000, 0)
	h := newHolders(time.Hour, 1<<20)
	forgot := 0
	const n = 100_000
	for i := range n {
		k := fmt.Sprintf("key-%d", i)
		forgot += h.add(k, 1, now)
		h.done(k, 1, true)
	}
	keys, bytes := h.stats()
	if bytes > 1<<20+holderShards*(holderEntryCost+holderCost+16) {
		t.Errorf("%d keys charged %d bytes, over the 1 MiB budget", keys, bytes)
	}
	if keys+forgot != n {
		t.Errorf("%d keys kept + %d forgotten, want %d", keys, forgot, n)
	}
	if got := h.take(fmt.Sprintf("key-%d", n-1), now); len(got) != 1 {
		t.Errorf("the newest key's holder was forgotten: %v", got)
	}
}

func BenchmarkHoldersAddFull(b *testing.B) {
	now := time.Unix(1000, 0)
	h := newHolders(time.Hour, 1<<20)
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	b.ResetTimer()
	for i := range b.N {
		k := keys[i%len(keys)]
		h.add(k, uint64(i), now)
		h.done(k, uint64(i), true)
	}
}

// The copy-holder registry's memory stays bounded when read-throughs
// miss at a high rate: the records of dropped entries are compacted away
// rather than pinned behind a live one for the copy TTL (a review saw
// 200,000 of them, ~22 MB, charged 115 bytes).
func TestHoldersFIFOBounded(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ttl := 5 * time.Second
	h := newHolders(ttl, 64<<10) // 64 KiB budget: 1 KiB a shard
	// A live entry: node 1 kept a copy of "hot".
	h.add("hot", 1, t0)
	h.done("hot", 1, true)
	sh := h.shard("hot")
	// Node 2 asks for one key that is not there, over and over, within
	// one TTL (here 200,000 misses in 4 s: 50,000 misses/s at one owner).
	miss := keysInShard(h, sh, 1)[0] // a key in the same shard as "hot"
	const n = 200_000
	for i := range n {
		now := t0.Add(time.Duration(i) * (4 * time.Second / n))
		h.add(miss, 2, now)
		h.done(miss, 2, false)
	}
	_, bytes := h.stats()
	sh.mu.Lock()
	records := len(sh.fifo) - sh.head
	capacity := cap(sh.fifo)
	sh.mu.Unlock()
	t.Logf("budget %d B a shard; registry charges %d B; FIFO holds %d records (cap %d), each a dead *holderEntry of %d+ bytes",
		h.maxBytes, bytes, records, capacity, holderEntryCost+len(miss))
	if records > 1000 {
		t.Errorf("FIFO holds %d records (~%d KiB uncounted) while the registry charges %d B of a %d B budget",
			records, records*(holderEntryCost+len(miss)+8)/1024, bytes, h.maxBytes)
	}
}

// TestWriteRoundsReused: rounds are reused once ended, and reuse must not
// reach the waiters of the round a reused one was before: each waiter
// holds the channel of the round it waited for.
func TestWriteRoundsReused(t *testing.T) {
	h := newHolders(time.Minute, 1<<20)
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}

	// Unwatched rounds open and end without a channel, and come back.
	_, r := h.begin("a")
	first := r.r
	if !h.roundOpen("a") {
		t.Fatal("round of a not open after begin")
	}
	r.end()
	if h.roundOpen("a") {
		t.Fatal("round of a still open after end")
	}
	if first.done != nil {
		t.Fatal("an unwatched round made a channel")
	}

	// A reader waits on a's round; a's next write waits on it too (prev).
	_, r1 := h.begin("a")
	if r1.r != first {
		t.Fatal("an ended round was not reused")
	}
	open, reader := h.round("a", true)
	if !open || reader == nil {
		t.Fatal("no channel for a reader of an open round")
	}
	prev, r2 := h.begin("a")
	if prev != reader {
		t.Fatal("the next write of a does not wait on the round before it")
	}
	r1.end()
	if !closed(reader) {
		t.Fatal("ending a round did not wake its reader")
	}
	if !h.roundOpen("a") {
		t.Fatal("a's later round closed with the earlier one")
	}

	// r1's round is reused by the write of b, a key of a's shard (rounds
	// are kept per shard): the reader's channel stays closed and b's round
	// gets a channel of its own.
	b := "b"
	for i := 0; h.shard(b) != h.shard("a"); i++ {
		b = fmt.Sprint("b", i)
	}
	_, rb := h.begin(b)
	if rb.r != r1.r {
		t.Fatal("the ended round was not reused")
	}
	if _, ch := h.round(b, true); ch == reader || closed(ch) {
		t.Fatal("a reused round handed out its old channel")
	}
	rb.end()
	r2.end()
	if h.open.Load() != 0 {
		t.Fatalf("%d rounds open after every round ended", h.open.Load())
	}
	h.await("a", time.Hour) // returns at once: no round open
}

// Registrations that expire together all expire, however many: a shard
// whose entries came due at once (after a partition healed) once counted
// each record it consumed at the FIFO's head as a dead record still
// waiting, compacted the FIFO while walking it, and then cleared the
// record of an entry it had not reached (which never expired after) or,
// with none left, indexed an empty FIFO and panicked on a peer
// connection.
func TestHoldersExpireTogether(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ttl := 5 * time.Second
	for _, tc := range []struct {
		name        string
		old, young  int // entries registered at t0, and at t0+4s
		wantAtEight int // entries left at t0+8s, when only the old are due
	}{
		{"all of a shard's entries due at once", 65, 0, 1},
		{"most due, some not", 100, 30, 31},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHolders(ttl, 1<<20)
			sh := h.shard("anchor")
			keys := keysInShard(h, sh, tc.old+tc.young+1)
			for i, k := range keys[:tc.old+tc.young] {
				at := t0
				if i >= tc.old {
					at = t0.Add(4 * time.Second)
				}
				h.add(k, 1, at)
				h.done(k, 1, true)
			}
			last := keys[len(keys)-1]
			h.add(last, 1, t0.Add(8*time.Second)) // expires what is due
			h.done(last, 1, true)
			if got := len(sh.keys); got != tc.wantAtEight {
				t.Errorf("entries at t0+8s: %d, want %d", got, tc.wantAtEight)
			}
			h.add("anchor", 1, t0.Add(time.Minute)) // everything before is due
			h.done("anchor", 1, true)
			if got := len(sh.keys); got != 1 {
				t.Errorf("entries a minute later: %d, want 1 (the anchor): an entry lost its FIFO record", got)
			}
			if got := sh.bytes; got != holderEntryCost+len("anchor")+holderCost {
				t.Errorf("shard charged %d bytes for one entry", got)
			}
		})
	}
}

// keysInShard returns n keys of sh, named k<i>.
func keysInShard(h *holders, sh *holderShard, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if k := fmt.Sprintf("k%d", i); h.shard(k) == sh {
			out = append(out, k)
		}
	}
	return out
}
