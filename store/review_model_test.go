package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReviewNoStaleUnderPressure runs seeded random commands against the
// Segments engine with memory pressure (eviction, compaction), values of
// every size class (empty, small, around the 32 KiB line, larger than a
// segment), index growth, delayed and immediate flushes and synchronous
// sweeps, and compares with a model. Eviction may make the store forget
// an item the model holds (the model then forgets it too), never the
// other way round: whatever the store returns must be the model's current
// item, never an older one, a deleted one or a flushed one.
func TestReviewNoStaleUnderPressure(t *testing.T) {
	seeds := envInt("REVIEW_SEEDS", 6)
	steps := envInt("REVIEW_STEPS", 6000)
	if testing.Short() {
		seeds, steps = 2, 2000
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
			reviewNoStale(t, seed, steps, 4<<20)
		})
	}
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return n
	}
	return def
}

func reviewNoStale(t *testing.T, seed uint64, steps int, maxBytes int64) {
	s, g, clk := newSegStore(t, maxBytes, evictS3FIFO)
	m := &model{items: map[string]modelItem{}}
	rng := rand.New(rand.NewPCG(seed, 99))
	nkeys := 1500
	key := func() string { return "key" + strconv.Itoa(rng.IntN(nkeys)) }
	vsize := func() int {
		switch r := rng.IntN(100); {
		case r < 5:
			return 0
		case r < 60:
			return rng.IntN(200)
		case r < 85:
			return 1000 + rng.IntN(6000)
		case r < 97:
			return g.large - 200 + rng.IntN(400) // around the large line
		default:
			return g.segSize + rng.IntN(g.segSize) // larger than a segment
		}
	}
	ctr := 0
	value := func(n int) string {
		ctr++
		tag := fmt.Sprintf("<%d>", ctr)
		if n < len(tag) {
			if n == 0 {
				return ""
			}
			return strings.Repeat("x", n)
		}
		return tag + strings.Repeat("y", n-len(tag))
	}
	exptimes := []int64{0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 5, -1}
	for step := range steps {
		k := key()
		now := clk.Now()
		nowNs := now.UnixNano()
		exp := ExpiresAt(exptimes[rng.IntN(len(exptimes))], now)
		flags := uint32(rng.IntN(3))
		cur, ok := m.live(k, nowNs)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d step %d key %q: "+format, append([]any{seed, step, k}, args...)...)
		}
		put := func(v string, cas uint64) {
			m.put(k, modelItem{value: v, flags: flags, exp: unixNanos(exp), cas: cas}, nowNs)
		}
		// forgot is called when the store answered as if it held no item
		// for k while the model has one: eviction may do that.
		forgot := func() { delete(m.items, k); ok = false }
		switch op := rng.IntN(20); op {
		case 0, 1, 2, 3:
			v := value(vsize())
			put(v, s.Set(Item{Key: k, Value: []byte(v), Flags: flags, Expires: exp}))
		case 4:
			v := value(vsize())
			cas, err := s.Add(Item{Key: k, Value: []byte(v), Flags: flags, Expires: exp})
			switch {
			case err == nil:
				if ok {
					forgot() // evicted
				}
				put(v, cas)
			case !ok:
				fail("Add: %v, model has no item", err)
			}
		case 5:
			v := value(vsize())
			cas, err := s.Replace(Item{Key: k, Value: []byte(v), Flags: flags, Expires: exp})
			switch {
			case err == nil && !ok:
				fail("Replace stored, model has no item")
			case err == nil:
				put(v, cas)
			default:
				forgot()
			}
		case 6, 7:
			prepend := op == 7
			concat := s.Append
			if prepend {
				concat = s.Prepend
			}
			v := value(rng.IntN(3000))
			if rng.IntN(4) == 0 {
				v = value(g.large / 2)
			}
			cas, err := concat(Item{Key: k, Value: []byte(v)})
			switch {
			case err == nil && !ok:
				fail("append/prepend stored, model has no item")
			case err == nil:
				if prepend {
					cur.value = v + cur.value
				} else {
					cur.value += v
				}
				cur.cas = cas
				m.put(k, cur, nowNs)
			default:
				forgot()
			}
		case 8:
			want := cur.cas
			if rng.IntN(3) == 0 {
				want++
			}
			v := value(vsize())
			cas, err := s.CompareAndSwap(Item{Key: k, Value: []byte(v), Flags: flags, Expires: exp, CAS: want})
			switch {
			case errors.Is(err, ErrNotFound):
				forgot()
			case !ok:
				fail("CAS on an item the model does not hold: %v", err)
			case want != cur.cas:
				if !errors.Is(err, ErrExists) {
					fail("CAS mismatch: %v", err)
				}
			case err != nil:
				fail("CAS: %v", err)
			default:
				put(v, cas)
			}
		case 9:
			if rng.IntN(2) == 0 {
				n := strconv.Itoa(rng.IntN(1000))
				if rng.IntN(3) == 0 {
					n = "99999999999999999" + strconv.Itoa(rng.IntN(10))
				}
				put(n, s.Set(Item{Key: k, Value: []byte(n), Flags: flags, Expires: exp}))
				break
			}
			decr := rng.IntN(2) == 0
			delta := uint64(rng.IntN(2000))
			got, err := s.Incr(k, delta, decr)
			if errors.Is(err, ErrNotFound) {
				forgot()
				break
			}
			if !ok {
				fail("Incr on an item the model does not hold: %d %v", got, err)
			}
			n, numeric := modelIncr(cur.value, delta, decr)
			if !numeric {
				if !errors.Is(err, ErrNotNumber) {
					fail("Incr on %.20q: %v", cur.value, err)
				}
				break
			}
			if err != nil || got != n {
				fail("Incr(%q, %d, %v) = %d, %v; want %d", cur.value, delta, decr, got, err, n)
			}
			it, iok := s.Peek(k)
			if !iok {
				fail("Incr stored, Peek misses")
			}
			cur.value, cur.cas = string(appendCounter(nil, n, len(cur.value))), it.CAS
			m.put(k, cur, nowNs)
		case 10:
			it, err := s.Touch(k, exp)
			switch {
			case errors.Is(err, ErrNotFound):
				forgot()
			case !ok:
				fail("Touch found an item the model does not hold: %q", it.Value)
			default:
				if string(it.Value) != cur.value || it.CAS != cur.cas {
					fail("Touch returned %.40q cas %d; model %.40q cas %d", it.Value, it.CAS, cur.value, cur.cas)
				}
				cur.exp = unixNanos(exp)
				m.put(k, cur, nowNs)
			}
		case 11:
			err := s.Delete(k)
			if err == nil && !ok {
				fail("Delete found an item the model does not hold")
			}
			delete(m.items, k)
		case 12:
			switch rng.IntN(60) {
			case 0:
				s.Flush(0)
				m.items, m.deadline = map[string]modelItem{}, 0
			case 1, 2:
				d := time.Duration(1+rng.IntN(3)) * time.Second
				s.Flush(d)
				m.deadline = nowNs + int64(d)
			}
		case 13, 14:
			clk.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
		case 15:
			g.sweep()
		default:
			got, gok := s.Get(k)
			switch {
			case gok && !ok:
				fail("Get = %.40q (%d bytes), model has no item", got.Value, len(got.Value))
			case gok && (string(got.Value) != cur.value || got.Flags != cur.flags || unixNanos(got.Expires) != cur.exp || got.CAS != cur.cas):
				fail("Get = %.40q (%d bytes) flags %d exp %d cas %d; model %.40q (%d bytes) flags %d exp %d cas %d",
					got.Value, len(got.Value), got.Flags, unixNanos(got.Expires), got.CAS, cur.value, len(cur.value), cur.flags, cur.exp, cur.cas)
			case !gok && ok:
				forgot()
			}
		}
		// Every so often, every key.
		if step%200 == 0 {
			now := clk.Now().UnixNano()
			for i := range nkeys {
				kk := "key" + strconv.Itoa(i)
				want, wok := m.live(kk, now)
				got, gok := s.Peek(kk)
				switch {
				case gok && !wok:
					t.Fatalf("seed %d step %d: Peek(%q) = %.40q, model has no item", seed, step, kk, got.Value)
				case gok && (string(got.Value) != want.value || got.CAS != want.cas || got.Flags != want.flags || unixNanos(got.Expires) != want.exp):
					t.Fatalf("seed %d step %d: Peek(%q) = %.40q cas %d; model %.40q cas %d", seed, step, kk, got.Value, got.CAS, want.value, want.cas)
				case !gok && wok:
					delete(m.items, kk)
				}
			}
			checkSegments(t, g)
		}
	}
	checkSegments(t, g)
	st := s.Stats()
	t.Logf("items %d, evictions %d, reclaimed %d, rejections %d, model %d", st.CurrItems, st.Evictions, st.Reclaimed, st.Rejections, len(m.items))
}
