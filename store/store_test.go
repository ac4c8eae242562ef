package store

import (
	"bytes"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// seed stores items on a fresh store and returns their CAS uniques by key.
func seed(t *testing.T, s *Store, clk *clock, items []Item) map[string]uint64 {
	t.Helper()
	cas := make(map[string]uint64)
	for _, it := range items {
		cas[it.Key] = s.Set(it)
	}
	return cas
}

// in returns an expiry exptime seconds from the fake clock's start.
func in(exptime int64) time.Time { return ExpiresAt(exptime, epoch) }

func TestSet(t *testing.T) { eachEngine(t, testSet) }

func testSet(t *testing.T, eng Engine) {
	tests := []struct {
		name    string
		seed    []Item
		set     Item
		advance time.Duration
		want    string
		miss    bool
	}{
		{name: "new", set: Item{Key: "k", Value: []byte("v")}, want: "v"},
		{name: "overwrite", seed: []Item{{Key: "k", Value: []byte("old")}}, set: Item{Key: "k", Value: []byte("new")}, want: "new"},
		{name: "empty-value", set: Item{Key: "k", Value: []byte{}}, want: ""},
		{name: "expires-later", set: Item{Key: "k", Value: []byte("v"), Expires: in(10)}, advance: 9 * time.Second, want: "v"},
		{name: "expires-at-deadline", set: Item{Key: "k", Value: []byte("v"), Expires: in(10)}, advance: 10 * time.Second, miss: true},
		{name: "already-expired", seed: []Item{{Key: "k", Value: []byte("old")}}, set: Item{Key: "k", Value: []byte("v"), Expires: in(-1)}, miss: true},
		{name: "absolute-past", set: Item{Key: "k", Value: []byte("v"), Expires: in(epoch.Unix() - 1)}, miss: true},
		{name: "absolute-future", set: Item{Key: "k", Value: []byte("v"), Expires: in(epoch.Unix() + 100)}, advance: 99 * time.Second, want: "v"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, clk := newTestStore(t, eng, 0)
			old := seed(t, s, clk, tt.seed)
			cas := s.Set(tt.set)
			if cas == 0 || cas == old[tt.set.Key] {
				t.Errorf("Set returned CAS %d, want a new unique (old %d)", cas, old[tt.set.Key])
			}
			clk.Advance(tt.advance)
			it, ok := s.Get(tt.set.Key)
			if ok == tt.miss || string(it.Value) != tt.want {
				t.Fatalf("Get = %q, %v; want %q, miss %v", it.Value, ok, tt.want, tt.miss)
			}
			if ok && (it.CAS != cas || it.Key != tt.set.Key || !it.Expires.Equal(tt.set.Expires)) {
				t.Errorf("Get = %+v, want CAS %d and expiry %v", it, cas, tt.set.Expires)
			}
		})
	}
}

func TestSetCopiesValue(t *testing.T) { eachEngine(t, testSetCopiesValue) }

func testSetCopiesValue(t *testing.T, eng Engine) {
	s, _ := newTestStore(t, eng, 0)
	buf := []byte("abc")
	s.Set(Item{Key: "k", Value: buf, Flags: 42})
	copy(buf, "xyz")
	if it := mustGet(t, s, "k"); string(it.Value) != "abc" || it.Flags != 42 {
		t.Fatalf("Get = %q flags %d, want abc flags 42", it.Value, it.Flags)
	}
}

// TestStorage covers the conditional storage commands, one row per case.
func TestStorage(t *testing.T) { eachEngine(t, testStorage) }

