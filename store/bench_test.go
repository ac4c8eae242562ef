package store

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Every benchmark runs once per engine, as BenchmarkX/ristretto and
// BenchmarkX/segments; compare them with
//
//	go test -run '^$' -bench . -count 6 ./store/ | tee /tmp/b.txt
//	benchstat -col /engine /tmp/b.txt

const benchKeys = 1 << 16

// eachEngineB runs a benchmark once per engine.
func eachEngineB(b *testing.B, bench func(b *testing.B, eng Engine)) {
	for _, eng := range engines {
		b.Run("engine="+eng.String(), func(b *testing.B) { bench(b, eng) })
	}
}

func benchStore(b *testing.B, eng Engine) (*Store, []string) {
	s, _ := newTestStore(b, eng, 1<<30)
	keys := make([]string, benchKeys)
	val := bytes.Repeat([]byte("v"), 100)
	for i := range keys {
		keys[i] = fmt.Sprintf("key:%07d", i)
		s.Set(Item{Key: keys[i], Value: val})
	}
	s.Stats() // let ristretto apply them all
	b.ReportAllocs()
	b.ResetTimer()
	return s, keys
}

// The get benchmarks read what they get, into a buffer of their own, as a
// server does when it writes the value to a connection: Ristretto's Get
// hands out its own memory, Segments' a copy, and a benchmark that never
// touched the value would charge the Segments engine alone for reading it.

func BenchmarkGet(b *testing.B) {
	eachEngineB(b, func(b *testing.B, eng Engine) {
		s, keys := benchStore(b, eng)
		buf := make([]byte, 0, 128)
		for i := 0; i < b.N; i++ {
			it, ok := s.Get(keys[i%benchKeys])
			if !ok {
				b.Fatal("miss")
			}
			buf = append(buf[:0], it.Value...)
		}
	})
}

func BenchmarkGetParallel(b *testing.B) { benchParallel(b, 0) }

// BenchmarkSet overwrites existing keys: ristretto applies those in place.
func BenchmarkSet(b *testing.B) {
	eachEngineB(b, func(b *testing.B, eng Engine) {
		s, keys := benchStore(b, eng)
		val := bytes.Repeat([]byte("w"), 100)
		for i := 0; i < b.N; i++ {
			s.Set(Item{Key: keys[i%benchKeys], Value: val})
		}
	})
}

func BenchmarkSetParallel(b *testing.B) { benchParallel(b, 1) }

// BenchmarkMixParallel is the owned store's day: 9 gets to 1 set.
func BenchmarkMixParallel(b *testing.B) { benchParallel(b, 10) }

// benchParallel runs gets and, one request in setEvery (none if 0), sets
// of existing keys from every core. It reports the CPU time per request
// (cpu-ns/op) beside the wall time: on a shared machine the wall time
// moves with the other work, and a contended lock shows in both.
func benchParallel(b *testing.B, setEvery int) {
	eachEngineB(b, func(b *testing.B, eng Engine) {
		s, keys := benchStore(b, eng)
		val := bytes.Repeat([]byte("w"), 100)
		var seq atomic.Int64
		cpu0 := cpuTime()
		defer func() { b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op") }()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(1)) * 7919
			// As the server reads: into a buffer it reuses (GetAppend),
			// then into its connection's write buffer (out).
			buf, out := make([]byte, 0, 128), make([]byte, 0, 128)
			for pb.Next() {
				key := keys[i%benchKeys]
				if setEvery > 0 && i%setEvery == 0 {
					s.Set(Item{Key: key, Value: val})
				} else {
					it, _ := s.GetAppend(key, buf)
					out = append(out[:0], it.Value...)
				}
				i++
			}
		})
	})
}

// BenchmarkSetNew writes keys the store has never seen, each followed by a
// read of it: the read-your-writes path (overlay, janitor).
func BenchmarkSetNew(b *testing.B) {
	eachEngineB(b, func(b *testing.B, eng Engine) {
		s, _ := newTestStore(b, eng, 1<<30)
		val := bytes.Repeat([]byte("v"), 100)
		keys := make([]string, b.N)
		for i := range keys {
			keys[i] = "new:" + strconv.Itoa(i)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			s.Set(Item{Key: keys[i], Value: val})
			if _, ok := s.Get(keys[i]); !ok {
				b.Fatal("read-your-writes")
			}
		}
	})
}

