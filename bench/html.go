package bench

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
)

// The HTML report is one self-contained file: a summary table, three charts
// as inline SVG, and the text report. It has no scripts and references
// nothing outside itself. The charts are written by the small chart writer
// in svgchart.go, not a plotting library: the report is linked into the
// server binary (spillway bench), and a plotting library with the fonts it
// measures text with would add megabytes to every node's memory at start.
// Text is set in the viewer's sans-serif face, so no font is embedded.

// HTMLOptions tunes WriteHTMLOptions. The zero value is usable.
type HTMLOptions struct {
	// Title is the page title; "" means "Spillway bench".
	Title string
}

// WriteHTML writes r as a self-contained HTML page: a summary table, charts
// of throughput over time, per-server load and latency by percentile, and
// the text report. The page needs no network and runs no JavaScript.
func (r *Report) WriteHTML(w io.Writer) error { return r.WriteHTMLOptions(w, HTMLOptions{}) }

// WriteHTMLOptions is WriteHTML with options.
func (r *Report) WriteHTMLOptions(w io.Writer, o HTMLOptions) error {
	if o.Title == "" {
		o.Title = "Spillway bench"
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		return err
	}
	page := htmlPage{
		Title:    o.Title,
		Workload: r.describeWorkload(),
		Summary:  r.summaryRows(),
		Text:     text.String(),
	}
	for _, mk := range []func() (htmlChart, error){r.throughputChart, r.loadChart, r.latencyChart} {
		c, err := mk()
		if err != nil {
			return err
		}
		page.Charts = append(page.Charts, c)
	}
	return pageTmpl.Execute(w, page)
}

type htmlPage struct {
	Title    string
	Workload string
	Summary  []summaryRow
	Charts   []htmlChart
	Text     string
}

type summaryRow struct{ Name, Value, Note string }

// htmlChart is one chart section. SVG is empty when the report has no data
// for it; Empty then says so.
type htmlChart struct {
	Title, Sub, Empty string
	SVG               template.HTML
}