func testStorage(t *testing.T, eng Engine) {
	type op func(s *Store, it Item) (uint64, error)
	add := func(s *Store, it Item) (uint64, error) { return s.Add(it) }
	replace := func(s *Store, it Item) (uint64, error) { return s.Replace(it) }
	appendOp := func(s *Store, it Item) (uint64, error) { return s.Append(it) }
	prepend := func(s *Store, it Item) (uint64, error) { return s.Prepend(it) }
	existing := []Item{{Key: "k", Value: []byte("mid"), Flags: 7, Expires: in(100)}}
	expired := []Item{{Key: "k", Value: []byte("mid"), Expires: in(1)}}
	tests := []struct {
		name      string
		op        op
		seed      []Item
		advance   time.Duration
		it        Item
		wantErr   error
		wantValue string
		wantFlags uint32
		wantExp   time.Time
	}{
		{name: "add/new", op: add, it: Item{Key: "k", Value: []byte("v"), Flags: 1}, wantValue: "v", wantFlags: 1},
		{name: "add/exists", op: add, seed: existing, it: Item{Key: "k", Value: []byte("v")}, wantErr: ErrNotStored, wantValue: "mid", wantFlags: 7, wantExp: in(100)},
		{name: "add/over-expired", op: add, seed: expired, advance: time.Second, it: Item{Key: "k", Value: []byte("v")}, wantValue: "v"},
		{name: "replace/missing", op: replace, it: Item{Key: "k", Value: []byte("v")}, wantErr: ErrNotStored},
		{name: "replace/exists", op: replace, seed: existing, it: Item{Key: "k", Value: []byte("v"), Flags: 2}, wantValue: "v", wantFlags: 2},
		{name: "replace/expired", op: replace, seed: expired, advance: time.Second, it: Item{Key: "k", Value: []byte("v")}, wantErr: ErrNotStored},
		{name: "append/missing", op: appendOp, it: Item{Key: "k", Value: []byte("v")}, wantErr: ErrNotStored},
		{name: "append/exists", op: appendOp, seed: existing, it: Item{Key: "k", Value: []byte("+"), Flags: 99, Expires: in(5)}, wantValue: "mid+", wantFlags: 7, wantExp: in(100)},
		{name: "append/expired", op: appendOp, seed: expired, advance: time.Second, it: Item{Key: "k", Value: []byte("+")}, wantErr: ErrNotStored},
		{name: "prepend/missing", op: prepend, it: Item{Key: "k", Value: []byte("v")}, wantErr: ErrNotStored},
		{name: "prepend/exists", op: prepend, seed: existing, it: Item{Key: "k", Value: []byte("-")}, wantValue: "-mid", wantFlags: 7, wantExp: in(100)},
		{name: "prepend/empty", op: prepend, seed: existing, it: Item{Key: "k", Value: nil}, wantValue: "mid", wantFlags: 7, wantExp: in(100)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, clk := newTestStore(t, eng, 0)
			old := seed(t, s, clk, tt.seed)
			clk.Advance(tt.advance)
			cas, err := tt.op(s, tt.it)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			it, ok := s.Get("k")
			if tt.wantValue == "" {
				if ok {
					t.Fatalf("Get = %q, want a miss", it.Value)
				}
				return
			}
			if !ok || string(it.Value) != tt.wantValue || it.Flags != tt.wantFlags || !it.Expires.Equal(tt.wantExp) {
				t.Fatalf("Get = %q flags %d exp %v (%v); want %q flags %d exp %v", it.Value, it.Flags, it.Expires, ok, tt.wantValue, tt.wantFlags, tt.wantExp)
			}
			switch {
			case err == nil && (cas != it.CAS || cas == old["k"]):
				t.Errorf("CAS = %d, item has %d, old %d: want a new unique", cas, it.CAS, old["k"])
			case err != nil && (cas != 0 || it.CAS != old["k"]):
				t.Errorf("failed op changed CAS: returned %d, item %d, old %d", cas, it.CAS, old["k"])
			}
		})
	}
}

func TestCompareAndSwap(t *testing.T) { eachEngine(t, testCompareAndSwap) }

func testCompareAndSwap(t *testing.T, eng Engine) {
	tests := []struct {
		name     string
		seed     bool
		advance  time.Duration
		casDelta uint64 // added to the seeded CAS
		wantErr  error
		want     string
	}{
		{name: "match", seed: true, want: "new"},
		{name: "mismatch", seed: true, casDelta: 1, wantErr: ErrExists, want: "old"},
		{name: "missing", wantErr: ErrNotFound},
		{name: "expired", seed: true, advance: 10 * time.Second, wantErr: ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, clk := newTestStore(t, eng, 0)
			var old uint64
			if tt.seed {
				old = s.Set(Item{Key: "k", Value: []byte("old"), Expires: in(10)})
			}
			clk.Advance(tt.advance)
			cas, err := s.CompareAndSwap(Item{Key: "k", Value: []byte("new"), Flags: 3, CAS: old + tt.casDelta})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			it, ok := s.Get("k")
			if string(it.Value) != tt.want || ok != (tt.want != "") {
				t.Fatalf("Get = %q, %v; want %q", it.Value, ok, tt.want)
			}
			if err == nil && (it.CAS != cas || cas == old || it.Flags != 3 || !it.Expires.IsZero()) {
				t.Errorf("after swap: %+v, returned CAS %d, old %d", it, cas, old)
			}
		})
	}
}

