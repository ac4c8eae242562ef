package store

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

const benchKeys = 1 << 16

func benchStore(b *testing.B) (*Store, []string) {
	s, _ := newTestStore(b, Ristretto, 1<<30)
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

func BenchmarkGet(b *testing.B) {
	s, keys := benchStore(b)
	for i := 0; i < b.N; i++ {
		if _, ok := s.Get(keys[i%benchKeys]); !ok {
			b.Fatal("miss")
		}
	}
}

func BenchmarkGetParallel(b *testing.B) {
	s, keys := benchStore(b)
	var seq atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1)) * 7919
		for pb.Next() {
			s.Get(keys[i%benchKeys])
			i++
		}
	})
}

// BenchmarkSet overwrites existing keys: ristretto applies those in place.
func BenchmarkSet(b *testing.B) {
	s, keys := benchStore(b)
	val := bytes.Repeat([]byte("w"), 100)
	for i := 0; i < b.N; i++ {
		s.Set(Item{Key: keys[i%benchKeys], Value: val})
	}
}

func BenchmarkSetParallel(b *testing.B) {
	s, keys := benchStore(b)
	val := bytes.Repeat([]byte("w"), 100)
	var seq atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1)) * 7919
		for pb.Next() {
			s.Set(Item{Key: keys[i%benchKeys], Value: val})
			i++
		}
	})
}

// BenchmarkSetNew writes keys the store has never seen, each followed by a
// read of it: the read-your-writes path (overlay, janitor).
func BenchmarkSetNew(b *testing.B) {
	s, _ := newTestStore(b, Ristretto, 1<<30)
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
}

func BenchmarkSetNewParallel(b *testing.B) {
	s, _ := newTestStore(b, Ristretto, 1<<30)
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
}

func BenchmarkIncr(b *testing.B) {
	s, _ := newTestStore(b, Ristretto, 0)
	s.Set(Item{Key: "n", Value: []byte("0")})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.Incr("n", 1, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemory stores N items of 100-byte values under 11-byte keys, as
// one would load memcached, and reports the Go heap in use per item and the
// process's resident memory. Run it alone:
//
//	go test -run '^$' -bench Memory ./store/
func BenchmarkMemory(b *testing.B) {
	for _, n := range []int{250_000, 1_000_000, 1_500_000} {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			for range b.N {
				measureMemory(b, n)
			}
		})
	}
}

func measureMemory(b *testing.B, n int) {
	before := heapInuse()
	s, err := New(Config{MaxBytes: 1 << 30}) // memcached -m 1024

	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	val := bytes.Repeat([]byte("x"), 100)
	key := make([]byte, 0, 16)
	for i := 0; i < n; i++ {
		key = append(key[:0], "key:0000000"...) // key:%07d without fmt's garbage
		for j, x := len(key)-1, i; x > 0; j, x = j-1, x/10 {
			key[j] = byte('0' + x%10)
		}
		s.Set(Item{Key: string(key), Value: val})
	}
	st := s.Stats()
	if st.CurrItems != int64(n) {
		b.Fatalf("%d items held, want %d", st.CurrItems, n)
	}
	perItem := float64(heapInuse()-before) / float64(n)
	b.ReportMetric(perItem, "heap-B/item")
	b.ReportMetric(perItem-111, "overhead-B/item")
	b.ReportMetric(float64(rssBytes())/float64(1<<20), "rss-MiB")
	debug.FreeOSMemory()
	b.ReportMetric(float64(rssBytes())/float64(1<<20), "rss-freed-MiB")
	runtime.KeepAlive(s)
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
