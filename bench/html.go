package bench

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html"
	"html/template"
	"image/color"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/image/font/sfnt"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The HTML report is one self-contained file: a summary table, three charts
// drawn with gonum.org/v1/plot as inline SVG, and the text report. It has no
// scripts and references nothing outside itself. gonum/plot lays text out
// with the metrics of its built-in Liberation fonts, so the one face the
// charts use, Liberation Sans, is embedded once in the page's stylesheet as
// a data: URL (about 550 kB) rather than in each SVG.

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
		if c.SVG != "" && page.FontFace == "" {
			if page.FontFace, err = chartFontCSS(); err != nil {
				return err
			}
		}
	}
	return pageTmpl.Execute(w, page)
}

type htmlPage struct {
	Title    string
	Workload string
	Summary  []summaryRow
	Charts   []htmlChart
	Text     string
	FontFace template.CSS // the charts' font, if there are charts
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
{{.FontFace}}
body {font: 15px/1.45 "Liberation Sans", Arial, Helvetica, sans-serif; color: #1f2328; background: #fff; margin: 0;}
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

// Chart geometry, in points; the page scales the SVG to its width.
const (
	chartW = 720
	chartH = 260
)

var (
	// chartFont is what every chart's text is set in.
	chartFont = font.Font{Typeface: "Liberation", Variant: "Sans"}

	colPrimary = color.RGBA{0x31, 0x6d, 0xc2, 0xff} // blue
	colSpill   = color.RGBA{0xf0, 0x8c, 0x2e, 0xff} // orange
	colPlain   = color.RGBA{0x6e, 0x8f, 0xb8, 0xff} // grey-blue
	colError   = color.RGBA{0xcf, 0x22, 0x2e, 0xff} // red
	colMark    = color.RGBA{0x57, 0x60, 0x6a, 0xff} // grey
	colGrid    = color.RGBA{0xd8, 0xde, 0xe4, 0xff}
)

// chartFontCSS is the @font-face rule that embeds chartFont, under the
// family name the SVG backend writes in each text element's style.
var chartFontCSS = sync.OnceValues(func() (template.CSS, error) {
	face := font.DefaultCache.Lookup(chartFont, 10)
	if face.Face == nil {
		return "", fmt.Errorf("bench: font %s not available", chartFont.Name())
	}
	var buf sfnt.Buffer
	family, err := face.Face.Name(&buf, sfnt.NameIDFamily)
	if err != nil {
		return "", fmt.Errorf("bench: font family: %w", err)
	}
	var ttf bytes.Buffer
	if _, err := face.Face.WriteSourceTo(&buf, &ttf); err != nil {
		return "", fmt.Errorf("bench: font data: %w", err)
	}
	if strings.ContainsAny(family, `"\<>`) {
		return "", fmt.Errorf("bench: unexpected font family name %q", family)
	}
	return template.CSS(`@font-face {font-family: "` + family + `"; font-style: normal; font-weight: normal; src: url(data:font/ttf;base64,` +
		base64.StdEncoding.EncodeToString(ttf.Bytes()) + `) format("truetype");}`), nil
})

// newPlot is a plot styled for the page: sans-serif text, light grid, no
// title (the page has headings).
func newPlot(xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	for _, st := range []*font.Font{&p.X.Label.TextStyle.Font, &p.Y.Label.TextStyle.Font,
		&p.X.Tick.Label.Font, &p.Y.Tick.Label.Font, &p.Legend.TextStyle.Font} {
		size := st.Size
		*st = chartFont
		st.Size = size
	}
	p.X.Label.TextStyle.Font.Size = vg.Points(11)
	p.Y.Label.TextStyle.Font.Size = vg.Points(11)
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.X.Label.Text, p.Y.Label.Text = xLabel, yLabel
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Color = colMark
		a.Tick.Color = colMark
		a.Tick.Label.Color = color.RGBA{0x30, 0x36, 0x3d, 0xff}
	}
	p.Legend.Top = true
	p.Legend.ThumbnailWidth = vg.Points(16)
	p.Legend.Padding = vg.Points(2)
	return p
}

// grid draws horizontal grid lines at the major Y ticks.
func grid() *plotter.Grid {
	return &plotter.Grid{Horizontal: draw.LineStyle{Color: colGrid, Width: vg.Points(0.6)}}
}

// renderSVG draws p and returns it as an <svg> element for inlining: the
// XML prolog and namespace declarations are dropped (HTML does not need
// them), and the size becomes a viewBox the page's CSS scales.
func renderSVG(p *plot.Plot, label string) (_ template.HTML, err error) {
	defer func() {
		// gonum/plot reports some impossible inputs by panicking; a report
		// writer should fail, not bring down a finished run.
		if e := recover(); e != nil {
			err = fmt.Errorf("bench: drawing chart %q: %v", label, e)
		}
	}()
	c := vgsvg.New(chartW, chartH)
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return "", err
	}
	s := buf.String()
	i := strings.Index(s, "<svg")
	if i < 0 {
		return "", fmt.Errorf("bench: no <svg> in rendered chart %q", label)
	}
	j := strings.IndexByte(s[i:], '>')
	if j < 0 {
		return "", fmt.Errorf("bench: unterminated <svg> in rendered chart %q", label)
	}
	// Every string drawn (server addresses included) was escaped by vgsvg's
	// FillString, so the body is safe markup.
	head := fmt.Sprintf(`<svg width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`,
		chartW, chartH, chartW, chartH, html.EscapeString(label))
	return template.HTML(head + strings.TrimSpace(s[i+j+1:])), nil
}

