package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"spillway/internal/memcachedtest"
)

// node is a `spillway serve` process of the test cluster.
type node struct {
	cmd             *exec.Cmd
	log             bytes.Buffer
	client, metrics string
	exited          chan struct{}
}

var (
	clusterMu    sync.Mutex // guards clusterNodes
	clusterNodes []*node
)

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// httpGet fetches a URL on loopback within a few seconds.
func httpGet(u string) (int, []byte, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// cluster returns a three-node cluster of the image's binary on loopback,
// with --metrics, and some traffic through each node; started by the
// first test that asks, stopped by TestMain.
func cluster(t *testing.T) []*node {
	t.Helper()
	clusterMu.Lock()
	defer clusterMu.Unlock()
	if clusterNodes != nil {
		return clusterNodes
	}
	bin := binary(t)
	var seed string
	var nodes []*node
	for i := range 3 {
		n := &node{client: freePort(t), metrics: freePort(t), exited: make(chan struct{})}
		gossip := freePort(t)
		if i == 0 {
			seed = gossip
		}
		n.cmd = exec.Command(bin, "serve", "--name", fmt.Sprintf("n%d", i), "--listen", n.client,
			"--gossip", gossip, "--join", seed, "--peer-listen", "127.0.0.1:0", "--metrics", n.metrics, "-m", "16")
		n.cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		n.cmd.Stderr = &n.log
		if err := n.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { n.cmd.Wait(); close(n.exited) }()
		nodes = append(nodes, n)
	}
	clusterNodes = nodes // stopped by TestMain, even if this fails below
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range nodes {
		for {
			_, body, _ := httpGet("http://" + n.metrics + "/metrics")
			if bytes.Contains(body, []byte("\nspillway_cluster_nodes 3\n")) {
				break
			}
			select {
			case <-n.exited:
				t.Fatalf("node %s exited:\n%s", n.client, n.log.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s never saw 3 nodes", n.client)
			}
			time.Sleep(50 * time.Millisecond) // polls a process: no event to wait for
		}
	}
	traffic(t, nodes)
	return nodes
}

// traffic sets and reads keys through every node, so that every series
// of the routing path has a sample.
func traffic(t *testing.T, nodes []*node) {
	t.Helper()
	for _, n := range nodes {
		mc := memcache.New(n.client)
		mc.Timeout = 5 * time.Second
		for i := range 100 {
			k := fmt.Sprintf("key-%d", i)
			if err := mc.Set(&memcache.Item{Key: k, Value: []byte(k)}); err != nil {
				t.Fatalf("set through %s: %v", n.client, err)
			}
			if _, err := mc.Get(k); err != nil {
				t.Fatalf("get through %s: %v", n.client, err)
			}
			mc.Get("missing-" + k)
		}
		mc.Close()
	}
}

func stopCluster() {
	clusterMu.Lock()
	defer clusterMu.Unlock()
	for _, n := range clusterNodes {
		n.cmd.Process.Kill()
		<-n.exited
	}
	clusterNodes = nil
}

// TestPromtoolCheckMetrics: every node's /metrics passes promtool's
// check (format and naming lint).
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool := memcachedtest.Tool(t, "promtool", "prometheus")
	for _, n := range cluster(t) {
		_, body, err := httpGet("http://" + n.metrics + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("promtool check metrics on %s: %v\n%s", n.metrics, err, out)
		}
	}
}

// dashboardExprs returns the PromQL of every panel of the dashboard,
// with its title.
func dashboardExprs(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("grafana/spillway.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Type    string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	exprs := map[string][]string{}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs[p.Title] = append(exprs[p.Title], tg.Expr)
		}
	}
	return exprs
}

var (
	promStrings = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promBraces  = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promIdent   = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// Keywords, and those followed by a parenthesised list of labels.
	promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
	promLabelLists = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
)

// metricNames returns the metric names a PromQL expression reads: the
// identifiers that are not functions, aggregations, keywords, or labels
// in a by (...) list, once strings, label matchers and ranges are gone.
func metricNames(expr string) []string {
	e := promBraces.ReplaceAllString(promStrings.ReplaceAllString(expr, `""`), " ")
	var names []string
	locs := promIdent.FindAllStringIndex(e, -1)
	skipUntil := -1
	for i, l := range locs {
		if l[0] < skipUntil {
			continue
		}
		w := e[l[0]:l[1]]
		rest := strings.TrimLeft(e[l[1]:], " ")
		if promLabelLists[w] && strings.HasPrefix(rest, "(") {
			skipUntil = l[1] + strings.Index(e[l[1]:], ")")
			continue
		}
		if l[0] > 0 && (e[l[0]-1] >= '0' && e[l[0]-1] <= '9' || e[l[0]-1] == '.') {
			continue // the e of 1e3
		}
		next := ""
		if i+1 < len(locs) {
			next = e[locs[i+1][0]:locs[i+1][1]]
		}
		if promKeywords[w] || strings.HasPrefix(rest, "(") || next == "by" || next == "without" {
			continue
		}
		names = append(names, w)
	}
	return names
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string]string{
		`sum by (le, command) (rate(a_bucket{job=~"$job",x="by (y)"}[$__rate_interval]))`: "a_bucket",
		`max(b{j="1"} / c) * on(instance) group_left(node_id) d offset 5m`:                "b c d",
		`histogram_quantile(0.99, sum without (pod) (rate(e[1m]))) > 1e3 and bool f`:      "e f",
	} {
		if got := strings.Join(metricNames(expr), " "); got != want {
			t.Errorf("metricNames(%s) = %q, want %q", expr, got, want)
		}
	}
}

