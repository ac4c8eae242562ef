package store

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// modelItem is the reference model's item.
type modelItem struct {
	value string
	flags uint32
	exp   int64 // Unix nanoseconds; 0 never
	cas   uint64
}

// model is a single-goroutine reference implementation of the store's
// semantics, written as plainly as possible.
type model struct {
	items    map[string]modelItem
	deadline int64 // pending delayed flush
}

func (m *model) live(key string, now int64) (modelItem, bool) {
	if m.deadline != 0 && now >= m.deadline {
		m.items, m.deadline = map[string]modelItem{}, 0
	}
	it, ok := m.items[key]
	if ok && it.exp != 0 && it.exp <= now {
		delete(m.items, key)
		ok = false
	}
	return it, ok
}

func (m *model) put(key string, it modelItem, now int64) {
	if it.exp != 0 && it.exp <= now {
		delete(m.items, key)
		return
	}
	m.items[key] = it
}

// modelIncr is the model's incr or decr of a value: the result, or false
// if the value is not a number. It wraps at 2^64 up and stops at 0 down.
func modelIncr(value string, delta uint64, decr bool) (uint64, bool) {
	n, err := ParseCounter([]byte(value))
	switch {
	case err != nil:
		return 0, false
	case !decr:
		return n + delta, true
	case delta > n:
		return 0, true
	}
	return n - delta, true
}

// TestAgainstModel runs a long seeded random sequence of commands over a
// handful of keys, so that keys are created, overwritten and deleted while
// ristretto may still be applying them, and compares every answer with the
// model.
func TestAgainstModel(t *testing.T) {
	eachEngine(t, func(t *testing.T, eng Engine) {
		for seed := uint64(1); seed <= 4; seed++ {
			t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
				testAgainstModel(t, eng, seed, 5000)
			})
		}
	})
}

func testAgainstModel(t *testing.T, eng Engine, seed uint64, steps int) {
	s, clk := newTestStore(t, eng, 0)
	m := &model{items: map[string]modelItem{}}
	rng := rand.New(rand.NewPCG(seed, seed))
	keys := []string{"a", "b", "c", "d", "e", "f"}
	exptimes := []int64{0, 0, 0, 1, 2, 5, -1}
	for step := 0; step < steps; step++ {
		key := keys[rng.IntN(len(keys))]
		now := clk.Now()
		nowNs := now.UnixNano()
		exp := ExpiresAt(exptimes[rng.IntN(len(exptimes))], now)
		val := strconv.Itoa(rng.IntN(1000))
		flags := uint32(rng.IntN(3))
		cur, ok := m.live(key, nowNs)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("step %d, key %q: "+format, append([]any{step, key}, args...)...)
		}
		newItem := func(cas uint64) modelItem {
			return modelItem{value: val, flags: flags, exp: unixNanos(exp), cas: cas}
		}
		switch op := rng.IntN(13); op {
		case 0, 1:
			cas := s.Set(Item{Key: key, Value: []byte(val), Flags: flags, Expires: exp})
			m.put(key, newItem(cas), nowNs)
		case 2:
			cas, err := s.Add(Item{Key: key, Value: []byte(val), Flags: flags, Expires: exp})
			if ok != errors.Is(err, ErrNotStored) {
				fail("Add: %v, model has item: %v", err, ok)
			}
			if !ok {
				m.put(key, newItem(cas), nowNs)
			}
		case 3:
			cas, err := s.Replace(Item{Key: key, Value: []byte(val), Flags: flags, Expires: exp})
			if ok == errors.Is(err, ErrNotStored) {
				fail("Replace: %v, model has item: %v", err, ok)
			}
			if ok {
				m.put(key, newItem(cas), nowNs)
			}
		case 4, 5:
			prepend := op == 5
			concat := s.Append
			if prepend {
				concat = s.Prepend
			}
			cas, err := concat(Item{Key: key, Value: []byte(val)})
			if ok == errors.Is(err, ErrNotStored) {
				fail("append/prepend: %v, model has item: %v", err, ok)
			}
			if ok {
				if prepend {
					cur.value = val + cur.value
				} else {
					cur.value += val
				}
				cur.cas = cas
				m.put(key, cur, nowNs)
			}
		case 6:
			want := cur.cas
			if rng.IntN(3) == 0 {
				want++
			}
			cas, err := s.CompareAndSwap(Item{Key: key, Value: []byte(val), Flags: flags, Expires: exp, CAS: want})
			switch {
			case !ok:
				if !errors.Is(err, ErrNotFound) {
					fail("CAS on missing: %v", err)
				}
			case want != cur.cas:
				if !errors.Is(err, ErrExists) {
					fail("CAS mismatch: %v", err)
				}
			default:
				if err != nil {
					fail("CAS: %v", err)
				}
				m.put(key, newItem(cas), nowNs)
			}
		case 7:
			decr := rng.IntN(2) == 0
			delta := uint64(rng.IntN(20))
			got, err := s.Incr(key, delta, decr)
			if !ok {
				if !errors.Is(err, ErrNotFound) {
					fail("Incr on missing: %v", err)
				}
				break
			}
			n, numeric := modelIncr(cur.value, delta, decr)
			if !numeric {
				if !errors.Is(err, ErrNotNumber) {
					fail("Incr on %q: %v", cur.value, err)
				}
				break
			}
			if err != nil || got != n {
				fail("Incr(%q, %d, %v) = %d, %v; want %d", cur.value, delta, decr, got, err, n)
			}
			it, _ := s.Get(key)
			cur.value, cur.cas = string(appendCounter(nil, n, len(cur.value))), it.CAS
			m.put(key, cur, nowNs)
		case 8:
			_, err := s.Touch(key, exp)
			if ok == errors.Is(err, ErrNotFound) {
				fail("Touch: %v, model has item: %v", err, ok)
			}
			if ok {
				cur.exp = unixNanos(exp)
				m.put(key, cur, nowNs)
			}
		case 9:
			err := s.Delete(key)
			if ok == errors.Is(err, ErrNotFound) {
				fail("Delete: %v, model has item: %v", err, ok)
			}
			delete(m.items, key)
		case 10:
			switch rng.IntN(4) {
			case 0:
				s.Flush(0)
				m.items, m.deadline = map[string]modelItem{}, 0
			case 1:
				d := time.Duration(1+rng.IntN(3)) * time.Second
				s.Flush(d)
				m.deadline = nowNs + int64(d)
			}
		case 11:
			clk.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
		case 12:
			s.Stats() // lets ristretto catch up, at a random moment
		}

		// After every step, every key must read back as the model says.
		now = clk.Now()
		for _, k := range keys {
			want, wok := m.live(k, now.UnixNano())
			got, gok := s.Get(k)
			if gok != wok {
				t.Fatalf("step %d: Get(%q) present %v, model %v (%+v)", step, k, gok, wok, want)
			}
			if gok && (string(got.Value) != want.value || got.Flags != want.flags || unixNanos(got.Expires) != want.exp || got.CAS != want.cas) {
				t.Fatalf("step %d: Get(%q) = %q flags %d exp %d cas %d; model %+v", step, k, got.Value, got.Flags, unixNanos(got.Expires), got.CAS, want)
			}
		}
	}
	st := s.Stats()
	if int(st.CurrItems) < len(m.items) {
		t.Fatalf("Stats counts %d items, model holds %d", st.CurrItems, len(m.items))
	}
}
