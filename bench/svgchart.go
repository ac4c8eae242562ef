package bench

import (
	"encoding/xml"
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
)

// A small writer of SVG charts for the HTML report: a plot area with a Y
// axis on the left and an X axis below (linear, log10 or categories),
// horizontal gridlines at the labelled Y ticks, a legend above the plot
// area, and lines, dots, triangles and bars placed in data coordinates.
//
// The text is set in the viewer's sans-serif face, so the writer cannot
// measure it: where the layout depends on a label's width (the margins,
// whether category labels must be rotated, the legend's rows) it uses
// textWidth, an estimate that leans wide.
//
// Usage: newChart lays the chart out and draws the gridlines, the marks
// follow in drawing order (later on top), and finish draws the axes and the
// legend over them and returns the <svg> element.

// Chart geometry, in SVG user units (CSS pixels at 100 %); the page scales
// each SVG to its width, text included.
const (
	chartW    = 720 // every chart is this wide
	plotH     = 190 // and its plot area this tall; margins are added to it
	tickFont  = 10  // tick labels and legend
	titleFont = 11  // axis titles
	tickLen   = 5   // a labelled tick; an unlabelled one is 3
	gap       = 4   // between neighbouring pieces of the layout
	keyW      = 16  // a legend key
	legendRow = 14  // a legend row's height
	legendSep = 14  // between legend entries
	minRight  = 14  // the least room right of the plot area
)

// Colours, as CSS hex.
const (
	colPrimary = "#316dc2" // blue
	colSpill   = "#f08c2e" // orange
	colPlain   = "#6e8fb8" // grey-blue
	colError   = "#cf222e" // red
	colMark    = "#57606a" // grey: axes, reference lines
	colText    = "#30363d"
	colGrid    = "#d8dee4"
)

// A tick is a mark on an axis, labelled or not.
type tick struct {
	value float64
	label string // "" for an unlabelled (minor) tick
}

// An axis maps data values to a side of the plot area.
type axis struct {
	title  string // "" for none
	lo, hi float64
	log    bool // log10 scale: lo and hi must be > 0
	ticks  []tick
	// categories, when set, make a category axis: category i is at value i
	// and has the band from i-0.5 to i+0.5 to itself.
	categories []string
}

// categoryAxis is an axis with one labelled band per name.
func categoryAxis(title string, names []string) axis {
	a := axis{title: title, lo: -0.5, hi: float64(len(names)) - 0.5, categories: names}
	for i, n := range names {
		a.ticks = append(a.ticks, tick{value: float64(i), label: n})
	}
	return a
}

// frac is where v falls along a, 0 at lo and 1 at hi.
func (a *axis) frac(v float64) float64 {
	lo, hi := a.lo, a.hi
	if a.log {
		v, lo, hi = math.Log10(v), math.Log10(lo), math.Log10(hi)
	}
	if !(hi > lo) { // a degenerate axis: everything at its start
		return 0
	}
	return (v - lo) / (hi - lo)
}

// A stroke is how a line is drawn, on the chart and as its legend key.
type stroke struct {
	color string
	width float64
	dash  string // stroke-dasharray; "" for solid
}

// keyShape is what a legend entry shows beside its name.
type keyShape int

const (
	keyLine     keyShape = iota // a short stretch of the stroke
	keyBox                      // a filled square, for bars
	keyTriangle                 // a triangle, for marked points
)

// A legendItem names one thing drawn on the chart.
type legendItem struct {
	name   string
	shape  keyShape
	stroke stroke // its colour, and for keyLine its width and dashes
}

type point struct{ x, y float64 }

// A chart is an SVG chart being written; see the top of this file.
type chart struct {
	label  string // the accessible name, also used in errors
	x, y   axis
	legend []legendItem

	// Set by layout.
	height                   float64
	left, top, right, bottom float64 // the plot area's edges
	rotateX                  bool    // X labels are set at an angle
	yTitleX                  float64 // the Y title's baseline
	rows                     [][]int // the legend's rows, as indexes into legend
	rowWidths                []float64

	b         strings.Builder
	nonFinite bool // a coordinate was NaN or infinite: finish fails
}

