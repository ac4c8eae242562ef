package server

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

func newClient(t testing.TB, addrs ...string) *memcache.Client {
	t.Helper()
	mc := memcache.New(addrs...)
	mc.Timeout = 5 * time.Second
	mc.MaxIdleConns = 32
	t.Cleanup(func() { mc.Close() })
	return mc
}

// TestGomemcache drives every operation of gomemcache's client.
func TestGomemcache(t *testing.T) {
	addr := startSpillway(t)
	mc := newClient(t, addr)

	if err := mc.Ping(); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	wantErr := func(got, want error) {
		t.Helper()
		if !errors.Is(got, want) {
			t.Fatalf("err = %v, want %v", got, want)
		}
	}

	must(mc.Set(&memcache.Item{Key: "a", Value: []byte("alpha"), Flags: 42}))
	it, err := mc.Get("a")
	must(err)
	if string(it.Value) != "alpha" || it.Flags != 42 {
		t.Fatalf("Get a = %q flags %d", it.Value, it.Flags)
	}
	_, err = mc.Get("missing")
	wantErr(err, memcache.ErrCacheMiss)

	wantErr(mc.Add(&memcache.Item{Key: "a", Value: []byte("x")}), memcache.ErrNotStored)
	must(mc.Add(&memcache.Item{Key: "b", Value: []byte("beta")}))
	wantErr(mc.Replace(&memcache.Item{Key: "nope", Value: []byte("x")}), memcache.ErrNotStored)
	must(mc.Replace(&memcache.Item{Key: "b", Value: []byte("BETA")}))
	must(mc.Append(&memcache.Item{Key: "b", Value: []byte("++")}))
	must(mc.Prepend(&memcache.Item{Key: "b", Value: []byte("--")}))
	wantErr(mc.Append(&memcache.Item{Key: "nope", Value: []byte("x")}), memcache.ErrNotStored)

	m, err := mc.GetMulti([]string{"a", "b", "missing"})
	must(err)
	if len(m) != 2 || string(m["a"].Value) != "alpha" || string(m["b"].Value) != "--BETA++" {
		t.Fatalf("GetMulti = %v", m)
	}

	// CompareAndSwap: a stale CAS loses, a fresh one wins.
	it, err = mc.Get("a")
	must(err)
	stale := *it
	it.Value = []byte("alpha2")
	must(mc.CompareAndSwap(it))
	stale.Value = []byte("lost")
	wantErr(mc.CompareAndSwap(&stale), memcache.ErrCASConflict)
	must(mc.Delete("b"))
	bItem := &memcache.Item{Key: "b", Value: []byte("x")}
	wantErr(mc.CompareAndSwap(bItem), memcache.ErrCacheMiss)

	wantErr(mc.Delete("b"), memcache.ErrCacheMiss)

	must(mc.Set(&memcache.Item{Key: "n", Value: []byte("10")}))
	n, err := mc.Increment("n", 5)
	must(err)
	if n != 15 {
		t.Fatalf("Increment = %d", n)
	}
	n, err = mc.Decrement("n", 20)
	must(err)
	if n != 0 {
		t.Fatalf("Decrement below zero = %d, want 0", n)
	}
	_, err = mc.Increment("missing", 1)
	wantErr(err, memcache.ErrCacheMiss)
	_, err = mc.Increment("a", 1)
	if err == nil || !strings.Contains(err.Error(), "non-numeric") {
		t.Fatalf("Increment non-numeric: %v", err)
	}

	must(mc.Touch("a", 100))
	wantErr(mc.Touch("missing", 100), memcache.ErrCacheMiss)
	it, err = mc.GetAndTouch("a", 200)
	must(err)
	if string(it.Value) != "alpha2" {
		t.Fatalf("GetAndTouch = %q", it.Value)
	}

	// An already expired item is never returned.
	must(mc.Set(&memcache.Item{Key: "gone", Value: []byte("x"), Expiration: -1}))
	_, err = mc.Get("gone")
	wantErr(err, memcache.ErrCacheMiss)

	big := bytes.Repeat([]byte("x"), DefaultMaxItemSize+1)
	if err := mc.Set(&memcache.Item{Key: "big", Value: big}); err == nil {
		t.Fatal("Set of an over-size item succeeded")
	}
	// The connection pool must still work after the refused item.
	_, err = mc.Get("a")
	must(err)

	if err := mc.Set(&memcache.Item{Key: "bad key", Value: []byte("x")}); !errors.Is(err, memcache.ErrMalformedKey) {
		t.Fatalf("malformed key: %v", err)
	}

	must(mc.FlushAll())
	_, err = mc.Get("a")
	wantErr(err, memcache.ErrCacheMiss)
	must(mc.DeleteAll())
}

