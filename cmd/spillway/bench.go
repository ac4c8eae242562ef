package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"spillway/bench"
)

// benchFlags are the flags of "spillway bench".
type benchFlags struct {
	servers       string
	entry         string
	conns         int
	pipeline      int
	duration      time.Duration
	requests      int
	keys          int
	zipf          float64
	ratio         string
	valueSize     string
	prefill       bool
	rate          float64
	hotKeyAt      time.Duration
	hotShare      float64
	seed          int
	timeout       time.Duration
	jsonOut       string
	htmlOut       string
	local         int
	localMemory   int64
	epsilon       float64
	load          string
	spillOrder    string
	copyTTL       time.Duration
	originLatency time.Duration
	simulate      bool
	simCache      int
	compare       bool
	tlsCA         string
	tlsCert       string
	tlsKey        string
}

func (f *benchFlags) options() []option {
	return []option{
		{"", "servers", &stringValue{&f.servers}, "comma-separated HOST:PORT targets (any memcached-protocol server)"},
		{"", "entry", &stringValue{&f.entry}, "spread: connections spread evenly over the servers (connection i to server i mod n); hashed: the client picks the server by key"},
		{"", "conns", &intValue{&f.conns}, "concurrent connections (workers)"},
		{"", "pipeline", &intValue{&f.pipeline}, "requests in flight per connection"},
		{"", "duration", &durationValue{&f.duration}, "length of the measured run"},
		{"", "requests", &intValue{&f.requests}, "stop after this many requests (0: run for --duration)"},
		{"", "keys", &intValue{&f.keys}, "number of distinct keys"},
		{"", "zipf", &floatValue{&f.zipf}, "popularity skew s: key k is drawn with probability ~ 1/k^s (0: uniform)"},
		{"", "ratio", &stringValue{&f.ratio}, "get:set mix"},
		{"", "value-size", &stringValue{&f.valueSize}, "value size in bytes, N or MIN-MAX"},
		{"", "prefill", &boolValue{&f.prefill}, "set every key once before measuring"},
		{"", "rate", &floatValue{&f.rate}, "open loop: total requests per second, latency measured from the schedule (0: closed loop)"},
		{"", "hot-key-at", &durationValue{&f.hotKeyAt}, "flash sale: when one cold key turns hot"},
		{"", "hot-share", &floatValue{&f.hotShare}, "flash sale: fraction of requests that go to the hot key"},
		{"", "seed", &intValue{&f.seed}, "workload seed"},
		{"", "timeout", &durationValue{&f.timeout}, "dial and reply timeout"},
		{"", "tls-ca", &stringValue{&f.tlsCA}, "speak TLS to the servers, trusting the PEM CA certificate in this file"},
		{"", "tls-cert", &stringValue{&f.tlsCert}, "with --tls-ca: PEM client certificate to present (with --tls-key), for servers started with --tls-ca"},
		{"", "tls-key", &stringValue{&f.tlsKey}, "PEM private key of --tls-cert"},
		{"", "json", &stringValue{&f.jsonOut}, "write the report as JSON to this file"},
		{"", "html", &stringValue{&f.htmlOut}, "write a self-contained HTML report with charts to this file"},
		{"", "local", &intValue{&f.local}, "start an embedded N-node Spillway cluster on loopback and load it"},
		{"", "local-memory", &sizeValue{p: &f.localMemory, unit: 1 << 20}, "memory per embedded node, MiB"},
		{"", "epsilon", &floatValue{&f.epsilon}, "embedded cluster: bounded-load epsilon (inf: plain consistent hashing)"},
		{"", "load", &stringValue{&f.load}, "embedded cluster: load measure, rate or inflight"},
		{"", "spill-order", &stringValue{&f.spillOrder}, "embedded cluster: ring or probe"},
		{"", "copy-ttl", &durationValue{&f.copyTTL}, "embedded cluster: copy TTL"},
		{"", "origin-latency", &durationValue{&f.originLatency}, "embedded cluster: add an origin that answers every key after this delay and counts its calls"},
		{"", "simulate", &boolValue{&f.simulate}, "no network: place the workload's requests with the ring alone (per VARIANT) and report per-node load and hit rate"},
		{"", "sim-cache", &intValue{&f.simCache}, "with --simulate: each node's cache size in items, LRU (0: unbounded)"},
		{"", "compare", &boolValue{&f.compare}, "run once per VARIANT argument (e.g. epsilon=0.25 epsilon=inf) on fresh clusters and print them side by side"},
	}
}