// throughputChart: finished requests per second over the run, and errors.
func (r *Report) throughputChart() (htmlChart, error) {
	c := htmlChart{Title: "Throughput", Sub: "Requests finished per second, by sampling interval.",
		Empty: "No throughput samples."}
	if len(r.Throughput) == 0 {
		return c, nil
	}
	ops := make(plotter.XYs, len(r.Throughput))
	errs := make(plotter.XYs, len(r.Throughput))
	var errAt plotter.XYs // intervals with errors, on the ops/s line
	top, topErr := 0.0, 0.0
	for i, s := range r.Throughput {
		e := 0.0
		if s.Ops > 0 {
			e = s.OpsPerSec * float64(s.Errors) / float64(s.Ops)
		}
		ops[i] = plotter.XY{X: s.At, Y: s.OpsPerSec}
		errs[i] = plotter.XY{X: s.At, Y: e}
		if s.Errors > 0 {
			errAt = append(errAt, ops[i])
		}
		top, topErr = max(top, s.OpsPerSec), max(topErr, e)
	}
	p := newPlot("time (s)", "ops/s")
	p.Add(grid())
	p.X.Tick.Marker = linearTicks{n: 8, label: siLabel}
	p.Y.Tick.Marker = linearTicks{n: 6, label: siLabel}
	p.Y.Min = 0
	p.Y.Max = linearTicks{n: 6}.roundUp(1.2 * top) // headroom for the legend
	opsLine, err := plotter.NewLine(ops)
	if err != nil {
		return c, err
	}
	opsLine.Color, opsLine.Width = colPrimary, vg.Points(1.6)
	p.Add(opsLine)
	p.Legend.Add("ops/s", opsLine)
	if len(ops) < 40 { // few samples: show where they are
		pts, err := plotter.NewScatter(ops)
		if err != nil {
			return c, err
		}
		pts.Color, pts.Radius, pts.Shape = colPrimary, vg.Points(2), draw.CircleGlyph{}
		p.Add(pts)
	}
	if topErr >= top/50 { // errors/s would show on this scale
		errLine, err := plotter.NewLine(errs)
		if err != nil {
			return c, err
		}
		errLine.Color, errLine.Width = colError, vg.Points(1.2)
		p.Add(errLine)
		p.Legend.Add("errors/s", errLine)
	}
	if len(errAt) > 0 {
		marks, err := plotter.NewScatter(errAt)
		if err != nil {
			return c, err
		}
		marks.Color, marks.Radius, marks.Shape = colError, vg.Points(4), draw.PyramidGlyph{}
		p.Add(marks)
		p.Legend.Add("interval with errors", marks)
	}
	if wl := r.Workload; wl.HotShare > 0 && wl.HotKeyAt > 0 {
		hot, err := plotter.NewLine(plotter.XYs{{X: wl.HotKeyAt, Y: 0}, {X: wl.HotKeyAt, Y: p.Y.Max}})
		if err != nil {
			return c, err
		}
		hot.Color, hot.Dashes, hot.Width = colMark, []vg.Length{vg.Points(4), vg.Points(3)}, vg.Points(1)
		p.Add(hot)
		p.Legend.Add(fmt.Sprintf("hot key (%.0f%% of requests)", 100*wl.HotShare), hot)
	}
	p.X.Min = 0
	c.SVG, err = renderSVG(p, "Throughput over time")
	return c, err
}