// concurrently runs fn(w) on workers goroutines and fails the test with
// the first error any returns.
func concurrently(t *testing.T, workers int, fn func(w int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			if err := fn(w); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// expectValue fails unless key holds want.
func expectValue(t *testing.T, mc *memcache.Client, key, want string) {
	t.Helper()
	it, err := mc.Get(key)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(it.Value); got != want {
		t.Fatalf("%s = %s, want %s", key, got, want)
	}
}

// TestConcurrentIncr: 16 clients × 1000 incr end at exactly 16000.
func TestConcurrentIncr(t *testing.T) {
	addr := startSpillway(t)
	mc := newClient(t, addr)
	if err := mc.Set(&memcache.Item{Key: "ctr", Value: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	const workers, each = 16, 1000
	concurrently(t, workers, func(int) error {
		for range each {
			if _, err := mc.Increment("ctr", 1); err != nil {
				return err
			}
		}
		return nil
	})
	expectValue(t, mc, "ctr", strconv.Itoa(workers*each))
}

// TestConcurrentCAS: gets+cas retry loops never lose an update.
func TestConcurrentCAS(t *testing.T) {
	addr := startSpillway(t)
	mc := newClient(t, addr)
	if err := mc.Set(&memcache.Item{Key: "v", Value: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 200
	concurrently(t, workers, func(int) error {
		for range each {
			for attempt := 0; ; attempt++ {
				if attempt > 10000 {
					return fmt.Errorf("cas never succeeded")
				}
				it, err := mc.Get("v")
				if err != nil {
					return err
				}
				n, _ := strconv.Atoi(string(it.Value))
				it.Value = []byte(strconv.Itoa(n + 1))
				err = mc.CompareAndSwap(it)
				if err == nil {
					break
				}
				if !errors.Is(err, memcache.ErrCASConflict) {
					return err
				}
			}
		}
		return nil
	})
	expectValue(t, mc, "v", strconv.Itoa(workers*each))
}

// TestReadYourWrites: after STORED, the writer's own get sees the value,
// with many writers at once.
func TestReadYourWrites(t *testing.T) {
	addr := startSpillway(t)
	mc := newClient(t, addr)
	concurrently(t, 16, func(w int) error {
		for i := range 300 {
			key := fmt.Sprintf("ryw-%d-%d", w, i)
			val := []byte(key + "-value")
			if err := mc.Set(&memcache.Item{Key: key, Value: val}); err != nil {
				return err
			}
			it, err := mc.Get(key)
			if err != nil {
				return fmt.Errorf("get %s right after set: %w", key, err)
			}
			if !bytes.Equal(it.Value, val) {
				return fmt.Errorf("get %s = %q", key, it.Value)
			}
		}
		return nil
	})
}

// TestPipelining sends many commands in one write, then one command in
// many writes.
func TestPipelining(t *testing.T) {
	addr := startSpillway(t)
	c := dialRaw(t, addr)
	var send, want strings.Builder
	for i := range 200 {
		fmt.Fprintf(&send, "set p%d 0 0 %d\r\n%d\r\nget p%d\r\n", i, len(strconv.Itoa(i)), i, i)
		fmt.Fprintf(&want, "STORED\r\nVALUE p%d 0 %d\r\n%d\r\nEND\r\n", i, len(strconv.Itoa(i)), i)
	}
	c.send(send.String())
	c.expect(want.String())

	msg := "set split 7 0 11\r\nhello world\r\nget split\r\n"
	for i := range len(msg) {
		c.send(msg[i : i+1])
	}
	c.expect("STORED\r\nVALUE split 7 11\r\nhello world\r\nEND\r\n")
}

// TestOverlongLineCloses: a line that never ends costs bounded memory.
func TestOverlongLineCloses(t *testing.T) {
	addr := startSpillway(t)
	c := dialRaw(t, addr)
	junk := strings.Repeat("x", 64<<10)
	c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	for range 64 { // 4 MiB without a newline
		if _, err := c.nc.Write([]byte(junk)); err != nil {
			break // the server closed it: what we want
		}
	}
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	for {
		_, err := c.nc.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("server kept an endless line open")
			}
			return
		}
	}
}

// TestPymemcache runs Debian's python3-pymemcache against a node.
func TestPymemcache(t *testing.T) {
	python := requirePythonModule(t, "pymemcache", "python3-pymemcache")
	addr := startSpillway(t)
	host, port, _ := net.SplitHostPort(addr)
	out, err := exec.Command(python, "-c", pymemcacheScript, host, port).CombinedOutput()
	if err != nil {
		t.Fatalf("pymemcache: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "pymemcache ok") {
		t.Fatalf("pymemcache output:\n%s", out)
	}
}

const pymemcacheScript = `
import sys
from pymemcache.client.base import Client
c = Client((sys.argv[1], int(sys.argv[2])), connect_timeout=5, timeout=5, default_noreply=False)
def eq(a, b):
    assert a == b, (a, b)
c.flush_all()
eq(c.set("k", b"v", expire=100), True)
eq(c.get("k"), b"v")
eq(c.add("k", b"x"), False)
eq(c.add("k2", b"x"), True)
eq(c.replace("k2", b"y"), True)
eq(c.replace("nope", b"y"), False)
eq(c.append("k2", b"z"), True)
eq(c.prepend("k2", b"w"), True)
eq(c.get("k2"), b"wyz")
eq(c.get_many(["k", "k2", "nope"]), {"k": b"v", "k2": b"wyz"})
v, cas = c.gets("k")
eq(v, b"v")
eq(c.cas("k", b"v2", cas), True)
eq(c.cas("k", b"v3", cas), False)
eq(c.get("k"), b"v2")
eq(c.set("n", b"1"), True)
eq(c.incr("n", 41), 42)
eq(c.decr("n", 50), 0)
eq(c.incr("nope", 1), None)
eq(c.touch("k", 10), True)
eq(c.touch("nope", 10), False)
eq(c.delete("k"), True)
eq(c.delete("k", noreply=False), False)
eq(c.get("k"), None)
eq(c.set_many({"a": b"1", "b": b"2"}), [])
eq(c.get_many(["a", "b"]), {"a": b"1", "b": b"2"})
eq(c.delete_many(["a", "b"]), True)
st = c.stats()
assert st[b"cmd_get"] > 0, st
assert b"version" in st
assert c.version().startswith(b"1.6."), c.version()
c.quit()
print("pymemcache ok")
`

// TestMemccapable runs libmemcached's ASCII conformance suite.
func TestMemccapable(t *testing.T) {
	bin := requireTool(t, "memccapable", "libmemcached-tools")
	addr := startSpillway(t)
	host, port, _ := net.SplitHostPort(addr)
	out, err := exec.Command(bin, "-h", host, "-p", port, "-a", "-t", "5").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "All tests passed") {
		t.Fatalf("memccapable -a: %v\n%s", err, out)
	}
	t.Logf("memccapable -a:\n%s", out)
}