func TestTouch(t *testing.T) { eachEngine(t, testTouch) }

func testTouch(t *testing.T, eng Engine) {
	tests := []struct {
		name    string
		seed    bool
		advance time.Duration // before the touch
		exp     time.Time
		after   time.Duration // after the touch
		wantErr error
		wantHit bool
	}{
		{name: "extend", seed: true, exp: in(100), after: 50 * time.Second, wantHit: true},
		{name: "extended-then-expires", seed: true, exp: in(100), after: 100 * time.Second},
		{name: "never", seed: true, exp: time.Time{}, after: 1000 * time.Second, wantHit: true},
		{name: "shorten", seed: true, exp: in(1), after: time.Second},
		{name: "negative-expires-now", seed: true, exp: in(-1)},
		{name: "missing", wantErr: ErrNotFound},
		{name: "already-expired", seed: true, advance: 10 * time.Second, exp: in(100), wantErr: ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, clk := newTestStore(t, eng, 0)
			var cas uint64
			if tt.seed {
				cas = s.Set(Item{Key: "k", Value: []byte("v"), Flags: 9, Expires: in(10)})
			}
			clk.Advance(tt.advance)
			it, err := s.Touch("k", tt.exp)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Touch err = %v, want %v", err, tt.wantErr)
			}
			if err == nil && (string(it.Value) != "v" || it.CAS != cas || it.Flags != 9 || !it.Expires.Equal(tt.exp)) {
				t.Errorf("Touch = %+v; want value v, CAS %d kept, flags 9, expiry %v", it, cas, tt.exp)
			}
			clk.Advance(tt.after)
			got, ok := s.Get("k")
			if ok != tt.wantHit {
				t.Fatalf("Get after touch: hit %v, want %v", ok, tt.wantHit)
			}
			if ok && got.CAS != cas {
				t.Errorf("touch changed CAS %d -> %d; memcached keeps it", cas, got.CAS)
			}
		})
	}
}

func TestDelete(t *testing.T) { eachEngine(t, testDelete) }

func testDelete(t *testing.T, eng Engine) {
	tests := []struct {
		name    string
		seed    bool
		advance time.Duration
		wantErr error
	}{
		{name: "present", seed: true},
		{name: "missing", wantErr: ErrNotFound},
		{name: "expired", seed: true, advance: 10 * time.Second, wantErr: ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, clk := newTestStore(t, eng, 0)
			if tt.seed {
				s.Set(Item{Key: "k", Value: []byte("v"), Expires: in(10)})
			}
			clk.Advance(tt.advance)
			if err := s.Delete("k"); !errors.Is(err, tt.wantErr) {
				t.Fatalf("Delete = %v, want %v", err, tt.wantErr)
			}
			mustMiss(t, s, "k")
			if err := s.Delete("k"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("second Delete = %v, want ErrNotFound", err)
			}
			if st := s.Stats(); st.CurrItems != 0 || st.Bytes != 0 {
				t.Errorf("after delete: %d items, %d bytes", st.CurrItems, st.Bytes)
			}
		})
	}
}

func TestPut(t *testing.T) { eachEngine(t, testPut) }

func testPut(t *testing.T, eng Engine) {
	s, clk := newTestStore(t, eng, 0)
	s.Put(Item{Key: "k", Value: []byte("copy"), Flags: 4, CAS: 12345, Expires: in(60), Stale: true})
	it := mustGet(t, s, "k")
	if it.CAS != 12345 || string(it.Value) != "copy" || it.Flags != 4 || !it.Stale || !it.Expires.Equal(in(60)) {
		t.Fatalf("Get after Put = %+v", it)
	}
	clk.Advance(60 * time.Second)
	mustMiss(t, s, "k")
}

