package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// syntheticReport is a Spillway run over four servers, one named "<x>" and
// one whose stats failed, with a hot key at 10s and a few errors.
func syntheticReport() *Report {
	r := &Report{
		Workload: Workload{
			Servers: []string{"10.0.0.1:11211", "10.0.0.2:11211", "<x>", "10.0.0.4:11211"},
			Entry:   EntrySpread, Conns: 64, Pipeline: 4, Duration: 30, Keys: 100000, Zipf: 0.99,
			Ratio: "9:1", ValueSize: "100-1000", Prefill: true, HotKeyAt: 10, HotShare: 0.2, Seed: 1,
		},
		Start:   time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC),
		Elapsed: 30,
		Errors:  map[string]int64{"timeout": 12, "server_error": 3},
		Latency: Latency{Count: 5_400_000, Mean: 310 * time.Microsecond, P50: 240 * time.Microsecond,
			P90: 520 * time.Microsecond, P99: 1900 * time.Microsecond, P999: 7 * time.Millisecond, Max: 41 * time.Millisecond},
	}
	for i := range 60 {
		at := 0.5 * float64(i+1)
		ops := 180000 + 9000*math.Sin(float64(i)/3)
		if at > 10 && at < 14 {
			ops -= 50000 * (14 - at) / 4
		}
		s := Sample{At: at, Ops: int64(ops / 2), OpsPerSec: ops}
		if i == 21 || i == 22 {
			s.Errors = 6
		}
		if i == 40 {
			s.Errors = 3
		}
		r.Throughput = append(r.Throughput, s)
		r.Ops += s.Ops - s.Errors
		r.ErrorCount += s.Errors
	}
	r.OpsPerSec = float64(r.Ops) / r.Elapsed
	r.Gets, r.Sets = r.Ops*9/10, r.Ops-r.Ops*9/10
	r.Hits = r.Gets * 97 / 100
	r.Misses = r.Gets - r.Hits
	r.HitRatio = float64(r.Hits) / float64(r.Gets)
	lat := []time.Duration{60, 120, 170, 240, 330, 520, 700, 1900, 2600, 7000, 9500, 18000, 30000, 41000}
	for i, p := range spectrum {
		r.Latency.Percentiles = append(r.Latency.Percentiles, Percentile{Percentile: p, Value: lat[i] * time.Microsecond})
	}
	for i, req := range []uint64{1_500_000, 1_700_000, 1_900_000, 0} {
		s := ServerLoad{Addr: r.Workload.Servers[i], Requests: req, Served: req, SpilledServed: req / 7,
			CmdGet: req * 9 / 10, CmdSet: req / 10, HasCluster: true}
		if i == 3 {
			s = ServerLoad{Addr: r.Workload.Servers[i], Err: "dial tcp 10.0.0.4:11211: i/o timeout"}
		}
		r.Servers = append(r.Servers, s)
	}
	r.Load = summariseLoad(r.Servers, r.Ops)
	return r
}

// checkHTML checks what every page must be: one document, an SVG per
// chart the report has data for, nothing fetched or run.
func checkHTML(t *testing.T, rep *Report) string {
	t.Helper()
	var buf bytes.Buffer
	if err := rep.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	if !strings.HasPrefix(page, "<!DOCTYPE html>\n") || !strings.HasSuffix(page, "</html>\n") ||
		strings.Count(page, "<body>") != 1 || strings.Count(page, "</body>") != 1 {
		t.Errorf("HTML is not one document:\n%.500s", page)
	}
	latency := false // a log axis can plot only positive latencies
	for _, p := range rep.Latency.Percentiles {
		latency = latency || p.Value > 0
	}
	want := 0
	for _, has := range []bool{len(rep.Throughput) > 0, len(rep.Servers) > 0, rep.Latency.Count > 0 && latency} {
		if has {
			want++
		}
	}
	if n := strings.Count(page, "<svg"); n != want || strings.Count(page, "</svg>") != want {
		t.Errorf("HTML has %d <svg, want %d", n, want)
	}
	lower := strings.ToLower(page)
	for _, bad := range []string{"http://", "https://", "<script", "<link", "<img", "<iframe", "src=", "href=", "@import", "javascript:"} {
		if strings.Contains(lower, bad) {
			i := strings.Index(lower, bad)
			t.Errorf("HTML contains %q: …%s…", bad, page[max(0, i-100):min(len(page), i+100)])
		}
	}
	// The only url() is the embedded font, there if there are charts.
	fonts := min(want, 1)
	if n, d := strings.Count(page, "url("), strings.Count(page, "url(data:font/ttf;base64,"); n != fonts || d != fonts {
		t.Errorf("HTML has %d url( of which %d embedded fonts, want %d font", n, d, fonts)
	}
	if want > 0 && (!strings.Contains(page, `@font-face {font-family: "Liberation Sans"`) ||
		!strings.Contains(page, "font-family:Liberation Sans;")) {
		t.Errorf("charts are not set in the embedded Liberation Sans")
	}
	// Each SVG is well-formed XML on its own.
	for rest := page; ; {
		i := strings.Index(rest, "<svg")
		if i < 0 {
			break
		}
		j := strings.Index(rest[i:], "</svg>") + len("</svg>")
		checkXML(t, rest[i:i+j])
		rest = rest[i+j:]
	}
	return page
}