func defaultBenchFlags() benchFlags {
	return benchFlags{
		entry:       string(bench.EntrySpread),
		conns:       bench.DefaultConns,
		pipeline:    1,
		duration:    bench.DefaultDuration,
		keys:        bench.DefaultKeys,
		ratio:       "9:1",
		valueSize:   strconv.Itoa(bench.DefaultValue),
		seed:        1,
		timeout:     bench.DefaultTimeout,
		localMemory: 64 << 20,
		epsilon:     0.25,
		load:        "rate",
		spillOrder:  "ring",
		copyTTL:     5 * time.Second,
	}
}

const benchSynopsis = `Usage: spillway bench [flags] [VARIANT ...]

Loads memcached-protocol servers (--servers) or an embedded Spillway cluster
(--local N) with a seeded, skewed workload; checks every value read back.
With --compare, each VARIANT (key=value[,key=value], keys: epsilon, load,
spill-order, nodes, entry) runs on a fresh embedded cluster.`

func benchCmd(args []string, stdout, stderr io.Writer) error {
	f := defaultBenchFlags()
	// Variants follow the flags; the flag package stops at the first one.
	flagArgs, variants := splitVariants(args)
	if _, err := parseOptions("bench", benchSynopsis, f.options(), flagArgs, stdout); err != nil {
		return err
	}
	cfg, err := f.config()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	switch {
	case f.simulate:
		return simulate(stdout, f, cfg, variants)
	case f.compare && (f.jsonOut != "" || f.htmlOut != ""):
		return errors.New("--json and --html write one run's report; --compare prints a table")
	case f.local > 0 && f.servers != "":
		return errors.New("give --servers or --local, not both")
	case cfg.TLS != nil && f.servers == "":
		return errors.New("--tls-ca goes with --servers: the embedded cluster speaks plain TCP")
	case f.compare:
		if len(variants) == 0 {
			return errors.New("--compare needs VARIANT arguments, e.g. epsilon=0.25 epsilon=inf")
		}
		if f.local == 0 {
			f.local = 3
		}
		var names []string
		var reports []*bench.Report
		for _, v := range variants {
			vf, vcfg, err := f.variant(v, cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(stderr, "running %s on %d local nodes...\n", v, vf.local)
			rep, err := runLocal(ctx, vf, vcfg, stderr)
			if rep == nil {
				return err
			}
			names = append(names, v)
			reports = append(reports, rep)
			if err != nil {
				return err
			}
		}
		return bench.CompareText(stdout, names, reports)
	case len(variants) > 0:
		return fmt.Errorf("unexpected argument %q (variants need --compare or --simulate)", variants[0])
	}

	if f.local == 0 && f.servers == "" {
		return errors.New("give --servers HOST:PORT,... or --local N")
	}
	// A report file that cannot be written fails now, not after the run.
	jsonOut, err := openReport("--json", f.jsonOut)
	if err != nil {
		return err
	}
	htmlOut, err := openReport("--html", f.htmlOut)
	if err != nil {
		jsonOut.discard()
		return err
	}
	var rep *bench.Report
	if f.local > 0 {
		rep, err = runLocal(ctx, f, cfg, stderr)
	} else {
		rep, err = bench.Run(ctx, cfg)
	}
	if rep == nil {
		jsonOut.discard()
		htmlOut.discard()
		return err
	}
	werr := rep.WriteText(stdout)
	for _, out := range []struct {
		file  *reportFile
		write func(io.Writer) error
	}{{jsonOut, rep.WriteJSON}, {htmlOut, rep.WriteHTML}} {
		if e := out.file.write(out.write); werr == nil {
			werr = e
		}
	}
	return cmp.Or(err, werr)
}

// reportFile is a --json or --html file, opened before the run. Its zero
// value (nil) is no file.
type reportFile struct {
	f       *os.File
	created bool // it did not exist before: discard removes it
}

// openReport opens path for writing (nil if path is empty), keeping what
// it holds until write.
func openReport(flagName, path string) (*reportFile, error) {
	if path == "" {
		return nil, nil
	}
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flagName, err)
	}
	return &reportFile{f: f, created: errors.Is(statErr, fs.ErrNotExist)}, nil
}

// write replaces the file's contents with what fn writes, and closes it.
func (r *reportFile) write(fn func(io.Writer) error) error {
	if r == nil {
		return nil
	}
	err := r.f.Truncate(0)
	if err == nil {
		err = fn(r.f)
	}
	return errors.Join(err, r.f.Close())
}