// loadChart: requests each server served during the run, from its own
// stats. Spillway servers split them into served as primary and served
// after a spill; others (memcached) count cmd_get + cmd_set.
func (r *Report) loadChart() (htmlChart, error) {
	c := htmlChart{Title: "Load per server",
		Sub:   fmt.Sprintf("Requests each server served, from its stats. Max/mean %.2f.", r.Load.MaxMean),
		Empty: "No server stats."}
	n := len(r.Servers)
	if n == 0 {
		return c, nil
	}
	primary := make(plotter.Values, n)
	spilled := make(plotter.Values, n)
	plain := make(plotter.Values, n)
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
	p := newPlot("", "requests")
	p.Add(grid())
	p.NominalX(names...)
	p.Y.Padding = 0 // NominalX pads by half the first label; X.Min = -0.5 leaves room
	p.Y.Tick.Marker = linearTicks{n: 6, label: siLabel}
	rotate := !fitsLabels(p, names)
	if rotate {
		p.X.Tick.Label.Rotation = math.Pi / 6
		p.X.Tick.Label.XAlign = draw.XRight
		p.X.Tick.Label.YAlign = draw.YCenter
	} else {
		p.X.Tick.Label.XAlign = draw.XCenter
	}
	width := vg.Length(min(48.0, 0.6*(chartW-90)/float64(n)))
	var below *plotter.BarChart
	stack := func(vals plotter.Values, col color.Color, name string) error {
		b, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return err
		}
		b.Color, b.LineStyle.Width = col, 0
		if below != nil {
			b.StackOn(below)
		}
		below = b
		p.Add(b)
		p.Legend.Add(name, b)
		return nil
	}
	if anyCluster {
		if err := stack(primary, colPrimary, "served as primary"); err != nil {
			return c, err
		}
		if anySpill {
			if err := stack(spilled, colSpill, "served after a spill"); err != nil {
				return c, err
			}
		}
	}
	if anyPlain || !anyCluster {
		name := "requests"
		if anyCluster {
			name = "requests (cmd_get + cmd_set)"
		}
		if err := stack(plain, colPlain, name); err != nil {
			return c, err
		}
	}
	if total > 0 {
		mean := total / float64(n)
		m, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: mean}, {X: float64(n) - 0.5, Y: mean}})
		if err != nil {
			return c, err
		}
		m.Color, m.Dashes, m.Width = colMark, []vg.Length{vg.Points(4), vg.Points(3)}, vg.Points(1)
		p.Add(m)
		p.Legend.Add("mean", m)
	}
	p.X.Min, p.X.Max = -0.5, float64(n)-0.5
	p.Y.Min = 0
	p.Y.Max = linearTicks{n: 6}.roundUp(1.25 * top) // headroom for the legend
	if rotate {
		// gonum/plot does not pad for X tick labels reaching left of the
		// Y axis: move the first bar right until its label fits.
		lb := p.X.Tick.Label
		reach := lb.Width(names[0])*vg.Length(math.Cos(lb.Rotation)) + lb.Height(names[0])*vg.Length(math.Sin(lb.Rotation))/2
		axis := p.Y.Label.TextStyle.Height(p.Y.Label.Text) + p.Y.Label.Padding + p.Y.Tick.Length
		for _, t := range p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max) {
			axis = max(axis, p.Y.Label.TextStyle.Height(p.Y.Label.Text)+p.Y.Label.Padding+p.Y.Tick.Length+p.Y.Tick.Label.Width(t.Label))
		}
		p.Y.Padding = max(0, reach-axis)
	}
	var err error
	c.SVG, err = renderSVG(p, "Load per server")
	return c, err
}