func checkXML(t *testing.T, s string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(s))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Errorf("SVG is not well-formed: %v\n%.300s", err, s)
			return
		}
	}
}

func TestHTMLSynthetic(t *testing.T) {
	rep := syntheticReport()
	page := checkHTML(t, rep)
	if strings.Contains(page, "<x>") {
		t.Error("server name <x> is not escaped")
	}
	// In the summary (hottest server), the chart's axis and the text report
	// (hottest server, server table).
	if n := strings.Count(page, "&lt;x&gt;"); n != 4 || !strings.Contains(page, ">&lt;x&gt;</text>") ||
		!strings.Contains(page, "hottest &lt;x&gt; (") {
		t.Errorf("escaped server name appears %d times, want 4: summary, chart, text report twice", n)
	}
	for _, want := range []string{
		"<title>Spillway bench</title>", "Throughput", "Load per server", "Latency by percentile",
		"served as primary", "served after a spill", "interval with errors", "hot key", "10.0.0.4:11211 (no stats)",
		"p99.9", "240.0µs / 1.90ms / 7.00ms", "timeout 12", "97.0%",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	if os.Getenv("SPILLWAY_BENCH_HTML") != "" { // to look at the page
		if err := os.WriteFile(os.Getenv("SPILLWAY_BENCH_HTML"), []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	var buf bytes.Buffer
	if err := rep.WriteHTMLOptions(&buf, HTMLOptions{Title: "t<1>&"}); err != nil {
		t.Fatal(err)
	}
	if s := buf.String(); !strings.Contains(s, "<title>t&lt;1&gt;&amp;</title>") || !strings.Contains(s, "<h1>t&lt;1&gt;&amp;</h1>") {
		t.Errorf("title not escaped:\n%.1500s", s)
	}
}

func TestHTMLPlainServers(t *testing.T) {
	// memcached targets: no cluster counters, so one series; many long
	// names, so rotated labels; no errors, open loop.
	rep := syntheticReport()
	rep.Workload.Rate = 100000
	rep.Workload.HotShare = 0
	rep.Errors, rep.ErrorCount = nil, 0
	for i := range rep.Throughput {
		rep.Throughput[i].Errors = 0
	}
	rep.Servers = nil
	for i := range 16 {
		rep.Servers = append(rep.Servers, ServerLoad{Addr: fmt.Sprintf("cache-%02d.example.internal:11211", i),
			Requests: uint64(1000 + 37*i), CmdGet: 900, CmdSet: uint64(100 + 37*i)})
	}
	rep.Servers[15].Addr = "cache-15.a-very-long-name.us-east-1.compute.example.internal:11211"
	rep.Load = summariseLoad(rep.Servers, rep.Ops)
	page := checkHTML(t, rep)
	for _, bad := range []string{"served as primary", "errors/s", "interval with errors", "hot key", "closed loop"} {
		if strings.Contains(page, bad) {
			t.Errorf("HTML has %q", bad)
		}
	}
	if !strings.Contains(page, "open loop") || !strings.Contains(page, ">cache-15.a-very-lon…ample.internal:11211</text>") ||
		!strings.Contains(page, "cache-15.a-very-long-name.us-east-1.compute.example.internal:11211") {
		t.Error("HTML lacks the open-loop note or the last server, shortened in the chart and whole in the text")
	}
}

func TestHTMLEdgeCases(t *testing.T) {
	// An empty report, a single sample, zero and sub-microsecond latencies,
	// servers that served nothing: pages, not panics.
	page := checkHTML(t, &Report{})
	for _, want := range []string{"No throughput samples.", "No server stats.", "No successful requests."} {
		if !strings.Contains(page, want) {
			t.Errorf("empty report: HTML lacks %q", want)
		}
	}
	rep := &Report{
		Throughput: []Sample{{At: 0.2, Ops: 5, OpsPerSec: 25}},
		Servers:    []ServerLoad{{Addr: "a:1", HasCluster: true}},
		Latency: Latency{Count: 3, Percentiles: []Percentile{
			{Percentile: 0, Value: 0}, {Percentile: 50, Value: 800}, {Percentile: 100, Value: 800}}},
	}
	checkHTML(t, rep)
	rep.Latency.Percentiles = []Percentile{{Percentile: 50, Value: 0}}
	if page := checkHTML(t, rep); !strings.Contains(page, "No successful requests.") {
		t.Error("all-zero latencies drew a chart")
	}
}

func TestHTMLConcurrent(t *testing.T) {
	rep := syntheticReport()
	var want bytes.Buffer
	if err := rep.WriteHTML(&want); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			var got bytes.Buffer
			if err := rep.WriteHTML(&got); err != nil {
				t.Error(err)
			} else if !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Error("concurrent renders differ")
			}
		})
	}
	wg.Wait()
}

