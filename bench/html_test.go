package bench

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
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
// chart the report has data for, each well-formed XML that lays out inside
// its box, nothing fetched or run. It returns the page and its charts.
func checkHTML(t *testing.T, rep *Report) (string, []*svgNode) {
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
	for _, bad := range []string{"http://", "https://", "<script", "<link", "<img", "<iframe", "<object", "<embed",
		"src=", "href=", "@import", "@font-face", "url(", "data:", "javascript:"} {
		if strings.Contains(lower, bad) {
			i := strings.Index(lower, bad)
			t.Errorf("HTML contains %q: …%s…", bad, page[max(0, i-100):min(len(page), i+100)])
		}
	}
	if m := regexp.MustCompile(`<[^>]*\son[a-z]+\s*=`).FindString(lower); m != "" {
		t.Errorf("HTML has an event handler attribute: %s", m)
	}
	var charts []*svgNode
	for rest := page; ; {
		i := strings.Index(rest, "<svg")
		if i < 0 {
			break
		}
		j := strings.Index(rest[i:], "</svg>") + len("</svg>")
		svg := rest[i : i+j]
		rest = rest[i+j:]
		if m := regexp.MustCompile(`="[^"]*(NaN|Inf)[^"]*"`).FindString(svg); m != "" { // in an attribute, not a name
			t.Errorf("chart has a coordinate not a number: %s", m)
		}
		root, err := parseSVG(svg)
		if err != nil {
			t.Errorf("SVG is not well-formed: %v\n%.300s", err, svg)
			continue
		}
		if root.attr("font-family") != "sans-serif" {
			t.Errorf("chart %q: font-family %q, want sans-serif", root.attr("aria-label"), root.attr("font-family"))
		}
		checkLayout(t, root)
		charts = append(charts, root)
	}
	return page, charts
}

// svgNode is an element of a chart, parsed back from the page.
type svgNode struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Text    string     `xml:",chardata"`
	Kids    []*svgNode `xml:",any"`
}

func parseSVG(s string) (*svgNode, error) {
	var n svgNode
	if err := xml.Unmarshal([]byte(s), &n); err != nil {
		return nil, err
	}
	if n.XMLName.Local != "svg" {
		return nil, fmt.Errorf("root element is <%s>", n.XMLName.Local)
	}
	return &n, nil
}

func (n *svgNode) attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func (n *svgNode) num(t *testing.T, name string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(n.attr(name), 64)
	if err != nil {
		t.Errorf("<%s %s=%q>: %v", n.XMLName.Local, name, n.attr(name), err)
	}
	return v
}

// all lists the elements named name under n, in document order, with the
// fill and font size each inherits.
func (n *svgNode) all(name string) []styled {
	var out []styled
	var walk func(*svgNode, string, string)
	walk = func(e *svgNode, fill, size string) {
		fill, size = cmp.Or(e.attr("fill"), fill), cmp.Or(e.attr("font-size"), size)
		if e.XMLName.Local == name {
			out = append(out, styled{e, fill, size})
		}
		for _, k := range e.Kids {
			walk(k, fill, size)
		}
	}
	walk(n, "", "")
	return out
}

type styled struct {
	*svgNode
	fill, size string
}

// texts are the strings of n's <text> elements, in order.
func (n *svgNode) texts() []string {
	var s []string
	for _, e := range n.all("text") {
		s = append(s, e.Text)
	}
	return s
}

