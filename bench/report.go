package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the outcome of a run. It is plain data: it marshals to JSON as
// is, and WriteText, WriteJSON and WriteHTML render it.
type Report struct {
	Workload Workload  `json:"workload"`
	Start    time.Time `json:"start"`
	// Elapsed is the measured phase, first request to last reply.
	Elapsed float64 `json:"elapsed_seconds"`
	// Ops counts requests that completed without error (Gets + Sets).
	Ops       int64   `json:"ops"`
	OpsPerSec float64 `json:"ops_per_sec"`
	Gets      int64   `json:"gets"`
	Sets      int64   `json:"sets"`
	Hits      int64   `json:"hits"`
	Misses    int64   `json:"misses"`
	HitRatio  float64 `json:"hit_ratio"` // Hits / Gets as seen by the client
	// Errors counts failed requests by kind: timeout, conn, server_error,
	// client_error, error, not_stored, protocol, corrupt, unsent.
	Errors     map[string]int64 `json:"errors"`
	ErrorCount int64            `json:"error_count"`
	Latency    Latency          `json:"latency"`
	Throughput []Sample         `json:"throughput"`
	Servers    []ServerLoad     `json:"servers"`
	Load       Load             `json:"load"`
}

// Workload echoes the settings a report was made with (after defaults).
type Workload struct {
	Servers   []string `json:"servers"`
	Entry     Entry    `json:"entry"`
	Conns     int      `json:"conns"`
	Pipeline  int      `json:"pipeline"`
	Duration  float64  `json:"duration_seconds,omitempty"`
	Requests  int64    `json:"requests,omitempty"`
	Keys      int      `json:"keys"`
	Zipf      float64  `json:"zipf"`
	Ratio     string   `json:"ratio"`
	ValueSize string   `json:"value_size"`
	Prefill   bool     `json:"prefill"`
	Rate      float64  `json:"rate,omitempty"`
	HotKeyAt  float64  `json:"hot_key_at_seconds,omitempty"`
	HotShare  float64  `json:"hot_share,omitempty"`
	Seed      int64    `json:"seed"`
}

// Latency summarises the latency of successful requests, from an HDR
// histogram with 3 significant digits. In open-loop runs (Rate > 0) it is
// measured from each request's scheduled time, else from when it was issued.
type Latency struct {
	Count int64         `json:"count"`
	Mean  time.Duration `json:"mean_ns"`
	P50   time.Duration `json:"p50_ns"`
	P90   time.Duration `json:"p90_ns"`
	P99   time.Duration `json:"p99_ns"`
	P999  time.Duration `json:"p999_ns"`
	Max   time.Duration `json:"max_ns"`
	// Percentiles is the percentile spectrum, for plotting.
	Percentiles []Percentile `json:"percentiles"`
}

// Percentile is one point of the latency spectrum.
type Percentile struct {
	Percentile float64       `json:"percentile"`
	Value      time.Duration `json:"value_ns"`
}

// spectrum are the percentiles plotted: dense towards the tail, where
// latency problems live.
var spectrum = []float64{0, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99, 99.999, 100}

func newReport(cfg Config, res phaseResult, before, after []snapshot) *Report {
	t := res.tally
	r := &Report{
		Workload: Workload{
			Servers: cfg.Servers, Entry: cfg.Entry, Conns: cfg.Conns, Pipeline: cfg.Pipeline,
			Duration: cfg.Duration.Seconds(), Requests: cfg.Requests, Keys: cfg.Keys, Zipf: cfg.Zipf,
			Ratio: cfg.Ratio.String(), ValueSize: cfg.ValueSize.String(), Prefill: cfg.Prefill,
			Rate: cfg.Rate, HotKeyAt: cfg.HotKeyAt.Seconds(), HotShare: cfg.HotShare, Seed: cfg.Seed,
		},
		Start:      res.start,
		Elapsed:    res.elapsed.Seconds(),
		Gets:       t.gets,
		Sets:       t.sets,
		Hits:       t.hits,
		Misses:     t.misses,
		Errors:     t.errors,
		Throughput: res.samples,
	}
	r.Ops = r.Gets + r.Sets
	if r.Elapsed > 0 {
		r.OpsPerSec = float64(r.Ops) / r.Elapsed
	}
	if r.Gets > 0 {
		r.HitRatio = float64(r.Hits) / float64(r.Gets)
	}
	for _, n := range r.Errors {
		r.ErrorCount += n
	}
	h := t.hist
	r.Latency = Latency{
		Count: h.TotalCount(),
		Mean:  time.Duration(h.Mean()),
		P50:   time.Duration(h.ValueAtPercentile(50)),
		P90:   time.Duration(h.ValueAtPercentile(90)),
		P99:   time.Duration(h.ValueAtPercentile(99)),
		P999:  time.Duration(h.ValueAtPercentile(99.9)),
		Max:   time.Duration(h.Max()),
	}
	for i, v := range h.ValueAtPercentilesSlice(spectrum) {
		r.Latency.Percentiles = append(r.Latency.Percentiles, Percentile{Percentile: spectrum[i], Value: time.Duration(v)})
	}
	var total uint64
	for i, addr := range cfg.Servers {
		l := serverLoad(addr, before[i], after[i])
		if i < len(t.entryGets) {
			l.EntryGets = uint64(t.entryGets[i])
		}
		total += l.Requests
		r.Servers = append(r.Servers, l)
	}
	for i := range r.Servers {
		if total > 0 {
			r.Servers[i].Share = float64(r.Servers[i].Requests) / float64(total)
		}
	}
	r.Load = summariseLoad(r.Servers, r.Ops)
	return r
}