// rotation is the angle of X labels too wide to sit side by side, in
// degrees anticlockwise; sin and cos of it set the space they take.
const rotation = 30

var sinRot, cosRot = math.Sincos(rotation * math.Pi / 180)

// newChart lays out a chart of x against y with the legend, writes its
// head and the gridlines, and returns it ready for marks.
func newChart(label string, x, y axis, legend []legendItem) *chart {
	c := &chart{label: label, x: x, y: y, legend: legend}
	c.layout()
	fmt.Fprintf(&c.b, `<svg width="%d" height="%s" viewBox="0 0 %d %s" role="img" aria-label="%s" font-family="sans-serif" font-size="%d">`,
		chartW, c.num(c.height), chartW, c.num(c.height), escape(label), tickFont)
	c.b.WriteString("\n")
	fmt.Fprintf(&c.b, `<g stroke="%s" stroke-width="0.6">`, colGrid)
	for _, t := range c.y.ticks {
		if t.label != "" {
			y := c.py(t.value)
			c.line(c.left, y, c.right, y)
		}
	}
	c.b.WriteString("</g>\n")
	return c
}

// layout places the plot area: wide enough a left margin for the Y labels
// and title (and for the first X label when rotated), a bottom margin for
// the X labels and title, a top margin for the legend's rows.
func (c *chart) layout() {
	c.left = gap + c.maxLabelWidth(c.y) + 3 + tickLen
	if c.y.title != "" {
		c.left += titleFont + gap
	}
	// A numeric X axis may have its last label centred on its end: leave
	// room for half of it.
	c.right = chartW - minRight
	if c.x.categories == nil {
		for _, t := range c.x.ticks {
			if t.label != "" {
				c.right = min(chartW-minRight, chartW-gap-textWidth(t.label, tickFont)/2)
			}
		}
	}
	if n := len(c.x.categories); n > 0 {
		// Side by side if the widest leaves a gap to its neighbours.
		band := (c.right - c.left) / float64(n)
		c.rotateX = c.maxLabelWidth(c.x)+gap > band
		if c.rotateX {
			// The first label reaches left from its band's centre: widen the
			// left margin until it fits. The centre is left + (right-left)/2n.
			reach := c.maxLabelWidth(c.x)*cosRot + tickFont/2*sinRot
			half := 1 / (2 * float64(n))
			c.left = max(c.left, (gap+reach-c.right*half)/(1-half))
		}
	}
	// The Y title runs up just left of the Y labels, wherever they are: its
	// baseline is on the right, a descent (0.2em) from its edge.
	c.yTitleX = c.left - tickLen - 3 - c.maxLabelWidth(c.y) - gap - 0.2*titleFont

	// The legend: right-aligned rows above the plot area, as many as it
	// takes.
	var row []int
	width := 0.0
	for i, it := range c.legend {
		w := keyW + gap + textWidth(it.name, tickFont)
		if len(row) > 0 && width+legendSep+w > c.right-c.left {
			c.rows, c.rowWidths = append(c.rows, row), append(c.rowWidths, width)
			row, width = nil, 0
		}
		if len(row) > 0 {
			width += legendSep
		}
		row, width = append(row, i), width+w
	}
	if len(row) > 0 {
		c.rows, c.rowWidths = append(c.rows, row), append(c.rowWidths, width)
	}
	c.top = 10 // room for the top Y label, centred on the axis's end
	if len(c.rows) > 0 {
		c.top = gap + float64(len(c.rows))*legendRow + 2*gap
	}

	c.bottom = c.top + plotH
	below := tickLen + 3 + 1.2*tickFont
	if c.rotateX {
		below = tickLen + 3 + c.maxLabelWidth(c.x)*sinRot + tickFont/2*cosRot
	}
	if c.x.title != "" {
		below += gap + titleFont
	}
	c.height = math.Ceil(c.bottom + below + gap)
}

