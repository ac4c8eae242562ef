package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

func TestHTTPOrigin(t *testing.T) {
	var mu sync.Mutex
	paths := map[string]int{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths[r.URL.EscapedPath()]++
		mu.Unlock()
		switch {
		case strings.HasSuffix(r.URL.Path, "/missing"):
			http.NotFound(w, r)
		case strings.HasSuffix(r.URL.Path, "/broken"):
			http.Error(w, "down", http.StatusBadGateway)
		case strings.HasSuffix(r.URL.Path, "/short"):
			w.Header().Set("Cache-Control", "public, max-age=60")
			io.WriteString(w, "brief")
		default:
			io.WriteString(w, "body of "+r.URL.Path)
		}
	}))
	defer ts.Close()
	o, err := ParseOrigin(ts.URL+"/items/{key}", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	addr, srv := startServer(t, Config{Origin: o})
	mc := newClient(t, addr)

	cases := []struct {
		name, key, want string
		miss            bool
	}{
		{"hit", "a", "body of /items/a", false},
		{"escaped", "a/b?c", "body of /items/a/b?c", false},
		{"not-found", "missing", "", true},
		{"error-is-a-miss", "broken", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			it, err := mc.Get(c.key)
			if c.miss {
				if !errors.Is(err, memcache.ErrCacheMiss) {
					t.Fatalf("get %q: %v, want a miss", c.key, err)
				}
				return
			}
			if err != nil || string(it.Value) != c.want {
				t.Fatalf("get %q = %v %v, want %q", c.key, it, err, c.want)
			}
		})
	}
	// The key was escaped: one path segment, not two.
	if paths["/items/a%2Fb%3Fc"] != 1 {
		t.Fatalf("origin paths = %v", paths)
	}
	// A loaded key is cached: the origin is not asked twice.
	mc.Get("a")
	if paths["/items/a"] != 1 {
		t.Fatalf("origin asked %d times for a", paths["/items/a"])
	}
	// max-age becomes the item's TTL.
	mc.Get("short")
	it, ok := srv.store.Get("short")
	if !ok || it.Expires.IsZero() || time.Until(it.Expires) > 61*time.Second {
		t.Fatalf("short: %v, expires %v", ok, it.Expires)
	}
	if got := srv.counters[ctrOriginErrors].Load(); got != 1 {
		t.Fatalf("origin_errors = %d, want 1", got)
	}
}

func TestFileOriginCannotEscape(t *testing.T) {
	dir := t.TempDir()
	inner := filepath.Join(dir, "items")
	os.Mkdir(inner, 0o755)
	os.WriteFile(filepath.Join(inner, "k1"), []byte("v1"), 0o644)
	os.WriteFile(filepath.Join(inner, "a%2Fb"), []byte("slash"), 0o644)
	os.WriteFile(filepath.Join(dir, "secret"), []byte("secret"), 0o644)
	o, err := ParseOrigin("file://"+inner, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		key, want string
		miss      bool
	}{
		{"k1", "v1", false},
		{"a/b", "slash", false},
		{"../secret", "", true},
		{"..", "", true},
		{".", "", true},
		{"nope", "", true},
	}
	for _, c := range cases {
		it, err := o.Load(context.Background(), c.key)
		if c.miss {
			if err == nil {
				t.Errorf("%q loaded %q", c.key, it.Value)
			}
			continue
		}
		if err != nil || string(it.Value) != c.want {
			t.Errorf("%q = %q, %v", c.key, it.Value, err)
		}
	}
}