func BenchmarkSetNewParallel(b *testing.B) {
	eachEngineB(b, func(b *testing.B, eng Engine) {
		s, _ := newTestStore(b, eng, 1<<30)
		val := bytes.Repeat([]byte("v"), 100)
		var seq atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			g := strconv.Itoa(int(seq.Add(1))) + ":"
			for i := 0; pb.Next(); i++ {
				key := g + strconv.Itoa(i)
				s.Set(Item{Key: key, Value: val})
				if _, ok := s.Get(key); !ok {
					b.Error("read-your-writes")
					return
				}
			}
		})
	})
}

// BenchmarkSetEvict writes new keys into a store that is full: the
// eviction path.
func BenchmarkSetEvict(b *testing.B) {
	eachEngineB(b, func(b *testing.B, eng Engine) {
		s, _ := newTestStore(b, eng, 16<<20)
		val := bytes.Repeat([]byte("v"), 100)
		key := make([]byte, 0, 16)
		for i := range 400_000 { // fill it first
			s.Set(Item{Key: string(appendKey(key[:0], i)), Value: val})
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			s.Set(Item{Key: string(appendKey(key[:0], 400_000+i)), Value: val})
		}
	})
}

func BenchmarkIncr(b *testing.B) {
	eachEngineB(b, func(b *testing.B, eng Engine) {
		s, _ := newTestStore(b, eng, 0)
		s.Set(Item{Key: "n", Value: []byte("0")})
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := s.Incr("n", 1, false); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// appendKey appends "key:%07d" without fmt's garbage.
func appendKey(dst []byte, i int) []byte {
	dst = append(dst, "key:0000000"...)
	for j, x := len(dst)-1, i; x > 0; j, x = j-1, x/10 {
		dst[j] = byte('0' + x%10)
	}
	return dst
}

// BenchmarkMemory stores N items of 100-byte values under 11-byte keys
// into a store with memcached's -m 1024, as one would load memcached, and
// reports what each item costs beyond its 111 bytes of key and value,
// counted two ways: the Go heap in use plus what the store mapped
// (segments, index), and the process's resident memory. Run it alone:
//
//	go test -run '^$' -bench Memory ./store/
func BenchmarkMemory(b *testing.B) {
	for _, eng := range engines {
		for _, n := range []int{250_000, 1_000_000, 1_500_000} {
			b.Run(fmt.Sprintf("engine=%s/items=%d", eng, n), func(b *testing.B) {
				for range b.N {
					measureMemory(b, eng, n)
				}
			})
		}
	}
}

func measureMemory(b *testing.B, eng Engine, n int) {
	before, rss0 := heapInuse(), rssBytes()
	s, err := New(Config{Engine: eng, MaxBytes: 1 << 30}) // memcached -m 1024
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	val := bytes.Repeat([]byte("x"), 100)
	key := make([]byte, 0, 16)
	for i := 0; i < n; i++ {
		s.Set(Item{Key: string(appendKey(key[:0], i)), Value: val})
	}
	st := s.Stats()
	if st.CurrItems != int64(n) {
		b.Fatalf("%d items held, want %d", st.CurrItems, n)
	}
	used := float64(heapInuse()-before) + float64(mapped(s))
	b.ReportMetric(used/float64(n)-111, "overhead-B/item")
	debug.FreeOSMemory()
	b.ReportMetric(float64(rssBytes()-rss0)/float64(n)-111, "rss-overhead-B/item")
	runtime.KeepAlive(s)
}

// mapped is what a Segments store has mapped; 0 for Ristretto.
func mapped(s *Store) int64 {
	g, ok := s.eng.(*segEngine)
	if !ok {
		return 0
	}
	return spent(g)
}

// BenchmarkGCPause times a forced full collection (runtime.GC) with 1M
// items of 100 bytes in the owned store, with and without a full copy
// store beside it (a Ristretto store of server.DefaultCopyMaxBytes, 16
// MiB, as a cluster node has; or, for comparison, a Segments store of the
// same size), and in an empty process for a baseline. It reports the items
// the copy store holds (copies), and the wall time and the CPU time the
// collector spent (runtime/metrics), medians of 10. Run it alone; on a
// machine shared with other work the wall time includes waiting for a
// core, which GOMAXPROCS=1 leaves out:
//
//	GOMAXPROCS=1 go test -run '^$' -bench GCPause -benchtime 1x ./store/
func BenchmarkGCPause(b *testing.B) {
	cases := []struct {
		name   string
		owned  Engine
		items  int
		copies bool
		copy   Engine // the copy store's engine
	}{
		{name: "empty"},
		{name: "owned=segments", owned: Segments, items: 1_000_000},
		{name: "owned=segments/copies=full", owned: Segments, items: 1_000_000, copies: true},
		{name: "owned=segments/copies=full-segments", owned: Segments, items: 1_000_000, copies: true, copy: Segments},
		{name: "owned=ristretto/copies=full", owned: Ristretto, items: 1_000_000, copies: true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			val := bytes.Repeat([]byte("x"), 100)
			key := make([]byte, 0, 16)
			var held int64 // by the copy store
			if c.items > 0 {
				owned, err := New(Config{Engine: c.owned, MaxBytes: 1 << 30})
				if err != nil {
					b.Fatal(err)
				}
				defer owned.Close()
				for i := range c.items {
					owned.Set(Item{Key: string(appendKey(key[:0], i)), Value: val})
				}
			}
			if c.copies {
				copies, err := New(Config{Engine: c.copy, MaxBytes: 16 << 20})
				if err != nil {
					b.Fatal(err)
				}
				defer copies.Close()
				for i := range 200_000 { // far more than 16 MiB holds
					copies.Put(Item{Key: string(appendKey(key[:0], i)), Value: val, CAS: 1})
				}
				held = copies.Stats().CurrItems
			}
			b.ResetTimer()
			for range b.N {
				if c.copies {
					b.ReportMetric(float64(held), "copies")
				}
				wall, cpu := gcPause(10)
				b.ReportMetric(float64(wall.Microseconds())/1000, "gc-wall-ms")
				b.ReportMetric(float64(cpu.Microseconds())/1000, "gc-cpu-ms")
			}
		})
	}
}

// gcPause runs n forced collections and returns the median wall time and
// the median CPU time the collector spent in one.
func gcPause(n int) (wall, cpu time.Duration) {
	sample := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	walls := make([]time.Duration, n)
	cpus := make([]time.Duration, n)
	for i := range n {
		metrics.Read(sample)
		c0 := sample[0].Value.Float64()
		t0 := time.Now()
		runtime.GC()
		walls[i] = time.Since(t0)
		metrics.Read(sample)
		cpus[i] = time.Duration((sample[0].Value.Float64() - c0) * 1e9)
	}
	slices.Sort(walls)
	slices.Sort(cpus)
	return walls[n/2], cpus[n/2]
}

func heapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// rssBytes reads VmRSS from /proc/self/status; 0 where there is none.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// BenchmarkIndexGrowth loads 4M new 100-byte items into a Segments store
// of 1 GiB (8 shards here, so half a million items a shard) and reports
// the longest single Set (max-stall-ms) and the 99.99th percentile
// (p9999-us): a shard's index grows while it fills, and a Set that grows it
// stalls every other write of that shard. Each Set is timed in the
// thread's CPU time, so that the figures leave out waiting for a core on
// a shared machine. Run it alone:
//
//	go test -run '^$' -bench IndexGrowth -benchtime 1x ./store/
func BenchmarkIndexGrowth(b *testing.B) {
	const n = 4_000_000
	val := bytes.Repeat([]byte("x"), 100)
	key := make([]byte, 0, 16)
	took := make([]time.Duration, n)
	runtime.LockOSThread() // one thread's clock for each Set
	defer runtime.UnlockOSThread()
	for range b.N {
		s, err := New(Config{Engine: Segments, MaxBytes: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			k := string(appendKey(key[:0], i))
			t0 := threadCPUTime()
			s.Set(Item{Key: k, Value: val})
			took[i] = threadCPUTime() - t0
		}
		if st := s.Stats(); st.CurrItems != n {
			b.Fatalf("%d items held, want %d", st.CurrItems, n)
		}
		b.ReportMetric(float64(n)/float64(len(s.eng.(*segEngine).shards)), "items/shard")
		s.Close()
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[n-1].Microseconds())/1000, "max-stall-ms")
	b.ReportMetric(float64(took[n-n/10000].Microseconds()), "p9999-us")
}