// maxLabelWidth is the estimated width of a's widest tick label.
func (c *chart) maxLabelWidth(a axis) float64 {
	w := 0.0
	for _, t := range a.ticks {
		w = max(w, textWidth(t.label, tickFont))
	}
	return w
}

// px and py map data coordinates to the SVG's.
func (c *chart) px(v float64) float64 { return c.left + c.x.frac(v)*(c.right-c.left) }
func (c *chart) py(v float64) float64 { return c.bottom - c.y.frac(v)*(c.bottom-c.top) }

// band is the width of one unit of the X axis, a category's band on a
// category axis.
func (c *chart) band() float64 { return (c.right - c.left) / (c.x.hi - c.x.lo) }

// polyline joins the points, in data coordinates.
func (c *chart) polyline(pts []point, s stroke) {
	c.b.WriteString(`<polyline points="`)
	for i, p := range pts {
		if i > 0 {
			c.b.WriteByte(' ')
		}
		c.b.WriteString(c.num(c.px(p.x)) + "," + c.num(c.py(p.y)))
	}
	c.b.WriteString(`" fill="none" stroke-linejoin="round"` + s.attrs() + "/>\n")
}

// dots marks each point with a filled circle of radius r.
func (c *chart) dots(pts []point, r float64, color string) {
	fmt.Fprintf(&c.b, `<g fill="%s">`, color)
	for _, p := range pts {
		fmt.Fprintf(&c.b, `<circle cx="%s" cy="%s" r="%s"/>`, c.num(c.px(p.x)), c.num(c.py(p.y)), c.num(r))
	}
	c.b.WriteString("</g>\n")
}

// triangles marks each point with an upward triangle of circumradius r.
func (c *chart) triangles(pts []point, r float64, color string) {
	fmt.Fprintf(&c.b, `<g fill="%s">`, color)
	for _, p := range pts {
		c.triangle(c.px(p.x), c.py(p.y), r)
	}
	c.b.WriteString("</g>\n")
}

// triangle is an upward triangle of circumradius r centred on x, y (in the
// SVG's coordinates).
func (c *chart) triangle(x, y, r float64) {
	dx, dy := r*math.Sqrt(3)/2, r/2
	fmt.Fprintf(&c.b, `<path d="M%s,%sL%s,%sL%s,%sZ"/>`,
		c.num(x), c.num(y-r), c.num(x+dx), c.num(y+dy), c.num(x-dx), c.num(y+dy))
}

// bar fills the box from y0 to y1 (data) and width wide (SVG units)
// centred on x (data).
func (c *chart) bar(x, width, y0, y1 float64, color string) {
	top, bot := c.py(y1), c.py(y0)
	fmt.Fprintf(&c.b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"/>`+"\n",
		c.num(c.px(x)-width/2), c.num(top), c.num(width), c.num(bot-top), color)
}

// hline and vline are reference lines across the whole plot area, at Y
// value v and at X value v.
func (c *chart) hline(v float64, s stroke) {
	y := c.num(c.py(v))
	fmt.Fprintf(&c.b, `<line x1="%s" y1="%s" x2="%s" y2="%s"%s/>`+"\n", c.num(c.left), y, c.num(c.right), y, s.attrs())
}

func (c *chart) vline(v float64, s stroke) {
	x := c.num(c.px(v))
	fmt.Fprintf(&c.b, `<line x1="%s" y1="%s" x2="%s" y2="%s"%s/>`+"\n", x, c.num(c.top), x, c.num(c.bottom), s.attrs())
}