// discard closes the file, and removes it if the run created it.
func (r *reportFile) discard() {
	if r == nil {
		return
	}
	r.f.Close()
	if r.created {
		os.Remove(r.f.Name())
	}
}

// splitVariants separates the flags from the VARIANT arguments (words
// containing '=' that do not start with '-').
func splitVariants(args []string) (flags, variants []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") && strings.Contains(a, "=") {
			variants = append(variants, a)
			continue
		}
		flags = append(flags, a)
	}
	return flags, variants
}

func (f *benchFlags) config() (bench.Config, error) {
	ratio, err := bench.ParseRatio(f.ratio)
	if err != nil {
		return bench.Config{}, err
	}
	size, err := bench.ParseSize(f.valueSize)
	if err != nil {
		return bench.Config{}, err
	}
	cfg := bench.Config{
		Entry:     bench.Entry(f.entry),
		Conns:     f.conns,
		Pipeline:  f.pipeline,
		Duration:  f.duration,
		Requests:  int64(f.requests),
		Keys:      f.keys,
		Zipf:      f.zipf,
		Ratio:     ratio,
		ValueSize: size,
		Prefill:   f.prefill,
		Rate:      f.rate,
		HotKeyAt:  f.hotKeyAt,
		HotShare:  f.hotShare,
		Seed:      int64(f.seed),
		Timeout:   f.timeout,
		Progress:  bench.TerminalProgress(os.Stderr),
	}
	if f.requests > 0 {
		cfg.Duration = 0
	}
	if cfg.TLS, err = f.clientTLS(); err != nil {
		return bench.Config{}, err
	}
	for _, s := range strings.Split(f.servers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.Servers = append(cfg.Servers, s)
		}
	}
	return cfg, nil
}

// variant applies "key=value,key=value" to a copy of the flags.
func (f *benchFlags) variant(spec string, cfg bench.Config) (benchFlags, bench.Config, error) {
	v := *f
	for _, kv := range strings.Split(spec, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return v, cfg, fmt.Errorf("variant %q: want key=value", spec)
		}
		var err error
		switch k {
		case "epsilon", "eps":
			v.epsilon, err = strconv.ParseFloat(val, 64)
		case "load":
			v.load = val
		case "spill-order", "order":
			v.spillOrder = val
		case "nodes":
			v.local, err = strconv.Atoi(val)
		case "entry":
			cfg.Entry = bench.Entry(val)
		default:
			return v, cfg, fmt.Errorf("variant %q: unknown key %q (epsilon, load, spill-order, nodes, entry)", spec, k)
		}
		if err != nil {
			return v, cfg, fmt.Errorf("variant %q: %v", spec, err)
		}
	}
	if math.IsNaN(v.epsilon) || v.epsilon < 0 {
		return v, cfg, fmt.Errorf("variant %q: epsilon must be positive or inf", spec)
	}
	return v, cfg, nil
}

// simulate runs the workload through the ring alone, once per variant
// (default: the flags' own settings), and prints the results side by side.
func simulate(stdout io.Writer, f benchFlags, cfg bench.Config, variants []string) error {
	if len(variants) == 0 {
		variants = []string{"epsilon=" + strconv.FormatFloat(f.epsilon, 'g', -1, 64)}
	}
	var reps []*bench.SimReport
	for _, v := range variants {
		vf, _, err := f.variant(v, cfg)
		if err != nil {
			return err
		}
		pick, err := pickerConfig(vf.epsilon, vf.load, vf.spillOrder)
		if err != nil {
			return err
		}
		nodes := vf.local
		if nodes == 0 {
			nodes = 10
		}
		rep, err := bench.Simulate(bench.SimConfig{
			Nodes:      nodes,
			Requests:   f.requests,
			Keys:       f.keys,
			Zipf:       f.zipf,
			Rate:       f.rate,
			CacheItems: f.simCache,
			Picker:     pick,
			Seed:       int64(f.seed),
		})
		if err != nil {
			return err
		}
		reps = append(reps, rep)
	}
	return bench.SimCompareText(stdout, variants, reps)
}

// clientTLS is the TLS the bench speaks to the servers, or nil.
func (f *benchFlags) clientTLS() (*tls.Config, error) {
	if f.tlsCA == "" {
		if f.tlsCert != "" || f.tlsKey != "" {
			return nil, errors.New("--tls-cert and --tls-key need --tls-ca")
		}
		return nil, nil
	}
	roots, err := loadCA("--tls-ca", f.tlsCA)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if f.tlsCert != "" || f.tlsKey != "" {
		cert, err := loadPair("--tls-cert", f.tlsCert, "--tls-key", f.tlsKey)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