func TestShorten(t *testing.T) {
	for _, tc := range [][3]string{
		{"10.0.0.1:11211", "14", "10.0.0.1:11211"},
		{"cache-15.a-very-long-name:11211", "11", "cache…11211"},
		{"ääääääääääöööööööööö", "5", "ää…öö"},
	} {
		n, _ := strconv.Atoi(tc[1])
		if got := shorten(tc[0], n); got != tc[2] || len([]rune(got)) > n {
			t.Errorf("shorten(%q, %d) = %q, want %q", tc[0], n, got, tc[2])
		}
	}
}

func TestLinearTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		n      int
		want   string
	}{
		{0, 216000, 5, "0 50k 100k 150k 200k"},
		{0, 30, 8, "0 5 10 15 20 25 30"},
		{0.5, 1.7, 5, "0.5 1 1.5"},
		{-3, 3, 6, "-3 -2 -1 0 1 2 3"},
		{0, 1, 5, "0 0.2 0.4 0.6 0.8 1"},
	} {
		var labels []string
		for _, tk := range (linearTicks{n: tc.n, label: siLabel}).Ticks(tc.lo, tc.hi) {
			if tk.Label != "" {
				labels = append(labels, tk.Label)
			}
		}
		if got := strings.Join(labels, " "); got != tc.want {
			t.Errorf("ticks(%g, %g) = %q, want %q", tc.lo, tc.hi, got, tc.want)
		}
	}
}

func TestRoundUp(t *testing.T) {
	for _, tc := range [][2]float64{{58000, 60000}, {0, 1}, {1000, 1000}, {1001, 1500}, {2.3e6, 2.5e6}, {0.7, 0.8}} {
		if got := (linearTicks{n: 5}).roundUp(tc[0]); got != tc[1] {
			t.Errorf("roundUp(%g) = %g, want %g", tc[0], got, tc[1])
		}
	}
}

func TestLatencyTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   string
	}{
		{100, 1000, "100µs 200µs 500µs 1ms"},
		{50, 50000, "50µs 100µs 1ms 10ms 50ms"},
		{100, 20000, "100µs 200µs 500µs 1ms 2ms 5ms 10ms 20ms"},
		{100, 50000, "100µs 1ms 10ms 50ms"},
		{0.5, 2, "0.5µs 1µs 2µs"},
		{2e5, 5e6, "200ms 500ms 1s 2s 5s"},
	} {
		var labels []string
		for _, tk := range (latencyTicks{}).Ticks(tc.lo, tc.hi) {
			if tk.Label != "" {
				labels = append(labels, tk.Label)
			}
		}
		if got := strings.Join(labels, " "); got != tc.want {
			t.Errorf("ticks(%g, %g) = %q, want %q", tc.lo, tc.hi, got, tc.want)
		}
	}
	for _, tc := range [][3]float64{{240, 200, 500}, {1900, 1000, 2000}, {41000, 20000, 50000}, {1000, 1000, 1000}, {0.7, 0.5, 1}} {
		if lo, hi := niceFloor(tc[0]), niceCeil(tc[0]); lo != tc[1] || hi != tc[2] {
			t.Errorf("nice(%g) = %g, %g; want %g, %g", tc[0], lo, hi, tc[1], tc[2])
		}
	}
}