func TestUpdate(t *testing.T) { eachEngine(t, testUpdate) }

func testUpdate(t *testing.T, eng Engine) {
	errBoom := errors.New("boom")
	tests := []struct {
		name      string
		seed      bool
		fn        func(cur Item, ok bool) (Item, bool, error)
		wantErr   error
		wantValue string // "" means the key must be absent afterwards
		wantCAS   string // "new", "kept", "explicit"
		wantRet   string // value of the returned item
	}{
		{
			name: "create",
			fn: func(cur Item, ok bool) (Item, bool, error) {
				if ok {
					return cur, false, errBoom
				}
				return Item{Value: []byte("made"), Won: true}, true, nil
			},
			wantValue: "made", wantCAS: "new", wantRet: "made",
		},
		{
			name:      "leave",
			seed:      true,
			fn:        func(cur Item, ok bool) (Item, bool, error) { return Item{Value: []byte("x")}, false, nil },
			wantValue: "v", wantCAS: "kept", wantRet: "v",
		},
		{
			name:      "error-passes-through",
			seed:      true,
			fn:        func(cur Item, ok bool) (Item, bool, error) { return Item{Value: []byte("x")}, true, errBoom },
			wantErr:   errBoom,
			wantValue: "v", wantCAS: "kept", wantRet: "v",
		},
		{
			name: "modify-value",
			seed: true,
			fn: func(cur Item, ok bool) (Item, bool, error) {
				cur.Value = append(append([]byte(nil), cur.Value...), '!')
				return cur, true, nil
			},
			wantValue: "v!", wantCAS: "new", wantRet: "v!",
		},
		{
			name: "touch-keeps-cas",
			seed: true,
			fn: func(cur Item, ok bool) (Item, bool, error) {
				cur.Expires, cur.Won, cur.KeepCAS = in(500), true, true
				return cur, true, nil
			},
			wantValue: "v", wantCAS: "kept", wantRet: "v",
		},
		{
			name: "explicit-cas",
			seed: true,
			fn: func(cur Item, ok bool) (Item, bool, error) {
				cur.CAS, cur.KeepCAS = 777, true
				return cur, true, nil
			},
			wantValue: "v", wantCAS: "explicit", wantRet: "v",
		},
		{
			name: "expired-deletes",
			seed: true,
			fn: func(cur Item, ok bool) (Item, bool, error) {
				cur.Expires = in(-1)
				return cur, true, nil
			},
			wantRet: "v",
		},
		{
			name: "missing-leave",
			fn: func(cur Item, ok bool) (Item, bool, error) {
				if ok || cur.Key != "" || cur.Value != nil {
					return cur, false, errBoom
				}
				return cur, false, ErrNotFound
			},
			wantErr: ErrNotFound,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newTestStore(t, eng, 0)
			var old uint64
			if tt.seed {
				old = s.Set(Item{Key: "k", Value: []byte("v"), Flags: 1})
			}
			ret, err := s.Update("k", tt.fn)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if string(ret.Value) != tt.wantRet {
				t.Errorf("returned %q, want %q", ret.Value, tt.wantRet)
			}
			it, ok := s.Get("k")
			if tt.wantValue == "" {
				if ok {
					t.Fatalf("Get = %q, want a miss", it.Value)
				}
				return
			}
			if !ok || string(it.Value) != tt.wantValue || it.Key != "k" {
				t.Fatalf("Get = %+v, %v; want %q", it, ok, tt.wantValue)
			}
			if err == nil && ret.CAS != it.CAS {
				t.Errorf("returned CAS %d, stored %d", ret.CAS, it.CAS)
			}
			switch tt.wantCAS {
			case "new":
				if it.CAS == 0 || it.CAS == old {
					t.Errorf("CAS %d, want a new unique (old %d)", it.CAS, old)
				}
			case "kept":
				if it.CAS != old {
					t.Errorf("CAS %d, want %d kept", it.CAS, old)
				}
			case "explicit":
				if it.CAS != 777 {
					t.Errorf("CAS %d, want 777", it.CAS)
				}
			}
		})
	}
}

