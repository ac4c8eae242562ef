package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestReviewNoStaleConcurrent: each key has one writer, which numbers its
// operations on it (sets of versioned values, deletes, appends, touches);
// readers note the last operation completed on a key before they read it
// and check that what they read is not older: a hit must carry a version
// at least that of the last completed set, and none may come from before
// a completed delete. Eviction (a store far smaller than the keys),
// index growth (new keys all the time), large items, compaction and
// expiry by the sweeper (run in step with the clock) all run meanwhile.
// A value also says its own length and fill, so torn reads show.
func TestReviewNoStaleConcurrent(t *testing.T) {
	const (
		writers = 3
		readers = 3
	)
	keysPerW := envInt("REVIEW_KEYS", 300)
	ops := envInt("REVIEW_OPS", 15000)
	s, g, clk := newSegStore(t, 2<<20, evictS3FIFO)
	type keyState struct {
		last    atomic.Int64 // last completed op number
		lastSet atomic.Int64 // op number of the last completed set (value version)
		// setEpoch: the last completed set's version and the number of
		// flushes begun when it returned, packed (version<<16 | flushes)
		setEpoch atomic.Int64
		lastDel  atomic.Int64 // op number of the last completed delete
	}
	states := make([][]keyState, writers)
	for i := range states {
		states[i] = make([]keyState, keysPerW)
	}
	mkval := func(ver int64, n int) []byte {
		head := fmt.Sprintf("v%d:%d:", ver, n)
		b := make([]byte, 0, len(head)+n)
		b = append(b, head...)
		fill := byte('a' + ver%26)
		for range n {
			b = append(b, fill)
		}
		return b
	}
	// parse returns the version at the head of the value and whether the
	// value is whole (appends add "+" bytes at the end).
	parse := func(v []byte) (int64, bool) {
		if len(v) < 2 || v[0] != 'v' {
			return 0, false
		}
		i := bytes.IndexByte(v, ':')
		j := bytes.IndexByte(v[i+1:], ':')
		if i < 0 || j < 0 {
			return 0, false
		}
		ver, err1 := strconv.ParseInt(string(v[1:i]), 10, 64)
		n, err2 := strconv.Atoi(string(v[i+1 : i+1+j]))
		body := v[i+1+j+1:]
		if err1 != nil || err2 != nil || len(body) < n {
			return 0, false
		}
		fill := byte('a' + ver%26)
		for _, c := range body[:n] {
			if c != fill {
				return ver, false
			}
		}
		for _, c := range body[n:] {
			if c != '+' {
				return ver, false
			}
		}
		return ver, true
	}
	var done atomic.Int32
	var flushBegun, flushDone atomic.Int64
	var bad atomic.Int64
	report := func(format string, args ...any) {
		if bad.Add(1) <= 5 {
			t.Errorf(format, args...)
		}
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer done.Add(1)
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var opn int64
			for i := range ops {
				k := rng.IntN(keysPerW)
				st := &states[w][k]
				key := "w" + strconv.Itoa(w) + "k" + strconv.Itoa(k)
				opn++
				switch r := rng.IntN(100); {
				case r < 60:
					n := rng.IntN(300)
					switch rng.IntN(envInt("REVIEW_LARGE", 40)) {
					case 0:
						n = g.large + rng.IntN(g.large) // a mapping of its own
					case 1:
						n = g.large - 40 + rng.IntN(80)
					}
					var exp time.Time
					if rng.IntN(3) == 0 {
						exp = clk.Now().Add(time.Duration(1+rng.IntN(20)) * 100 * time.Millisecond)
					}
					s.Set(Item{Key: key, Value: mkval(opn, n), Expires: exp})
					st.lastSet.Store(opn)
					st.setEpoch.Store(opn<<16 | flushBegun.Load())
				case r < 70:
					s.Delete(key)
					st.lastDel.Store(opn)
				case r < 80:
					if _, err := s.Append(Item{Key: key, Value: []byte("++")}); err == nil {
						// the version stays the set's
					}
				case r < 85:
					var exp time.Time
					if rng.IntN(2) == 0 {
						exp = clk.Now().Add(time.Duration(rng.IntN(20)-2) * 100 * time.Millisecond)
					}
					s.Touch(key, exp)
				default:
					// A new key: grows the index.
					s.Set(Item{Key: "new" + strconv.Itoa(w) + ":" + strconv.Itoa(i), Value: []byte("x")})
				}
				st.last.Store(opn)
			}
		}()
	}
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 8))
			buf := make([]byte, 0, 1024)
			for i := 0; done.Load() < writers && i < 10*ops; i++ {
				w, k := rng.IntN(writers), rng.IntN(keysPerW)
				st := &states[w][k]
				key := "w" + strconv.Itoa(w) + "k" + strconv.Itoa(k)
				flushed := flushDone.Load()
				floorSet, floorDel := st.lastSet.Load(), st.lastDel.Load()
				now0 := clk.Now()
				var it Item
				var ok bool
				if rng.IntN(2) == 0 {
					it, ok = s.GetAppend(key, buf)
					buf = it.Value
				} else {
					it, ok = s.Get(key)
				}
				if !ok {
					continue
				}
				ver, whole := parse(it.Value)
				switch {
				case !whole:
					report("Get(%s) = %.60q (%d bytes): torn", key, it.Value, len(it.Value))
				case ver < floorSet:
					report("Get(%s) = version %d, but set %d had completed", key, ver, floorSet)
				case !it.Expires.IsZero() && !it.Expires.After(now0):
					report("Get(%s) = version %d, expired at %v, before the read began (%v)", key, ver, it.Expires, now0)
				case st.setEpoch.Load()>>16 == ver && st.setEpoch.Load()&0xffff < flushed:
					report("Get(%s) = version %d, stored before flush %d began, which had completed", key, ver, flushed)
				case ver < floorDel:
					report("Get(%s) = version %d, but delete %d had completed", key, ver, floorDel)
				}
			}
		}()
	}
	// Flushes now and then.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; done.Load() < writers && i < envInt("REVIEW_FLUSHES", 100); i++ {
			time.Sleep(time.Millisecond)
			flushBegun.Add(1)
			s.Flush(0)
			flushDone.Add(1)
		}
	}()
	// The sweeper, in step with the clock.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; done.Load() < writers && i < 100_000; i++ {
			clk.Advance(100 * time.Millisecond)
			g.sweep()
		}
	}()
	wg.Wait()
	checkSegments(t, g)
	st := s.Stats()
	t.Logf("items %d, evictions %d, reclaimed %d, rejections %d", st.CurrItems, st.Evictions, st.Reclaimed, st.Rejections)
}
