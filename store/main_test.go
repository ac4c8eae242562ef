package store

import (
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// epoch is the fake clock's start: any fixed instant will do.
var epoch = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// clock is an injected clock that moves only when told to.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(epoch.UnixNano())
	return c
}

func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// engines are the engines every semantic test runs on.
var engines = []Engine{Ristretto, Segments}

// eachEngine runs test once per engine, as a subtest named after it.
func eachEngine(t *testing.T, test func(t *testing.T, eng Engine)) {
	for _, eng := range engines {
		t.Run(eng.String(), func(t *testing.T) { test(t, eng) })
	}
}

// newTestStore returns a store on a fake clock, closed when the test ends.
func newTestStore(t testing.TB, eng Engine, maxBytes int64) (*Store, *clock) {
	t.Helper()
	clk := newClock()
	s, err := New(Config{Engine: eng, MaxBytes: maxBytes, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, clk
}

// mustGet returns the key's value, failing the test on a miss.
func mustGet(t *testing.T, s *Store, key string) Item {
	t.Helper()
	it, ok := s.Get(key)
	if !ok {
		t.Fatalf("Get(%q): miss", key)
	}
	return it
}

func mustMiss(t *testing.T, s *Store, key string) {
	t.Helper()
	if it, ok := s.Get(key); ok {
		t.Fatalf("Get(%q) = %q, want a miss", key, it.Value)
	}
}

// charged is what an item with no flags and no expiry counts for in
// Stats.Bytes.
func charged(eng Engine, klen, vlen int) int64 {
	if eng == Segments {
		return int64(itemSize(klen, vlen, 0, 0))
	}
	return int64(allocSize(klen+vlen) + ItemOverhead)
}
