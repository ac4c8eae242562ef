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