// WriteJSON writes r as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes r as aligned, human-readable text.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	wl := r.Workload
	fmt.Fprintf(tw, "workload\t%d server(s), entry %s, %d conns, pipeline %d, %d keys, %s, get:set %s, value %s B%s\n",
		len(wl.Servers), wl.Entry, wl.Conns, wl.Pipeline, wl.Keys, describeSkew(wl.Zipf), wl.Ratio, wl.ValueSize, describeExtras(wl))
	fmt.Fprintf(tw, "elapsed\t%.2fs\n", r.Elapsed)
	fmt.Fprintf(tw, "throughput\t%s ops/s (%s ops: %s gets, %s sets)\n",
		commas(int64(r.OpsPerSec+0.5)), commas(r.Ops), commas(r.Gets), commas(r.Sets))
	fmt.Fprintf(tw, "hit ratio\t%.1f%% (%s hits, %s misses)\n", 100*r.HitRatio, commas(r.Hits), commas(r.Misses))
	fmt.Fprintf(tw, "errors\t%s\n", describeErrors(r.Errors))
	l := r.Latency
	fmt.Fprintf(tw, "latency\tp50 %s  p90 %s  p99 %s  p99.9 %s  max %s  (mean %s)\n",
		fmtLatency(l.P50), fmtLatency(l.P90), fmtLatency(l.P99), fmtLatency(l.P999), fmtLatency(l.Max), fmtLatency(l.Mean))
	ld := r.Load
	if ld.ServerCPU > 0 {
		note := ""
		if ld.CPUIncludesClient {
			note = " (servers run in this process: includes the client's CPU)"
		}
		fmt.Fprintf(tw, "server cpu\t%.2fs, %s ops per server CPU-second%s\n", ld.ServerCPU, commas(int64(ld.OpsPerServerCPU+0.5)), note)
	} else {
		fmt.Fprintf(tw, "server cpu\tunknown (no rusage in stats)\n")
	}
	if len(r.Servers) > 0 {
		fmt.Fprintf(tw, "load\tmax/mean %.2f, hottest %s (%.1f%%), spill %.1f%%, peer fetches %s, origin calls %s\n",
			ld.MaxMean, ld.Hottest, 100*ld.HottestShare, 100*ld.SpillShare, commas(int64(ld.PeerFetches)), commas(int64(ld.OriginFetches)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Servers) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "server\trequests\tshare\tentry gets\tcmd_get\tcmd_set\thits\tmisses\tspilled\tpeer\torigin\tcpu s\t")
	for _, s := range r.Servers {
		if s.Err != "" {
			fmt.Fprintf(tw, "%s\tstats unavailable: %s\t\n", s.Addr, s.Err)
			continue
		}
		cpu := "-"
		if s.HasCPU {
			cpu = strconv.FormatFloat(s.CPUSeconds, 'f', 2, 64)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f%%\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", s.Addr, commas(int64(s.Requests)), 100*s.Share,
			commas(int64(s.EntryGets)), commas(int64(s.CmdGet)), commas(int64(s.CmdSet)), commas(int64(s.GetHits)), commas(int64(s.GetMisses)),
			commas(int64(s.SpilledServed)), commas(int64(s.PeerFetches)), commas(int64(s.OriginFetches)), cpu)
	}
	return tw.Flush()
}

// CompareText writes one row per report, named by names, with the figures
// that tell configurations apart: the hottest server's share and max/mean,
// spill share, hit rate, origin calls, ops/s, ops per server CPU-second and
// p99. A nil report (a failed run) gets a row of dashes.
func CompareText(w io.Writer, names []string, reports []*Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\thottest\tmax/mean\tspill\thit rate\torigin calls\tops/s\tops/cpu-s\tp99\terrors\t")
	for i, r := range reports {
		name := fmt.Sprintf("#%d", i+1)
		if i < len(names) {
			name = names[i]
		}
		if r == nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t\n", name)
			continue
		}
		cpu := "-"
		if r.Load.OpsPerServerCPU > 0 {
			cpu = commas(int64(r.Load.OpsPerServerCPU + 0.5))
		}
		fmt.Fprintf(tw, "%s\t%.1f%%\t%.2f\t%.1f%%\t%.1f%%\t%s\t%s\t%s\t%s\t%s\t\n", name,
			100*r.Load.HottestShare, r.Load.MaxMean, 100*r.Load.SpillShare, 100*r.HitRatio,
			commas(int64(r.Load.OriginFetches)), commas(int64(r.OpsPerSec+0.5)), cpu, fmtLatency(r.Latency.P99),
			commas(r.ErrorCount))
	}
	return tw.Flush()
}

func describeSkew(s float64) string {
	if s == 0 {
		return "uniform"
	}
	return "zipf " + strconv.FormatFloat(s, 'g', -1, 64)
}

func describeExtras(wl Workload) string {
	var b strings.Builder
	if wl.Prefill {
		b.WriteString(", prefilled")
	}
	if wl.Rate > 0 {
		fmt.Fprintf(&b, ", open loop at %s req/s", commas(int64(wl.Rate)))
	}
	if wl.HotShare > 0 {
		fmt.Fprintf(&b, ", hot key %.0f%% from %gs", 100*wl.HotShare, wl.HotKeyAt)
	}
	return b.String()
}

func describeErrors(m map[string]int64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] > 0 {
			parts = append(parts, k+" "+commas(m[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// fmtLatency prints d with 3-4 significant digits in a unit that fits.
func fmtLatency(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return strconv.FormatFloat(float64(d)/1e3, 'f', 1, 64) + "µs"
	case d < time.Second:
		return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) + "ms"
	default:
		return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) + "s"
	}
}

// commas formats n with thousands separators.
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
