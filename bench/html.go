package bench

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"strconv"

	"github.com/go-echarts/go-echarts/v2/charts"
	"github.com/go-echarts/go-echarts/v2/opts"
	"github.com/go-echarts/go-echarts/v2/render"
)

// EChartsCDN is where the HTML report loads ECharts from unless
// HTMLOptions.EChartsJS is given: go-echarts' own asset host. go-echarts
// v2.6.7 ships no JavaScript of its own, only this reference.
const EChartsCDN = "https://go-echarts.github.io/go-echarts-assets/assets/echarts.min.js"

// HTMLOptions tunes WriteHTMLOptions. The zero value is usable.
type HTMLOptions struct {
	// Title is the page title; "" means "Spillway bench".
	Title string
	// EChartsJS, if set, is the ECharts library (echarts.min.js) inlined
	// into the page, which then needs no network to render. If nil, the
	// page references EChartsCDN.
	EChartsJS []byte
}

// WriteHTML writes r as an HTML page with the text report and charts of
// throughput over time, per-server load and the latency spectrum. ECharts
// is loaded from EChartsCDN; see WriteHTMLOptions for a page that works
// offline.
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
	page := htmlPage{Title: o.Title, Text: text.String(), CDN: EChartsCDN}
	if o.EChartsJS != nil {
		// Inlined verbatim: it is the caller's trusted library file. A
		// "</script" inside it would end the element early; minified
		// ECharts has none, and we refuse rather than emit a broken page.
		if bytes.Contains(bytes.ToLower(o.EChartsJS), []byte("</script")) {
			return fmt.Errorf("bench: EChartsJS contains </script")
		}
		page.InlineJS = template.HTML("<script>" + string(o.EChartsJS) + "</script>")
	}
	for _, c := range []render.Renderer{r.throughputChart(), r.loadChart(), r.latencyChart()} {
		if c == nil {
			continue
		}
		sn := c.RenderSnippet()
		// go-echarts renders these with html/template; they are trusted markup.
		page.Charts = append(page.Charts, template.HTML(sn.Element+sn.Script))
	}
	return pageTmpl.Execute(w, page)
}

type htmlPage struct {
	Title    string
	Text     string
	CDN      string
	InlineJS template.HTML
	Charts   []template.HTML
}

var pageTmpl = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html>
<head>
<meta charset="utf-8">
<title>{{.Title}}</title>
{{if .InlineJS}}{{.InlineJS}}{{else}}<script src="{{.CDN}}"></script>{{end}}
<style>
body {font-family: sans-serif; margin: 2em;}
pre {background: #f6f8fa; padding: 1em; overflow-x: auto;}
.container {margin-top: 30px; display: flex; justify-content: center; align-items: center;}
.item {margin: auto;}
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<pre>{{.Text}}</pre>
{{range .Charts}}{{.}}
{{end}}
</body>
</html>
`))

func chartInit(title, subtitle string) []charts.GlobalOpts {
	return []charts.GlobalOpts{
		charts.WithInitializationOpts(opts.Initialization{Width: "960px", Height: "420px"}),
		charts.WithTitleOpts(opts.Title{Title: title, Subtitle: subtitle}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "axis"}),
		charts.WithLegendOpts(opts.Legend{Show: opts.Bool(true), Right: "10%"}),
		charts.WithAnimation(false),
	}
}

// throughputChart: completed requests per second over the run, and errors.
func (r *Report) throughputChart() render.Renderer {
	if len(r.Throughput) == 0 {
		return nil
	}
	c := charts.NewLine()
	c.SetGlobalOptions(append(chartInit("Throughput", "requests finished per second, by sampling interval"),
		charts.WithXAxisOpts(opts.XAxis{Name: "s"}),
		charts.WithYAxisOpts(opts.YAxis{Name: "ops/s"}))...)
	x := make([]string, len(r.Throughput))
	ops := make([]opts.LineData, len(r.Throughput))
	errs := make([]opts.LineData, len(r.Throughput))
	for i, s := range r.Throughput {
		x[i] = strconv.FormatFloat(s.At, 'f', 1, 64)
		ops[i] = opts.LineData{Value: int64(s.OpsPerSec + 0.5)}
		e := 0.0
		if s.Ops > 0 {
			e = s.OpsPerSec * float64(s.Errors) / float64(s.Ops)
		}
		errs[i] = opts.LineData{Value: int64(e + 0.5)}
	}
	c.SetXAxis(x).
		AddSeries("ops/s", ops, charts.WithLineChartOpts(opts.LineChart{ShowSymbol: opts.Bool(false)})).
		AddSeries("errors/s", errs, charts.WithLineChartOpts(opts.LineChart{ShowSymbol: opts.Bool(false)}))
	return c
}

// loadChart: requests each server served during the run; for Spillway,
// split into served as primary and served after a spill.
func (r *Report) loadChart() render.Renderer {
	if len(r.Servers) == 0 {
		return nil
	}
	c := charts.NewBar()
	sub := fmt.Sprintf("from each server's stats; max/mean %.2f", r.Load.MaxMean)
	c.SetGlobalOptions(append(chartInit("Load per server", sub),
		charts.WithYAxisOpts(opts.YAxis{Name: "requests"}))...)
	x := make([]string, len(r.Servers))
	primary := make([]opts.BarData, len(r.Servers))
	spilled := make([]opts.BarData, len(r.Servers))
	origin := make([]opts.BarData, len(r.Servers))
	cluster := false
	for i, s := range r.Servers {
		x[i] = s.Addr
		primary[i] = opts.BarData{Value: s.Requests - min(s.SpilledServed, s.Requests)}
		spilled[i] = opts.BarData{Value: s.SpilledServed}
		origin[i] = opts.BarData{Value: s.OriginFetches}
		cluster = cluster || s.HasCluster
	}
	c.SetXAxis(x)
	if !cluster {
		c.AddSeries("requests (cmd_get + cmd_set)", primary)
		return c
	}
	stack := charts.WithBarChartOpts(opts.BarChart{Stack: "served"})
	c.AddSeries("served as primary", primary, stack).
		AddSeries("served after spill", spilled, stack).
		AddSeries("origin calls", origin)
	return c
}

// latencyChart: the latency percentile spectrum on a log axis.
func (r *Report) latencyChart() render.Renderer {
	if r.Latency.Count == 0 {
		return nil
	}
	c := charts.NewLine()
	sub := "from scheduled send time (open loop)"
	if r.Workload.Rate == 0 {
		sub = "from request issue (closed loop)"
	}
	c.SetGlobalOptions(append(chartInit("Latency by percentile", sub),
		charts.WithXAxisOpts(opts.XAxis{Name: "percentile"}),
		charts.WithYAxisOpts(opts.YAxis{Name: "µs", Type: "log"}))...)
	x := make([]string, len(r.Latency.Percentiles))
	y := make([]opts.LineData, len(r.Latency.Percentiles))
	for i, p := range r.Latency.Percentiles {
		x[i] = "p" + strconv.FormatFloat(p.Percentile, 'g', -1, 64)
		y[i] = opts.LineData{Value: float64(p.Value.Nanoseconds()) / 1e3}
	}
	c.SetXAxis(x).AddSeries("latency", y)
	return c
}