// A key names one resource of an HTTP origin: never a parent path, never
// another query parameter.
func TestHTTPOriginKeyEscaping(t *testing.T) {
	for _, tc := range []struct {
		url, key, want string // want "" for a refused key
	}{
		{"http://o/items/{key}", "a/b", "http://o/items/a%2Fb"},
		{"http://o/items/{key}", "..", ""},
		{"http://o/items/{key}", ".", ""},
		{"http://o/items/{key}", "...", "http://o/items/..."},
		{"http://o/items/{key}", "a\x00b", ""},
		{"http://o/items/{key}", "a\x7fb", ""},
		{"http://o/items/{key}.json", "a;b=c", "http://o/items/a%3Bb=c.json"},
		{"http://o/get?k={key}", "a&admin=1", "http://o/get?k=a%26admin%3D1"},
		{"http://o/get?k={key}&v=2", "x+y;z", "http://o/get?k=x%2By%3Bz&v=2"},
		{"http://o/get?k={key}", "..", "http://o/get?k=.."},
	} {
		o := &HTTPOrigin{URL: tc.url}
		got, err := o.url(tc.key)
		if tc.want == "" {
			if err == nil || !errors.Is(err, ErrOriginMiss) {
				t.Errorf("%s with key %q: %q, %v; want it refused as a miss", tc.url, tc.key, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s with key %q: %q, %v; want %q", tc.url, tc.key, got, err, tc.want)
		}
	}
}

// A file origin serves regular files only: a FIFO is refused at once, not
// waited on for a writer.
func TestFileOriginRegularFilesOnly(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	o, err := NewFileOrigin(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	for _, key := range []string{"fifo", "sub"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		it, err := o.Load(ctx, key)
		cancel()
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %q, %v; want it refused at once", key, it.Value, err)
		}
	}
}

// TestOriginLoadsOncePerKey: concurrent misses of one key wait for one load.
func TestOriginLoadsOncePerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := &countingOrigin{gate: make(chan struct{})}
		n, srv := startPipeServer(t, Config{Origin: origin})
		var readers []*rawConn
		for range 20 {
			c := dialPipe(t, n, "client")
			c.send("get k\r\n")
			readers = append(readers, c)
		}
		// Release the one load once every reader is waiting on it.
		synctest.Wait()
		close(origin.gate)
		for _, c := range readers {
			c.expect("VALUE k 0 10\r\nvalue-of-k\r\nEND\r\n")
		}
		if got := origin.count("k"); got != 1 {
			t.Fatalf("origin loads = %d, want 1", got)
		}
		if got := srv.counters[ctrMerged].Load(); got != 19 {
			t.Fatalf("singleflight_merged = %d, want 19", got)
		}
	})
}

func TestMetricsEndpoint(t *testing.T) {
	nodes := startCluster(t, 3, clusterOpts{})
	c := newClient(t, nodes[0].addr)
	for i := range 30 {
		k := fmt.Sprintf("m%d", i)
		c.Set(&memcache.Item{Key: k, Value: []byte("x")})
		c.Get(k)
	}
	ts := httptest.NewServer(nodes[0].srv.MetricsHandler())
	defer ts.Close()
	body := func(path string) string {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	m := body("/metrics")
	for _, want := range []string{
		`cache_routing_requests_total{node_id="node0",status="primary"}`,
		`cache_node_active_load{node_id="node1"}`,
		"spillway_served_total", "spillway_forwarded_total", "spillway_origin_fetches_total",
		"spillway_singleflight_merged_total", "spillway_store_hits_total",
		`spillway_request_duration_seconds_bucket{command="get"`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	r := body("/debug/ring")
	for _, want := range []string{`"self": "node0"`, `"id": "node2"`, `"vnodes": 160`} {
		if !strings.Contains(r, want) {
			t.Errorf("/debug/ring lacks %s:\n%s", want, r)
		}
	}
	rc := dialRaw(t, nodes[1].addr)
	rc.send("stats cluster\r\n")
	var lines []string
	for l := rc.line(); l != "END"; l = rc.line() {
		lines = append(lines, l)
	}
	joined := strings.Join(lines, "\n")
	for _, want := range []string{"STAT self node1", "STAT node0:client " + nodes[0].addr, "STAT node2:share 0."} {
		if !strings.Contains(joined, want) {
			t.Errorf("stats cluster lacks %q:\n%s", want, joined)
		}
	}
}