func TestUpdateSharesUnchangedBytes(t *testing.T) {
	s, _ := newTestStore(t, Ristretto, 0)
	s.Set(Item{Key: "k", Value: []byte("value")})
	before := mustGet(t, s, "k")
	s.Update("k", func(cur Item, ok bool) (Item, bool, error) {
		cur.Stale = true
		return cur, true, nil
	})
	after := mustGet(t, s, "k")
	if !after.Stale || &after.Value[0] != &before.Value[0] {
		t.Fatalf("metadata-only update should share the value bytes and set Stale: %+v", after)
	}
	// A regular write clears the meta bits.
	s.Append(Item{Key: "k", Value: []byte("!")})
	if it := mustGet(t, s, "k"); it.Stale || it.Won || string(it.Value) != "value!" {
		t.Fatalf("after append: %+v", it)
	}
}

func TestStats(t *testing.T) { eachEngine(t, testStats) }

func testStats(t *testing.T, eng Engine) {
	s, clk := newTestStore(t, eng, 1<<20)
	for i := 0; i < 10; i++ {
		s.Set(Item{Key: string(rune('a' + i)), Value: bytes.Repeat([]byte("x"), 10)})
	}
	s.Set(Item{Key: "a", Value: []byte("yy")}) // replace: same count, fewer bytes
	s.Delete("b")
	s.Set(Item{Key: "t", Value: []byte("ttl"), Expires: in(1)})
	s.Get("a")
	s.Get("zz")
	clk.Advance(time.Second)
	s.Get("t") // expired: a miss, and reclaimed

	st := s.Stats()
	want := Stats{
		CurrItems:        9,
		TotalItems:       12,
		Bytes:            8*charged(eng, 1, 10) + charged(eng, 1, 2),
		Hits:             1,
		Misses:           2,
		GetExpired:       1,
		Reclaimed:        1,
		ExpiredUnfetched: 1,
		LimitMaxBytes:    1 << 20,
	}
	if st != want {
		t.Fatalf("Stats = %+v\n want %+v", st, want)
	}
}

func TestNewDefaults(t *testing.T) { eachEngine(t, testNewDefaults) }

func testNewDefaults(t *testing.T, eng Engine) {
	s, err := New(Config{Engine: eng})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st := s.Stats(); st.LimitMaxBytes != DefaultMaxBytes {
		t.Fatalf("LimitMaxBytes = %d", st.LimitMaxBytes)
	}
	s.Set(Item{Key: "k", Value: []byte("v"), Expires: time.Now().Add(time.Hour)})
	mustGet(t, s, "k")
}

func TestClosedStore(t *testing.T) { eachEngine(t, testClosedStore) }

func testClosedStore(t *testing.T, eng Engine) {
	s, err := New(Config{Engine: eng})
	if err != nil {
		t.Fatal(err)
	}
	s.Set(Item{Key: "k", Value: []byte("v")})
	s.Close()
	s.Close() // idempotent
	mustMiss(t, s, "k")
	s.Set(Item{Key: "k", Value: []byte("v")}) // dropped, and must not hang
	mustMiss(t, s, "k")
}

// TestFetched follows memcached 1.6.18's fetched flag (mg h, me fetch=):
// set by reads and touches, kept by an in-place incr, cleared by writes
// that make a new item; mg u (Peek) leaves it alone.
func TestFetched(t *testing.T) { eachEngine(t, testFetched) }

func testFetched(t *testing.T, eng Engine) {
	tests := []struct {
		name  string
		value string
		ops   func(s *Store)
		want  bool
	}{
		{name: "fresh", value: "1", ops: func(s *Store) {}},
		{name: "peek", value: "1", ops: func(s *Store) { s.Peek("k") }},
		{name: "get", value: "1", ops: func(s *Store) { s.Get("k") }, want: true},
		{name: "touch", value: "1", ops: func(s *Store) { s.Touch("k", time.Time{}) }, want: true},
		{name: "incr-in-place", value: "10", ops: func(s *Store) { s.Get("k"); s.Incr("k", 1, true) }, want: true},
		{name: "incr-grows", value: "9", ops: func(s *Store) { s.Get("k"); s.Incr("k", 1, false) }},
		{name: "append", value: "1", ops: func(s *Store) { s.Get("k"); s.Append(Item{Key: "k", Value: []byte("2")}) }},
		{name: "set", value: "1", ops: func(s *Store) { s.Get("k"); s.Set(Item{Key: "k", Value: []byte("2")}) }},
		{name: "update-keeps", value: "1", ops: func(s *Store) {
			s.Get("k")
			s.Update("k", func(cur Item, ok bool) (Item, bool, error) { return cur, true, nil })
		}, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newTestStore(t, eng, 0)
			s.Set(Item{Key: "k", Value: []byte(tt.value)})
			tt.ops(s)
			it, ok := s.Peek("k")
			if !ok || it.Fetched != tt.want {
				t.Fatalf("Peek = %+v, %v; want Fetched %v", it, ok, tt.want)
			}
		})
	}
}