// finish draws the axes, their labels and titles, and the legend over the
// marks, and returns the chart as an <svg> element to inline in HTML. It
// fails if a coordinate came out NaN or infinite, which would leave the
// chart broken in ways a reader might not notice.
func (c *chart) finish() (template.HTML, error) {
	// Axis lines and ticks.
	fmt.Fprintf(&c.b, `<g stroke="%s" stroke-width="1">`, colMark)
	c.line(c.left, c.top, c.left, c.bottom)
	c.line(c.left, c.bottom, c.right, c.bottom)
	for _, t := range c.y.ticks {
		y := c.py(t.value)
		c.line(c.left-tickLength(t), y, c.left, y)
	}
	for _, t := range c.x.ticks {
		x := c.px(t.value)
		c.line(x, c.bottom, x, c.bottom+tickLength(t))
	}
	c.b.WriteString("</g>\n")

	// Tick labels. dy lowers a Y label's baseline by about half a digit's
	// height, so that the label's middle is level with its tick.
	fmt.Fprintf(&c.b, `<g fill="%s">`+"\n", colText)
	for _, t := range c.yLabels() {
		c.text(c.left-tickLen-3, c.py(t.value), `text-anchor="end" dy="0.35em"`, t.label)
	}
	for _, t := range c.x.ticks {
		if t.label == "" {
			continue
		}
		x, y := c.px(t.value), c.bottom+tickLen+3
		if c.rotateX {
			// Ends at the tick and runs down to the left, its middle on the
			// line through the tick.
			c.text(x, y, fmt.Sprintf(`text-anchor="end" dy="0.35em" transform="rotate(%d %s %s)"`, -rotation, c.num(x), c.num(y)), t.label)
		} else {
			c.text(x, y, `text-anchor="middle" dy="0.8em"`, t.label)
		}
	}
	c.b.WriteString("</g>\n")

	// Axis titles: X centred under the plot, Y up the left edge.
	fmt.Fprintf(&c.b, `<g fill="%s" font-size="%d">`+"\n", colText, titleFont)
	if c.x.title != "" {
		c.text((c.left+c.right)/2, c.height-gap-2, `text-anchor="middle"`, c.x.title)
	}
	if c.y.title != "" {
		x, y := c.yTitleX, (c.top+c.bottom)/2
		c.text(x, y, fmt.Sprintf(`text-anchor="middle" transform="rotate(-90 %s %s)"`, c.num(x), c.num(y)), c.y.title)
	}
	c.b.WriteString("</g>\n")

	c.drawLegend()
	c.b.WriteString("</svg>")
	if c.nonFinite {
		return "", fmt.Errorf("bench: chart %q: a coordinate is not a finite number", c.label)
	}
	// Every piece of text went through escape, the rest is numbers and
	// attributes written here: the element is safe markup.
	return template.HTML(c.b.String()), nil
}

// drawLegend writes the legend's rows, each right-aligned with the plot
// area, every entry a key then its name.
func (c *chart) drawLegend() {
	if len(c.rows) == 0 {
		return
	}
	c.b.WriteString(`<g class="legend">` + "\n")
	for r, row := range c.rows {
		base := gap + float64(r)*legendRow + tickFont // the row's baseline
		mid := base - 0.35*tickFont                   // the middle of its digits
		x := c.right - c.rowWidths[r]
		for _, i := range row {
			it := c.legend[i]
			switch it.shape {
			case keyLine:
				fmt.Fprintf(&c.b, `<line x1="%s" y1="%s" x2="%s" y2="%s"%s/>`,
					c.num(x), c.num(mid), c.num(x+keyW), c.num(mid), it.stroke.attrs())
			case keyBox:
				fmt.Fprintf(&c.b, `<rect x="%s" y="%s" width="%d" height="%d" fill="%s"/>`,
					c.num(x+keyW/2-4.5), c.num(mid-4.5), 9, 9, it.stroke.color)
			case keyTriangle:
				fmt.Fprintf(&c.b, `<g fill="%s">`, it.stroke.color)
				c.triangle(x+keyW/2, mid+1, 5)
				c.b.WriteString("</g>")
			}
			x += keyW + gap
			fmt.Fprintf(&c.b, `<g fill="%s">`, colText)
			c.text(x, base, "", it.name)
			c.b.WriteString("</g>\n")
			x += textWidth(it.name, tickFont) + legendSep
		}
	}
	c.b.WriteString("</g>\n")
}