// fitsLabels reports whether the category labels fit side by side
// unrotated under the plot.
func fitsLabels(p *plot.Plot, names []string) bool {
	room := vg.Length(chartW-90) / vg.Length(len(names))
	for _, s := range names {
		if p.X.Tick.Label.Width(s) > 0.9*room {
			return false
		}
	}
	return true
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

// latencyChart: the latency percentile spectrum on a log axis.
func (r *Report) latencyChart() (htmlChart, error) {
	c := htmlChart{Title: "Latency by percentile", Empty: "No successful requests."}
	if r.Workload.Rate > 0 {
		c.Sub = "Latency of successful requests from their scheduled send time (open loop); log scale."
	} else {
		c.Sub = "Latency of successful requests from when they were issued (closed loop); log scale."
	}
	var xys plotter.XYs
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
			xys = append(xys, plotter.XY{X: float64(i), Y: float64(pc.Value.Nanoseconds()) / 1e3})
		}
	}
	if r.Latency.Count == 0 || len(xys) == 0 {
		return c, nil
	}
	p := newPlot("percentile", "latency")
	p.Add(grid())
	p.NominalX(names...)
	p.Y.Padding = 0
	p.X.Tick.Label.XAlign = draw.XCenter
	p.Y.Scale = plot.LogScale{}
	lo, hi := math.Inf(1), 0.0
	for _, pt := range xys {
		lo, hi = min(lo, pt.Y), max(hi, pt.Y)
	}
	p.Y.Tick.Marker = latencyTicks{}
	line, pts, err := plotter.NewLinePoints(xys)
	if err != nil {
		return c, err
	}
	line.Color, line.Width = colPrimary, vg.Points(1.6)
	pts.Color, pts.Radius, pts.Shape = colPrimary, vg.Points(2.5), draw.CircleGlyph{}
	p.Add(line, pts)
	p.X.Min, p.X.Max = -0.5, float64(len(names))-0.5
	p.Y.Min, p.Y.Max = niceFloor(lo), niceCeil(hi) // Add widened them to the data
	c.SVG, err = renderSVG(p, "Latency by percentile")
	return c, err
}

// linearTicks mark a linear axis at a 1-2-5 step that gives at most about
// n labels, with an unlabelled tick half way.
type linearTicks struct {
	n     int
	label func(float64) string
}

func (t linearTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return nil
	}
	half := niceCeil((hi-lo)/float64(t.n)) / 2
	var ts []plot.Tick
	for k := math.Ceil(lo/half - 1e-9); k <= math.Floor(hi/half+1e-9); k++ {
		tk := plot.Tick{Value: k*half + 0} // + 0: no "-0"
		if math.Mod(k, 2) == 0 {
			tk.Label = t.label(tk.Value)
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

// latencyTicks mark a log axis in microseconds: 1-2-5 steps labelled when
// the axis spans few decades, else labelled decades with unlabelled 2..9.
type latencyTicks struct{}

func (latencyTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		return nil
	}
	few := math.Log10(hi/lo) <= 2.5
	var ts []plot.Tick
	for dec := math.Pow10(int(math.Floor(math.Log10(lo)))); dec <= hi; dec *= 10 {
		for m := 1; m <= 9; m++ {
			v := dec * float64(m)
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			// The axis ends on 1-2-5 values (niceFloor, niceCeil): label them too.
			end := math.Abs(v/lo-1) < 1e-9 || math.Abs(v/hi-1) < 1e-9
			if m == 1 || (few || end) && (m == 2 || m == 5) {
				t.Label = fmtMicros(v)
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