// checkLayout checks that every text of the chart lies inside its box and
// that no two unrotated texts overlap, by the same width estimate the
// layout uses, and that the plot area has room.
func checkLayout(t *testing.T, root *svgNode) {
	t.Helper()
	name := root.attr("aria-label")
	w, h := root.num(t, "width"), root.num(t, "height")
	if vb := fmt.Sprintf("0 0 %s %s", root.attr("width"), root.attr("height")); root.attr("viewBox") != vb {
		t.Errorf("chart %q: viewBox %q, want %q", name, root.attr("viewBox"), vb)
	}
	type box struct {
		x0, y0, x1, y1 float64
		s              string
	}
	var flat []box
	for _, e := range root.all("text") {
		size, _ := strconv.ParseFloat(e.size, 64)
		tw := textWidth(e.Text, size)
		x, y := e.num(t, "x"), e.num(t, "y")
		var dy float64
		if d := e.attr("dy"); d != "" {
			em, err := strconv.ParseFloat(strings.TrimSuffix(d, "em"), 64)
			if err != nil {
				t.Errorf("dy=%q", d)
			}
			dy = em * size
		}
		x0 := x
		switch e.attr("text-anchor") {
		case "middle":
			x0 -= tw / 2
		case "end":
			x0 -= tw
		}
		// Ascent 0.8em above the baseline, descent 0.2em below.
		corners := [][2]float64{{x0, y + dy - 0.8*size}, {x0 + tw, y + dy - 0.8*size}, {x0, y + dy + 0.2*size}, {x0 + tw, y + dy + 0.2*size}}
		rotated := false
		if tr := e.attr("transform"); tr != "" {
			var deg, cx, cy float64
			if _, err := fmt.Sscanf(tr, "rotate(%g %g %g)", &deg, &cx, &cy); err != nil {
				t.Fatalf("chart %q: transform %q: %v", name, tr, err)
			}
			rotated = true
			sin, cos := math.Sincos(deg * math.Pi / 180)
			for i, c := range corners {
				dx, dy := c[0]-cx, c[1]-cy
				corners[i] = [2]float64{cx + dx*cos - dy*sin, cy + dx*sin + dy*cos}
			}
		}
		b := box{math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1), e.Text}
		for _, c := range corners {
			b.x0, b.y0, b.x1, b.y1 = min(b.x0, c[0]), min(b.y0, c[1]), max(b.x1, c[0]), max(b.y1, c[1])
		}
		if b.x0 < 0 || b.y0 < 0 || b.x1 > w || b.y1 > h {
			t.Errorf("chart %q: text %q at [%.0f,%.0f]-[%.0f,%.0f] is outside 0 0 %g %g", name, e.Text, b.x0, b.y0, b.x1, b.y1, w, h)
		}
		if !rotated {
			for _, o := range flat {
				if b.x0 < o.x1+1 && o.x0 < b.x1+1 && b.y0 < o.y1+1 && o.y0 < b.y1+1 { // not even touching
					t.Errorf("chart %q: texts %q and %q overlap", name, o.s, b.s)
				}
			}
			flat = append(flat, b)
		}
	}
}

// plotArea is the chart's plot area, read from its axis lines (the first
// two lines of the group that strokes them): left, top, right, bottom.
func plotArea(t *testing.T, root *svgNode) (l, tp, r, b float64) {
	t.Helper()
	for _, g := range root.all("g") {
		if g.attr("stroke") == colMark && len(g.Kids) >= 2 {
			y, x := g.Kids[0], g.Kids[1]
			return y.num(t, "x1"), y.num(t, "y1"), x.num(t, "x2"), x.num(t, "y2")
		}
	}
	t.Fatalf("chart %q has no axes", root.attr("aria-label"))
	return
}

// polylines are the points of each <polyline> drawn in color.
func polylines(t *testing.T, root *svgNode, color string) [][][2]float64 {
	t.Helper()
	var lines [][][2]float64
	for _, e := range root.all("polyline") {
		if e.attr("stroke") != color {
			continue
		}
		var pts [][2]float64
		for _, p := range strings.Fields(e.attr("points")) {
			var x, y float64
			if _, err := fmt.Sscanf(p, "%g,%g", &x, &y); err != nil {
				t.Fatalf("polyline point %q: %v", p, err)
			}
			pts = append(pts, [2]float64{x, y})
		}
		lines = append(lines, pts)
	}
	return lines
}

// count is how many elements named name are filled with color.
func count(root *svgNode, name, color string) int {
	n := 0
	for _, e := range root.all(name) {
		if e.fill == color {
			n++
		}
	}
	return n
}