// exposedNames are the series names in a /metrics page: each family's,
// with a histogram's _bucket, _sum and _count.
func exposedNames(body []byte) map[string]bool {
	names := map[string]bool{}
	for _, l := range strings.Split(string(body), "\n") {
		f := strings.Fields(l)
		if len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
			if f[3] == "histogram" || f[3] == "summary" {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					names[f[2]+s] = true
				}
			}
		}
	}
	return names
}

// TestDashboardSeries: every series the dashboard's queries read is one
// a running node exports.
func TestDashboardSeries(t *testing.T) {
	exprs := dashboardExprs(t)
	if len(exprs) < 10 {
		t.Fatalf("only %d panels", len(exprs))
	}
	_, body, err := httpGet("http://" + cluster(t)[0].metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	have := exposedNames(body)
	read := map[string]bool{}
	for title, es := range exprs {
		for _, e := range es {
			names := metricNames(e)
			if len(names) == 0 {
				t.Errorf("panel %q: %s reads no series", title, e)
			}
			for _, n := range names {
				read[n] = true
				if !have[n] {
					t.Errorf("panel %q reads %s, which /metrics does not export", title, n)
				}
			}
		}
	}
	// The list: load against the bound, spills, peer and origin
	// fetches, hits, latency, undelivered invalidations.
	for _, n := range []string{"cache_node_active_load", "cache_node_load_capacity", "cache_routing_requests_total",
		"spillway_peer_fetches_total", "spillway_origin_fetches_total", "spillway_get_hits_total",
		"spillway_request_duration_seconds_bucket", "spillway_lost_invalidations_total"} {
		if !read[n] {
			t.Errorf("no panel reads %s", n)
		}
	}
}

// promQuery runs an instant query and returns its result vector.
func promQuery(base, q string) ([]struct {
	Metric map[string]string
	Value  []any
}, error) {
	code, body, err := httpGet(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string
		Error  string
		Data   struct {
			ResultType string
			Result     []struct {
				Metric map[string]string
				Value  []any
			}
		}
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("HTTP %d: %v: %s", code, err, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s", r.Error)
	}
	if r.Data.ResultType == "scalar" {
		return nil, fmt.Errorf("a scalar result")
	}
	return r.Data.Result, nil
}

// TestPrometheusScrapesCluster: a real Prometheus scrapes the three
// nodes; the per-node load comes back from each, for each node, and every
// query of the dashboard returns data.
func TestPrometheusScrapesCluster(t *testing.T) {
	prom := memcachedtest.Tool(t, "prometheus", "prometheus")
	nodes := cluster(t)
	dir := t.TempDir()
	var targets []string
	for _, n := range nodes {
		targets = append(targets, strconv.Quote(n.metrics))
	}
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: spillway\n    static_configs:\n      - targets: [%s]\n",
		strings.Join(targets, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// The port freePort found free may be taken before Prometheus binds
	// it (an outgoing connection of a test running beside this one gets
	// it as its ephemeral port): a start that fails so is tried again on
	// another port (CI saw "bind: address already in use").
	var log *bytes.Buffer
	var exited chan struct{}
	var base string
	starts := 0
	start := func() {
		starts++
		addr := freePort(t)
		cmd := exec.Command(prom, "--config.file="+filepath.Join(dir, "prometheus.yml"),
			"--storage.tsdb.path="+filepath.Join(dir, "data"+strconv.Itoa(starts)), "--web.listen-address="+addr, "--log.level=warn")
		log, exited, base = new(bytes.Buffer), make(chan struct{}), "http://"+addr
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := exited
		go func() { cmd.Wait(); close(done) }()
		t.Cleanup(func() { cmd.Process.Kill(); <-done })
	}
	start()

	// Wait for the load series of all three nodes, as each counts them.
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for {
		res, err := promQuery(base, "cache_node_active_load")
		seen := map[string]bool{}
		for _, r := range res {
			seen[r.Metric["instance"]+" "+r.Metric["node_id"]] = true
		}
		if len(seen) == 9 {
			break
		}
		last = fmt.Sprintf("%d series of instance and node_id (%v)", len(seen), err)
		select {
		case <-exited:
			if starts < 3 && strings.Contains(log.String(), "address already in use") {
				start()
				continue
			}
			t.Fatalf("prometheus exited:\n%s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("cache_node_active_load: %s, want 9 (3 scrapes x 3 nodes)\n%s", last, log.String())
		}
		time.Sleep(200 * time.Millisecond) // polls Prometheus: no event to wait for
	}

	// More traffic, then every dashboard query, as Grafana would send it,
	// returns data once a few scrapes have seen it.
	traffic(t, nodes)
	deadline = time.Now().Add(60 * time.Second)
	fill := strings.NewReplacer("$__rate_interval", "10s", "$__range", "1m", "$job", "spillway")
	exprs := dashboardExprs(t)
	var titles []string
	for title := range exprs {
		titles = append(titles, title)
	}
	slices.Sort(titles)
	for _, title := range titles {
		for _, e := range exprs[title] {
			q := fill.Replace(e)
			for {
				res, err := promQuery(base, q)
				if err == nil && len(res) > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("panel %q: %s: %d results, %v", title, q, len(res), err)
					break
				}
				time.Sleep(200 * time.Millisecond) // polls Prometheus
			}
		}
	}
}