func TestGetReportsFetchedBefore(t *testing.T) { eachEngine(t, testGetReportsFetchedBefore) }

func testGetReportsFetchedBefore(t *testing.T, eng Engine) {
	s, _ := newTestStore(t, eng, 0)
	s.Set(Item{Key: "k", Value: []byte("v")})
	for i, want := range []bool{false, true, true} {
		if it := mustGet(t, s, "k"); it.Fetched != want {
			t.Fatalf("Get #%d: Fetched %v, want %v", i+1, it.Fetched, want)
		}
	}
	if it, _ := s.Touch("k", time.Time{}); !it.Fetched {
		t.Fatal("Touch after Get: Fetched false")
	}
	s.Peek("k")
	s.Peek("nope")
	if st := s.Stats(); st.Hits != 3 || st.Misses != 0 {
		t.Fatalf("Peek was counted: %d hits, %d misses", st.Hits, st.Misses)
	}
}

// TestValidHook: an item Config.Valid refuses is not returned, not acted
// on by a write that depends on it, and is reclaimed; items written after
// the refusal's sequence are seen.
func TestValidHook(t *testing.T) { eachEngine(t, testValidHook) }

func testValidHook(t *testing.T, eng Engine) {
	var cutoff atomic.Uint64 // items with seq <= cutoff are refused
	s, err := New(Config{Engine: eng, Valid: func(key string, seq uint64) bool { return seq > cutoff.Load() }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Set(Item{Key: "a", Value: []byte("1")})
	s.Set(Item{Key: "b", Value: []byte("old")})
	cutoff.Store(s.Seq())
	if _, ok := s.Get("a"); ok {
		t.Error("Get returned a refused item")
	}
	if _, err := s.Incr("b", 1, false); !errors.Is(err, ErrNotFound) {
		t.Errorf("Incr of a refused item: %v, want ErrNotFound", err)
	}
	if _, err := s.Add(Item{Key: "b", Value: []byte("new")}); err != nil {
		t.Errorf("Add over a refused item: %v", err)
	}
	if it, ok := s.Get("b"); !ok || string(it.Value) != "new" {
		t.Errorf("Get after Add = %q, %v; want new", it.Value, ok)
	}
}

// TestUniquesHook: CAS uniques come from Config.Uniques, for every kind of
// write, while a touch keeps the item's unique.
func TestUniquesHook(t *testing.T) { eachEngine(t, testUniquesHook) }

func testUniquesHook(t *testing.T, eng Engine) {
	var next atomic.Uint64
	next.Store(1000)
	s, err := New(Config{Engine: eng, Uniques: func() uint64 { return next.Add(7) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if cas := s.Set(Item{Key: "k", Value: []byte("1")}); cas != 1007 {
		t.Errorf("Set cas = %d, want 1007", cas)
	}
	if _, err := s.Incr("k", 1, false); err != nil {
		t.Fatal(err)
	}
	it, _ := s.Get("k")
	if it.CAS != 1014 {
		t.Errorf("Incr cas = %d, want 1014", it.CAS)
	}
	if got, _ := s.Touch("k", time.Time{}); got.CAS != 1014 {
		t.Errorf("Touch changed cas to %d", got.CAS)
	}
	if cas, _ := s.Append(Item{Key: "k", Value: []byte("x")}); cas != 1021 {
		t.Errorf("Append cas = %d, want 1021", cas)
	}
}
