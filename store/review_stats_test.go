package store

import (
	"testing"
	"time"
)

// TestTotalItemsNotCountingTouches: total_items counts items stored, as
// memcached's does (it counts links of new items); touch, gat and mg T
// give an item a new expiry and keep its CAS unique: no new item. A
// memcached 1.6.18 node answers total_items 1 after "set x", "touch x",
// "gat x", "gats x", "mg x T30"; Spillway answered 5.
func TestTotalItemsNotCountingTouches(t *testing.T) {
	eachEngine(t, func(t *testing.T, eng Engine) {
		s, clk := newTestStore(t, eng, 1<<20)
		s.Set(Item{Key: "x", Value: []byte("1")})
		if _, err := s.Touch("x", clk.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Touch("x", clk.Now().Add(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Update("x", func(cur Item, ok bool) (Item, bool, error) {
			cur.Expires = clk.Now().Add(time.Hour)
			cur.KeepCAS = true
			return cur, true, nil
		}); err != nil {
			t.Fatal(err)
		}
		if got := s.Stats().TotalItems; got != 1 {
			t.Fatalf("TotalItems = %d after one set and three touches; want 1", got)
		}
		// A new value still counts.
		s.Update("x", func(cur Item, ok bool) (Item, bool, error) {
			cur.Value = []byte("2")
			return cur, true, nil
		})
		s.Incr("x", 9, false) // "2" to "11": a new item in memcached
		if got := s.Stats().TotalItems; got != 3 {
			t.Fatalf("TotalItems = %d after a set, an update and an incr; want 3", got)
		}
	})
}

// TestTotalItemsIncrInPlace: memcached rewrites an incr or decr whose
// result is no longer than the old value in place, and counts no new item
// in total_items; one that lengthens the value makes a new item, counted.
// Against memcached 1.6.18: set n "18446744073709551615", incr n 1,
// decr n 5, set x "00001", incr x 1 left total_items at 2 there, 5 here.
func TestTotalItemsIncrInPlace(t *testing.T) {
	eachEngine(t, func(t *testing.T, eng Engine) {
		s, _ := newTestStore(t, eng, 1<<20)
		s.Set(Item{Key: "n", Value: []byte("10")})
		for _, step := range []struct {
			delta uint64
			decr  bool
			want  uint64 // TotalItems after
		}{
			{1, true, 1},   // "9 ": in place
			{5, false, 1},  // "14"
			{86, false, 2}, // "100": longer, a new item
			{1, false, 2},  // "101"
		} {
			if _, err := s.Incr("n", step.delta, step.decr); err != nil {
				t.Fatal(err)
			}
			if got := s.Stats().TotalItems; got != step.want {
				it, _ := s.Get("n")
				t.Fatalf("after incr by %d (decr %v) to %q: TotalItems = %d; want %d", step.delta, step.decr, it.Value, got, step.want)
			}
		}
	})
}
