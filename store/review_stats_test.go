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
		s.Incr("x", 1, false)
		if got := s.Stats().TotalItems; got != 3 {
			t.Fatalf("TotalItems = %d after a set, an update and an incr; want 3", got)
		}
	})
}