func TestHTMLSynthetic(t *testing.T) {
	rep := syntheticReport()
	page, charts := checkHTML(t, rep)
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
		"240.0µs / 1.90ms / 7.00ms", "timeout 12", "97.0%",
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
	if len(charts) != 3 {
		t.Fatalf("%d charts, want 3", len(charts))
	}
	thr, load, lat := charts[0], charts[1], charts[2]
	hasTexts(t, thr, "time (s)", "ops/s", "interval with errors", "hot key (20% of requests)",
		"0", "5", "10", "15", "20", "25", "30", "50k", "100k", "150k", "200k")
	hasTexts(t, load, "requests", "served as primary", "served after a spill", "mean",
		"10.0.0.1:11211", "10.0.0.2:11211", "<x>", "10.0.0.4:11211 (no stats)", "1M", "2M")
	hasTexts(t, lat, "latency", "percentile", "min", "p50", "p99.9", "p99.999", "max",
		"50µs", "100µs", "1ms", "10ms", "50ms")
	for _, c := range charts {
		if tx := strings.Join(c.texts(), "|"); strings.Contains(tx, "errors/s") {
			t.Errorf("chart %q shows errors/s, a few errors among 180k ops/s", c.attr("aria-label"))
		}
	}

	// Throughput: the ops/s line through every sample, on 0..30 s and
	// 0..200k ops/s; a triangle on each interval with errors (and one in the
	// legend); the hot key's line at 10 s.
	l, tp, r, b := plotArea(t, thr)
	px := func(v float64) float64 { return l + v/30*(r-l) }
	lines := polylines(t, thr, colPrimary)
	if len(lines) != 1 || len(lines[0]) != len(rep.Throughput) {
		t.Fatalf("throughput: %d ops/s lines, want 1 of %d points", len(lines), len(rep.Throughput))
	}
	for i, s := range rep.Throughput {
		p := lines[0][i]
		if math.Abs(p[0]-px(s.At)) > 0.06 || math.Abs(p[1]-(b-s.OpsPerSec/200000*(b-tp))) > 0.06 {
			t.Errorf("throughput: sample %d (%g s, %g ops/s) at %v", i, s.At, s.OpsPerSec, p)
		}
	}
	if n := count(thr, "path", colError); n != 3+1 {
		t.Errorf("throughput: %d error triangles, want 3 and the legend's", n)
	}
	if n := count(thr, "circle", colPrimary); n != 0 {
		t.Errorf("throughput: %d dots on 60 samples, want none", n)
	}
	hot := 0
	for _, e := range thr.all("line") {
		if e.attr("stroke-dasharray") != "" && e.attr("x1") == e.attr("x2") {
			hot++
			if x := e.num(t, "x1"); math.Abs(x-px(10)) > 0.06 || e.num(t, "y1") != tp || e.num(t, "y2") != b {
				t.Errorf("throughput: hot key line at x=%g from %s to %s, want x=%g from %g to %g", x, e.attr("y1"), e.attr("y2"), px(10), tp, b)
			}
		}
	}
	if hot != 1 {
		t.Errorf("throughput: %d hot key lines, want 1", hot)
	}

	// Load: a bar per server that has stats and served requests, primary
	// below and spilled on top, to scale on 0..2M; the mean across.
	l, tp, r, b = plotArea(t, load)
	py := func(v float64) float64 { return b - v/2e6*(b-tp) }
	var primary, spilled []styled
	for _, e := range load.all("rect") {
		if e.num(t, "height") > 9 { // not a legend key
			switch e.fill {
			case colPrimary:
				primary = append(primary, e)
			case colSpill:
				spilled = append(spilled, e)
			default:
				t.Errorf("load: a bar filled %s", e.fill)
			}
		}
	}
	if len(primary) != 3 || len(spilled) != 3 {
		t.Fatalf("load: %d primary and %d spilled bars, want 3 and 3", len(primary), len(spilled))
	}
	for i := range 3 {
		s := rep.Servers[i]
		sp, pr := primary[i], spilled[i]
		top := float64(s.SpilledServed + (s.Requests - s.SpilledServed))
		centre := l + (float64(i)+0.5)*(r-l)/4
		for _, e := range []styled{sp, pr} {
			if x := e.num(t, "x") + e.num(t, "width")/2; math.Abs(x-centre) > 0.1 {
				t.Errorf("load: server %d's bar centred at %g, want %g", i, x, centre)
			}
		}
		if y, h := sp.num(t, "y"), sp.num(t, "height"); math.Abs(y+h-b) > 0.1 || math.Abs(y-py(float64(s.Requests-s.SpilledServed))) > 0.1 {
			t.Errorf("load: server %d's primary bar from %g to %g, want %g to %g", i, y+h, y, b, py(float64(s.Requests-s.SpilledServed)))
		}
		if y, h := pr.num(t, "y"), pr.num(t, "height"); math.Abs(y+h-sp.num(t, "y")) > 0.1 || math.Abs(y-py(top)) > 0.1 {
			t.Errorf("load: server %d's spilled bar from %g to %g, want on top of the primary one up to %g", i, y+h, y, py(top))
		}
	}
	mean := 0
	for _, e := range load.all("line") {
		if e.attr("stroke-dasharray") != "" && e.attr("y1") == e.attr("y2") && e.num(t, "x2")-e.num(t, "x1") > 100 {
			mean++
			if y := e.num(t, "y1"); math.Abs(y-py(5.1e6/4)) > 0.06 {
				t.Errorf("load: mean at y=%g, want %g", y, py(5.1e6/4))
			}
		}
	}
	if mean != 1 {
		t.Errorf("load: %d mean lines, want 1", mean)
	}

	// Latency: a dot per percentile, on a log axis from 50µs to 50ms.
	l, tp, r, b = plotArea(t, lat)
	dots := lat.all("circle")
	if len(dots) != len(rep.Latency.Percentiles) {
		t.Fatalf("latency: %d dots, want %d", len(dots), len(rep.Latency.Percentiles))
	}
	for i, p := range rep.Latency.Percentiles {
		us := float64(p.Value) / 1e3
		x, y := l+(float64(i)+0.5)*(r-l)/float64(len(dots)), b-math.Log10(us/50)/3*(b-tp)
		if d := dots[i]; math.Abs(d.num(t, "cx")-x) > 0.06 || math.Abs(d.num(t, "cy")-y) > 0.06 {
			t.Errorf("latency: %s at %s,%s, want %g,%g", p.Value, d.attr("cx"), d.attr("cy"), x, y)
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

// hasTexts checks that the chart has a <text> for each of want.
func hasTexts(t *testing.T, root *svgNode, want ...string) {
	t.Helper()
	have := map[string]bool{}
	for _, s := range root.texts() {
		have[s] = true
	}
	for _, w := range want {
		if !have[w] {
			t.Errorf("chart %q lacks the text %q; has %q", root.attr("aria-label"), w, root.texts())
		}
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
	page, charts := checkHTML(t, rep)
	for _, bad := range []string{"served as primary", "errors/s", "interval with errors", "hot key", "closed loop"} {
		if strings.Contains(page, bad) {
			t.Errorf("HTML has %q", bad)
		}
	}
	if !strings.Contains(page, "open loop") || !strings.Contains(page, ">cache-15.a-very-lon…ample.internal:11211</text>") ||
		!strings.Contains(page, "cache-15.a-very-long-name.us-east-1.compute.example.internal:11211") {
		t.Error("HTML lacks the open-loop note or the last server, shortened in the chart and whole in the text")
	}
	load := charts[1]
	hasTexts(t, load, "requests", "mean", "cache-00.example.internal:11211")
	if n := count(load, "rect", colPlain); n != 16+1 {
		t.Errorf("load: %d bars in the plain colour, want 16 and the legend's", n)
	}
	for _, e := range load.all("text") {
		if strings.HasPrefix(e.Text, "cache-") && !strings.HasPrefix(e.attr("transform"), "rotate(-30 ") {
			t.Errorf("load: label %q not rotated", e.Text)
		}
	}
	for _, e := range charts[2].all("text") { // the percentiles fit side by side
		if e.attr("transform") != "" && e.Text != "latency" {
			t.Errorf("latency: label %q rotated", e.Text)
		}
	}
}

func TestHTMLEdgeCases(t *testing.T) {
	// An empty report, a single sample, zero and sub-microsecond latencies,
	// servers that served nothing, a name with quotes and a control
	// character: pages, not panics.
	page, _ := checkHTML(t, &Report{})
	for _, want := range []string{"No throughput samples.", "No server stats.", "No successful requests."} {
		if !strings.Contains(page, want) {
			t.Errorf("empty report: HTML lacks %q", want)
		}
	}
	rep := &Report{
		Throughput: []Sample{{At: 0.2, Ops: 5, OpsPerSec: 25}},
		Servers:    []ServerLoad{{Addr: "a:1", HasCluster: true}, {Addr: "q\"&'\x01<:2"}},
		Latency: Latency{Count: 3, Percentiles: []Percentile{
			{Percentile: 0, Value: 0}, {Percentile: 50, Value: 800}, {Percentile: 100, Value: 800}}},
	}
	_, charts := checkHTML(t, rep)
	if len(charts) != 3 {
		t.Fatalf("%d charts, want 3", len(charts))
	}
	if n := count(charts[0], "circle", colPrimary); n != 1 {
		t.Errorf("throughput: %d dots for one sample", n)
	}
	hasTexts(t, charts[1], "a:1", "q\"&'\uFFFD<:2")
	hasTexts(t, charts[2], "0.5µs", "1µs")
	// Latencies all on one 1-2-5 value still get an axis with a span.
	rep.Latency.Percentiles = []Percentile{{Percentile: 50, Value: time.Millisecond}}
	if _, charts := checkHTML(t, rep); len(charts) == 3 {
		hasTexts(t, charts[2], "500µs", "1ms", "2ms")
	}
	// From 40µs to 1.86s: labelled decades from 100µs to 1s, and the axis's
	// ends, 20µs and 2s, where they do not crowd a decade: 2s is a third of
	// a decade above 1s, too close.
	rep.Latency.Percentiles = []Percentile{{Percentile: 0, Value: 40 * time.Microsecond}, {Percentile: 100, Value: 1862 * time.Millisecond}}
	if _, charts := checkHTML(t, rep); len(charts) == 3 {
		hasTexts(t, charts[2], "20µs", "100µs", "1ms", "10ms", "100ms", "1s")
		if slices.Contains(charts[2].texts(), "2s") {
			t.Error("latency: the 2s end label crowds 1s")
		}
	}
	rep.Latency.Percentiles = []Percentile{{Percentile: 50, Value: 0}}
	if page, _ := checkHTML(t, rep); !strings.Contains(page, "No successful requests.") {
		t.Error("all-zero latencies drew a chart")
	}
	// A sample that is not a number cannot be drawn: an error, not a chart
	// with NaN coordinates.
	rep.Throughput = append(rep.Throughput, Sample{At: 0.4, Ops: 1, OpsPerSec: math.NaN()})
	if err := rep.WriteHTML(io.Discard); err == nil {
		t.Error("a NaN sample drew a chart")
	}
}

func TestChartLegendWraps(t *testing.T) {
	// A legend wider than the plot area takes more rows, above the plot
	// area, and still lays out inside the chart.
	var legend []legendItem
	for i := range 12 {
		legend = append(legend, legendItem{fmt.Sprintf("a series with a long name %d", i), keyLine, stroke{color: colPlain, width: 1}})
	}
	y := axis{title: "y", lo: 0, hi: 10, ticks: linearTicks{n: 5, label: siLabel}.ticks(0, 10)}
	c := newChart("legend", axis{title: "x", lo: 0, hi: 1, ticks: linearTicks{n: 5, label: siLabel}.ticks(0, 1)}, y, legend)
	c.polyline([]point{{0, 0}, {1, 10}}, stroke{color: colPrimary, width: 1})
	svg, err := c.finish()
	if err != nil {
		t.Fatal(err)
	}
	root, err := parseSVG(string(svg))
	if err != nil {
		t.Fatal(err)
	}
	checkLayout(t, root)
	if len(c.rows) < 3 {
		t.Errorf("12 long legend entries in %d rows", len(c.rows))
	}
	_, top, _, _ := plotArea(t, root)
	for _, e := range root.all("text") {
		if strings.HasPrefix(e.Text, "a series") && e.num(t, "y") > top {
			t.Errorf("legend entry %q at y=%s, below the plot area's top %g", e.Text, e.attr("y"), top)
		}
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
		for _, tk := range (linearTicks{n: tc.n, label: siLabel}).ticks(tc.lo, tc.hi) {
			if tk.label != "" {
				labels = append(labels, tk.label)
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
		for _, tk := range latencyTicks(tc.lo, tc.hi) {
			if tk.label != "" {
				labels = append(labels, tk.label)
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
