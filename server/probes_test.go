package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// get fetches path from h and returns the status and body.
func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

// TestProbes: /healthz answers while the process does; /readyz answers
// 200 while the node takes clients and 503 once it shuts down, so an
// orchestrator stops sending it clients while it drains.
func TestProbes(t *testing.T) {
	_, srv := startServer(t, Config{})
	h := srv.MetricsHandler()
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, h, path); code != 200 {
			t.Errorf("%s before shutdown: %d %q", path, code, body)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, h, "/readyz"); code != http.StatusServiceUnavailable || body != "shutting down\n" {
		t.Errorf("/readyz after shutdown: %d %q", code, body)
	}
	if code, _ := get(t, h, "/healthz"); code != 200 {
		t.Errorf("/healthz after shutdown: %d", code)
	}
}

// TestLoadSeries: each node exports, per member of its ring, the load
// its picker counts and the capacity at which it passes the member over;
// a member that leaves takes its series with it.
func TestLoadSeries(t *testing.T) {
	nodes := startCluster(t, 3, clusterOpts{})
	h := nodes[0].srv.MetricsHandler()
	_, m := get(t, h, "/metrics")
	for i := range 3 {
		for _, name := range []string{"cache_node_active_load", "cache_node_load_capacity"} {
			if want := fmt.Sprintf("%s{node_id=\"node%d\"} ", name, i); !strings.Contains(m, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	}
	if strings.Contains(m, `cache_node_load_capacity{node_id="node1"} 0`+"\n") {
		t.Errorf("capacity 0 with epsilon 0.25:\n%s", m)
	}
	nodes[2].stop(t, true)
	waitConverged(t, nodes)
	_, m = get(t, h, "/metrics")
	for _, name := range []string{"cache_node_active_load", "cache_node_load_capacity"} {
		if strings.Contains(m, name+`{node_id="node2"}`) {
			t.Errorf("node2 left, its %s stayed", name)
		}
	}
}

// TestProfileLabels: the goroutines of the client port's connections, of
// the peer port's, and the readers of the connections shared to other
// nodes carry a conn label in the profiles /debug/pprof/ serves, which
// is what lets a CPU profile be split by port (go tool pprof -tags).
func TestProfileLabels(t *testing.T) {
	nodes := startCluster(t, 2, clusterOpts{})
	entry := nodes[0]
	key := keyOwnedBy(t, entry, "label:", nodes[1].srv.ID())
	c := dialRaw(t, entry.addr)
	// A forwarded write leaves a pooled connection to the owner's peer
	// port open, and a read of the key, which the entry does not hold,
	// goes over a shared connection, whose reader stays too.
	c.send("set " + key + " 0 0 1\r\nv\r\n")
	c.expect("STORED\r\n")
	c.send("get " + key + "\r\n")
	c.expect("VALUE " + key + " 0 1\r\nv\r\nEND\r\n")

	want := map[string]string{
		`{"conn":"client"}`:      "spillway/server.(*conn).serve",
		`{"conn":"peer"}`:        "spillway/server.(*conn).serve",
		`{"conn":"mux-replies"}`: "spillway/peers/wire.(*muxConn).readReplies",
	}
	code, dump := get(t, entry.srv.MetricsHandler(), "/debug/pprof/goroutine?debug=1")
	if code != 200 {
		t.Fatalf("goroutine profile: %d", code)
	}
	// debug=1 groups identical goroutines in blocks: a count and PCs, an
	// optional "# labels:" line, then one line per frame.
	for block := range strings.SplitSeq(dump, "\n\n") {
		for labels, frame := range want {
			if strings.Contains(block, "# labels: "+labels+"\n") && strings.Contains(block, frame+"+") {
				delete(want, labels)
			}
		}
	}
	for labels, frame := range want {
		t.Errorf("no goroutine in %s labelled %s", frame, labels)
	}
}