// yLabels are the labelled Y ticks whose labels are drawn: all of them,
// except that a label at either end of the axis that would touch its
// neighbour's is left off (its tick stays). An axis's ends are where it
// was rounded out to, labelled as extras (on a log axis, a 2 or 5 next to
// a decade), while the labels between them are the regular steps.
func (c *chart) yLabels() []tick {
	var ts []tick
	for _, t := range c.y.ticks {
		if t.label != "" {
			ts = append(ts, t)
		}
	}
	if len(ts) < 3 {
		return ts
	}
	clear := func(a, b tick) bool { return math.Abs(c.py(a.value)-c.py(b.value)) >= 1.2*tickFont }
	last := len(ts) - 1
	if !clear(ts[last], ts[last-1]) {
		ts = ts[:last]
	}
	if !clear(ts[0], ts[1]) {
		ts = ts[1:]
	}
	return ts
}

// tickLength is how far a tick reaches out of the plot area: labelled ticks
// further than the unlabelled ones between them.
func tickLength(t tick) float64 {
	if t.label == "" {
		return 3
	}
	return tickLen
}

// line writes a line segment, styled by its enclosing group.
func (c *chart) line(x1, y1, x2, y2 float64) {
	fmt.Fprintf(&c.b, `<line x1="%s" y1="%s" x2="%s" y2="%s"/>`, c.num(x1), c.num(y1), c.num(x2), c.num(y2))
}

// text writes s, escaped, at x, y with attrs, which must be trusted markup.
func (c *chart) text(x, y float64, attrs, s string) {
	if attrs != "" {
		attrs = " " + attrs
	}
	fmt.Fprintf(&c.b, `<text x="%s" y="%s"%s>%s</text>`+"\n", c.num(x), c.num(y), attrs, escape(s))
}

// attrs are the stroke's SVG attributes, with a leading space.
func (s stroke) attrs() string {
	a := fmt.Sprintf(` stroke="%s" stroke-width="%s"`, s.color, strconv.FormatFloat(s.width, 'g', -1, 64))
	if s.dash != "" {
		a += ` stroke-dasharray="` + s.dash + `"`
	}
	return a
}

// num formats a coordinate to a tenth of a unit, far finer than a pixel at
// any size the page shows, and notes any that is not finite.
func (c *chart) num(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		c.nonFinite = true
		return "0"
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	if s == "-0" {
		s = "0"
	}
	return s
}

// escape makes s safe as the text of an element or an attribute's value in
// both SVG (XML) and HTML: it escapes the markup characters and quotes, and
// replaces characters XML does not allow with U+FFFD.
func escape(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s)) // writes to a strings.Builder never fail
	return b.String()
}

// textWidth estimates the width of s set in a sans-serif face at size. The
// viewer chooses the face, so the estimate follows the wider of the usual
// ones (DejaVu Sans, common on Linux, over Helvetica and Arial): too wide
// costs some space, too narrow lets labels collide.
func textWidth(s string, size float64) float64 {
	em := 0.0
	for _, r := range s {
		switch {
		case strings.ContainsRune("ijl.,:;'|! ", r):
			em += 0.32
		case strings.ContainsRune("frtI()[]-/", r):
			em += 0.42
		case strings.ContainsRune("mwMW%…@", r):
			em += 0.98
		case r >= 'A' && r <= 'Z':
			em += 0.74
		default: // digits, other lower case, µ
			em += 0.64
		}
	}
	return em * size
}