var pageTmpl = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body {font: 15px/1.45 sans-serif; color: #1f2328; background: #fff; margin: 0;}
main {max-width: 1000px; margin: 0 auto; padding: 1.5em 1.5em 3em;}
h1 {font-size: 1.6em; margin: 0 0 .2em;}
h2 {font-size: 1.15em; margin: 0;}
.workload {color: #57606a; margin: 0 0 1.2em;}
table.summary {border-collapse: collapse; margin-bottom: 1.5em;}
table.summary th, table.summary td {text-align: left; padding: .3em 1.2em .3em 0; border-bottom: 1px solid #d8dee4; vertical-align: baseline;}
table.summary th {font-weight: normal; color: #57606a;}
table.summary td.v {font-weight: bold; font-variant-numeric: tabular-nums;}
table.summary td.n {color: #57606a;}
section {margin: 1.8em 0 0;}
.sub {color: #57606a; margin: .1em 0 .4em; font-size: .93em;}
.empty {color: #57606a; font-style: italic;}
svg {display: block; width: 100%; height: auto;}
details {margin-top: 2em;}
summary {cursor: pointer; color: #57606a;}
pre {background: #f6f8fa; padding: 1em; overflow-x: auto; font-size: 13px;}
</style>
</head>
<body>
<main>
<h1>{{.Title}}</h1>
<p class="workload">{{.Workload}}</p>
<table class="summary">
{{range .Summary}}<tr><th scope="row">{{.Name}}</th><td class="v">{{.Value}}</td><td class="n">{{.Note}}</td></tr>
{{end}}</table>
{{range .Charts}}<section>
<h2>{{.Title}}</h2>
<p class="sub">{{.Sub}}</p>
{{if .SVG}}{{.SVG}}{{else}}<p class="empty">{{.Empty}}</p>{{end}}
</section>
{{end}}<details>
<summary>Text report</summary>
<pre>{{.Text}}</pre>
</details>
</main>
</body>
</html>
`))

// describeWorkload is the workload line of WriteText, in words.
func (r *Report) describeWorkload() string {
	wl := r.Workload
	s := fmt.Sprintf("%d server(s), entry %s, %d conns, pipeline %d, %s keys, %s, get:set %s, value %s B%s",
		len(wl.Servers), wl.Entry, wl.Conns, wl.Pipeline, commas(int64(wl.Keys)), describeSkew(wl.Zipf), wl.Ratio, wl.ValueSize, describeExtras(wl))
	if !r.Start.IsZero() {
		s += "; started " + r.Start.Format("2006-01-02 15:04:05 MST")
	}
	return s + fmt.Sprintf(", %.2fs measured.", r.Elapsed)
}

func (r *Report) summaryRows() []summaryRow {
	const none = "–"
	rows := []summaryRow{{"Throughput", commas(int64(r.OpsPerSec+0.5)) + " ops/s",
		fmt.Sprintf("%s ops: %s gets, %s sets", commas(r.Ops), commas(r.Gets), commas(r.Sets))}}
	hit := summaryRow{Name: "Hit ratio", Value: none}
	if r.Gets > 0 {
		hit.Value = fmt.Sprintf("%.1f%%", 100*r.HitRatio)
		hit.Note = fmt.Sprintf("%s hits, %s misses", commas(r.Hits), commas(r.Misses))
	}
	rows = append(rows, hit)
	l := r.Latency
	lat := summaryRow{Name: "Latency p50 / p99 / p99.9", Value: none}
	if l.Count > 0 {
		lat.Value = fmtLatency(l.P50) + " / " + fmtLatency(l.P99) + " / " + fmtLatency(l.P999)
		lat.Note = "max " + fmtLatency(l.Max) + ", mean " + fmtLatency(l.Mean)
	}
	rows = append(rows, lat)
	load := summaryRow{Name: "Load max/mean", Value: none}
	if len(r.Servers) > 0 {
		load.Value = strconv.FormatFloat(r.Load.MaxMean, 'f', 2, 64)
		load.Note = fmt.Sprintf("hottest %s (%.1f%%)", r.Load.Hottest, 100*r.Load.HottestShare)
		if r.Load.SpillShare > 0 {
			load.Note += fmt.Sprintf(", spill %.1f%%", 100*r.Load.SpillShare)
		}
	}
	rows = append(rows, load)
	errs := summaryRow{Name: "Errors", Value: commas(r.ErrorCount)}
	if r.ErrorCount > 0 {
		errs.Note = describeErrors(r.Errors)
	}
	return append(rows, errs)
}

// throughputChart: finished requests per second over the run, and errors.
func (r *Report) throughputChart() (htmlChart, error) {
	c := htmlChart{Title: "Throughput", Sub: "Requests finished per second, by sampling interval.",
		Empty: "No throughput samples."}
	if len(r.Throughput) == 0 {
		return c, nil
	}
	ops := make([]point, len(r.Throughput))
	errs := make([]point, len(r.Throughput))
	var errAt []point // intervals with errors, on the ops/s line
	top, topErr, end := 0.0, 0.0, 0.0
	for i, s := range r.Throughput {
		e := 0.0
		if s.Ops > 0 {
			e = s.OpsPerSec * float64(s.Errors) / float64(s.Ops)
		}
		ops[i], errs[i] = point{s.At, s.OpsPerSec}, point{s.At, e}
		if s.Errors > 0 {
			errAt = append(errAt, ops[i])
		}
		top, topErr, end = max(top, s.OpsPerSec), max(topErr, e), max(end, s.At)
	}
	wl := r.Workload
	hot := wl.HotShare > 0 && wl.HotKeyAt > 0
	if hot {
		end = max(end, wl.HotKeyAt)
	}
	if !(end > 0) {
		end = 1
	}
	yMax := linearTicks{n: 6}.roundUp(1.05 * top) // the top point clear of the frame
	x := axis{title: "time (s)", lo: 0, hi: end, ticks: linearTicks{n: 8, label: siLabel}.ticks(0, end)}
	y := axis{title: "ops/s", lo: 0, hi: yMax, ticks: linearTicks{n: 6, label: siLabel}.ticks(0, yMax)}

	opsLine := stroke{color: colPrimary, width: 1.6}
	errLine := stroke{color: colError, width: 1.2}
	hotLine := stroke{color: colMark, width: 1, dash: "4 3"}
	legend := []legendItem{{"ops/s", keyLine, opsLine}}
	showErrs := topErr > 0 && topErr >= top/50 // errors/s would show on this scale
	if showErrs {
		legend = append(legend, legendItem{"errors/s", keyLine, errLine})
	}
	if len(errAt) > 0 {
		legend = append(legend, legendItem{"interval with errors", keyTriangle, stroke{color: colError}})
	}
	if hot {
		legend = append(legend, legendItem{fmt.Sprintf("hot key (%.0f%% of requests)", 100*wl.HotShare), keyLine, hotLine})
	}

	ch := newChart("Throughput over time", x, y, legend)
	if hot {
		ch.vline(wl.HotKeyAt, hotLine)
	}
	ch.polyline(ops, opsLine)
	if len(ops) < 40 { // few samples: show where they are
		ch.dots(ops, 2, colPrimary)
	}
	if showErrs {
		ch.polyline(errs, errLine)
	}
	ch.triangles(errAt, 4, colError)
	var err error
	c.SVG, err = ch.finish()
	return c, err
}

// loadChart: requests each server served during the run, from its own
// stats, as a bar per server. Spillway servers split them into served as
// primary and served after a spill, stacked; others (memcached) count
// cmd_get + cmd_set.
func (r *Report) loadChart() (htmlChart, error) {
	c := htmlChart{Title: "Load per server",
		Sub:   fmt.Sprintf("Requests each server served, from its stats. Max/mean %.2f.", r.Load.MaxMean),
		Empty: "No server stats."}
	n := len(r.Servers)
	if n == 0 {
		return c, nil
	}
	primary := make([]float64, n)
	spilled := make([]float64, n)
	plain := make([]float64, n)
	names := make([]string, n)
	var total, top float64
	var anyCluster, anyPlain, anySpill bool
	for i, s := range r.Servers {
		names[i] = shorten(s.Addr, 40)
		if s.Err != "" {
			names[i] += " (no stats)"
		}
		if s.HasCluster {
			sp := min(s.SpilledServed, s.Requests)
			primary[i], spilled[i] = float64(s.Requests-sp), float64(sp)
			anyCluster, anySpill = true, anySpill || sp > 0
		} else if s.Err == "" {
			plain[i] = float64(s.Requests)
			anyPlain = true
		}
		total += float64(s.Requests)
		top = max(top, float64(s.Requests))
	}

	// The layers of each bar, bottom up.
	type layer struct {
		vals []float64
		key  legendItem
	}
	var layers []layer
	if anyCluster {
		layers = append(layers, layer{primary, legendItem{"served as primary", keyBox, stroke{color: colPrimary}}})
		if anySpill {
			layers = append(layers, layer{spilled, legendItem{"served after a spill", keyBox, stroke{color: colSpill}}})
		}
	}
	if anyPlain || !anyCluster {
		name := "requests"
		if anyCluster {
			name = "requests (cmd_get + cmd_set)"
		}
		layers = append(layers, layer{plain, legendItem{name, keyBox, stroke{color: colPlain}}})
	}
	var legend []legendItem
	for _, l := range layers {
		legend = append(legend, l.key)
	}
	meanLine := stroke{color: colMark, width: 1, dash: "4 3"}
	if total > 0 {
		legend = append(legend, legendItem{"mean", keyLine, meanLine})
	}

	yMax := linearTicks{n: 6}.roundUp(1.05 * top)
	y := axis{title: "requests", lo: 0, hi: yMax, ticks: linearTicks{n: 6, label: siLabel}.ticks(0, yMax)}
	ch := newChart("Load per server", categoryAxis("", names), y, legend)
	width := min(48, 0.6*ch.band())
	for i := range n {
		y0 := 0.0
		for _, l := range layers {
			if v := l.vals[i]; v > 0 {
				ch.bar(float64(i), width, y0, y0+v, l.key.stroke.color)
				y0 += v
			}
		}
	}
	if total > 0 {
		ch.hline(total/float64(n), meanLine)
	}
	var err error
	c.SVG, err = ch.finish()
	return c, err
}

// shorten cuts s to at most n runes by eliding its middle, keeping the
// start and the end (the port), where names usually differ.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	head := (n - 1) / 2
	return string(r[:head]) + "…" + string(r[len(r)-(n-1-head):])
}

// latencyChart: the latency percentile spectrum, one point per percentile
// on a log axis in microseconds.
func (r *Report) latencyChart() (htmlChart, error) {
	c := htmlChart{Title: "Latency by percentile", Empty: "No successful requests."}
	if r.Workload.Rate > 0 {
		c.Sub = "Latency of successful requests from their scheduled send time (open loop); log scale."
	} else {
		c.Sub = "Latency of successful requests from when they were issued (closed loop); log scale."
	}
	var pts []point
	names := make([]string, len(r.Latency.Percentiles))
	for i, pc := range r.Latency.Percentiles {
		switch pc.Percentile {
		case 0:
			names[i] = "min"
		case 100:
			names[i] = "max"
		default:
			names[i] = "p" + strconv.FormatFloat(pc.Percentile, 'g', -1, 64)
		}
		if pc.Value > 0 { // a log axis has no place for 0
			pts = append(pts, point{float64(i), float64(pc.Value.Nanoseconds()) / 1e3})
		}
	}
	if r.Latency.Count == 0 || len(pts) == 0 {
		return c, nil
	}
	lo, hi := math.Inf(1), 0.0
	for _, p := range pts {
		lo, hi = min(lo, p.y), max(hi, p.y)
	}
	lo, hi = niceFloor(lo), niceCeil(hi)
	if hi <= lo { // all at one 1-2-5 value: a step either side
		lo, hi = niceFloor(lo*0.9), niceCeil(hi*1.1)
	}
	y := axis{title: "latency", lo: lo, hi: hi, log: true, ticks: latencyTicks(lo, hi)}
	ch := newChart("Latency by percentile", categoryAxis("percentile", names), y, nil)
	ch.polyline(pts, stroke{color: colPrimary, width: 1.6})
	ch.dots(pts, 2.5, colPrimary)
	var err error
	c.SVG, err = ch.finish()
	return c, err
}

// linearTicks mark a linear axis at a 1-2-5 step that gives at most about
// n labels, with an unlabelled tick half way.
type linearTicks struct {
	n     int
	label func(float64) string
}

// ticks are the ticks from lo to hi.
func (t linearTicks) ticks(lo, hi float64) []tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return nil
	}
	half := niceCeil((hi-lo)/float64(t.n)) / 2
	var ts []tick
	for k := math.Ceil(lo/half - 1e-9); k <= math.Floor(hi/half+1e-9); k++ {
		tk := tick{value: k*half + 0} // + 0: no "-0"
		if math.Mod(k, 2) == 0 {
			tk.label = t.label(tk.value)
		}
		ts = append(ts, tk)
	}
	return ts
}

func siLabel(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return strconv.FormatFloat(v/1e9, 'g', 4, 64) + "G"
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 4, 64) + "M"
	case a >= 1e3:
		return strconv.FormatFloat(v/1e3, 'g', 4, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
}

// roundUp is the first labelled tick at or above v > 0 on an axis from 0,
// or 1 if v is not positive.
func (t linearTicks) roundUp(v float64) float64 {
	if !(v > 0) {
		return 1
	}
	step := niceCeil(v / float64(t.n))
	return step * math.Ceil(v/step-1e-9)
}

// latencyTicks mark a log axis in microseconds from lo to hi: 1-2-5 steps
// labelled when the axis spans few decades, else labelled decades with
// unlabelled 2..9.
func latencyTicks(lo, hi float64) []tick {
	if lo <= 0 || hi <= lo {
		return nil
	}
	few := math.Log10(hi/lo) <= 2.5
	var ts []tick
	for dec := math.Pow10(int(math.Floor(math.Log10(lo)))); dec <= hi; dec *= 10 {
		for m := 1; m <= 9; m++ {
			v := dec * float64(m)
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := tick{value: v}
			// The axis ends on 1-2-5 values (niceFloor, niceCeil): label them too.
			end := math.Abs(v/lo-1) < 1e-9 || math.Abs(v/hi-1) < 1e-9
			if m == 1 || (few || end) && (m == 2 || m == 5) {
				t.label = fmtMicros(v)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// fmtMicros labels a latency given in microseconds: 500µs, 2ms, 1.5s.
func fmtMicros(us float64) string {
	switch {
	case us < 1e3:
		return strconv.FormatFloat(us, 'g', 3, 64) + "µs"
	case us < 1e6:
		return strconv.FormatFloat(us/1e3, 'g', 3, 64) + "ms"
	default:
		return strconv.FormatFloat(us/1e6, 'g', 3, 64) + "s"
	}
}

// niceFloor and niceCeil round v > 0 down or up to a 1-2-5 step.
func niceFloor(v float64) float64 {
	dec := math.Pow10(int(math.Floor(math.Log10(v))))
	for _, m := range []float64{5, 2, 1} {
		if dec*m <= v {
			return dec * m
		}
	}
	return dec
}

func niceCeil(v float64) float64 {
	dec := math.Pow10(int(math.Floor(math.Log10(v))))
	for _, m := range []float64{1, 2, 5, 10} {
		if dec*m >= v*(1-1e-12) {
			return dec * m
		}
	}
	return 10 * dec
}
