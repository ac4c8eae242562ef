// Package bench is Spillway's load generator: it drives any server that
// speaks the memcached text protocol (a Spillway cluster, memcached, a
// proxy) with a seeded workload, checks every value it reads back, and
// reports throughput, latency (HDR histogram), errors, and per-server load
// and CPU read from each server's own stats.
//
// Run takes a list of server addresses; how they were started (by hand, by
// an embedded cluster) is the caller's business.
//
// How it works: Conns workers each generate requests from their own seeded
// stream (Zipf or uniform keys, get:set ratio, value sizes) and write them
// over their own connection(s), keeping up to Pipeline in flight; one reader
// goroutine per connection matches replies to requests in order, checks
// values and records latency. Closed loop by default; with Rate, requests
// follow a fixed schedule and latency counts from the scheduled time.
//
// Every value is derived from its key, a per-run id and a version, and
// carries a checksum, so a get that returns anything this tool could not
// have written for that key is caught ("corrupt") and fails the run.
//
// Left out: the meta and binary protocols, multi-key gets, delete, incr,
// cas and the other storage commands, expiry, TLS, and any retry of a
// failed request (a failure is counted, the connection redialled).
package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// Entry says how a request picks its server.
type Entry string

const (
	// EntrySpread binds each connection to one server, connections spread
	// evenly (connection i to server i mod n): every server is an entry
	// point, which is how Spillway is meant to be used.
	EntrySpread Entry = "spread"
	// EntryHashed picks the server by key, crc32(key) mod n, like
	// gomemcache's default selector; each worker then holds one connection
	// per server.
	EntryHashed Entry = "hashed"
)

// Ratio is the mix of gets to sets, as in "9:1".
type Ratio struct {
	Gets, Sets int
}

// String formats r as "gets:sets".
func (r Ratio) String() string { return fmt.Sprintf("%d:%d", r.Gets, r.Sets) }

// ParseRatio parses "gets:sets" (e.g. "9:1", "1:0").
func ParseRatio(s string) (Ratio, error) {
	g, st, ok := strings.Cut(s, ":")
	gets, err1 := strconv.Atoi(strings.TrimSpace(g))
	sets, err2 := strconv.Atoi(strings.TrimSpace(st))
	if !ok || err1 != nil || err2 != nil || gets < 0 || sets < 0 || gets+sets == 0 {
		return Ratio{}, fmt.Errorf("bench: ratio %q: want gets:sets, e.g. 9:1", s)
	}
	return Ratio{Gets: gets, Sets: sets}, nil
}

// Size is a value size range in bytes; Min == Max is a fixed size.
type Size struct {
	Min, Max int
}

// String formats s as "n" or "min-max".
func (s Size) String() string {
	if s.Max <= s.Min {
		return strconv.Itoa(s.Min)
	}
	return fmt.Sprintf("%d-%d", s.Min, s.Max)
}

// ParseSize parses "n" or "min-max" (bytes).
func ParseSize(s string) (Size, error) {
	a, b, isRange := strings.Cut(s, "-")
	lo, err1 := strconv.Atoi(strings.TrimSpace(a))
	hi, err2 := lo, error(nil)
	if isRange {
		hi, err2 = strconv.Atoi(strings.TrimSpace(b))
	}
	if err1 != nil || err2 != nil || lo < 1 || hi < lo {
		return Size{}, fmt.Errorf("bench: value size %q: want n or min-max, n >= 1", s)
	}
	return Size{Min: lo, Max: hi}, nil
}

// Config describes a run. The zero value of every field but Servers is
// usable; defaults are given on each field.
type Config struct {
	// Servers are the targets, host:port. At least one.
	Servers []string
	// Entry picks a request's server; "" means EntrySpread.
	Entry Entry
	// Conns is the number of workers (concurrent clients); 0 means 50.
	// With EntrySpread each worker has one connection; with EntryHashed one
	// per server.
	Conns int
	// Pipeline is the number of requests a worker keeps in flight; 0 means 1.
	Pipeline int
	// Duration bounds the measured phase in time; Requests bounds it in
	// count. Either or both; if both are 0, Duration is 10s.
	Duration time.Duration
	Requests int64
	// Keys is the key space size; 0 means 100,000.
	Keys int
	// Zipf is the popularity skew: key rank k is drawn with probability
	// proportional to 1/k^Zipf. 0 means uniform.
	Zipf float64
	// Ratio is the get:set mix; zero means 9:1.
	Ratio Ratio
	// ValueSize is the size of set values; zero means 100 bytes. Values are
	// never shorter than their self-check header (about len(key)+30 bytes).
	ValueSize Size
	// Prefill sets every key once (not measured) before the run, so gets hit
	// from the start.
	Prefill bool
	// Rate, if > 0, makes the run open-loop: requests are scheduled at this
	// total rate (per second) regardless of replies, and latency is measured
	// from the scheduled time, so a stalled server shows as latency rather
	// than as fewer requests (no coordinated omission). The number of
	// requests is then fixed: Requests, or Rate*Duration.
	Rate float64
	// HotKeyAt and HotShare describe a flash sale: from HotKeyAt after the
	// start, a fraction HotShare of requests go to one (previously cold) key.
	// HotShare 0 disables it.
	HotKeyAt time.Duration
	HotShare float64
	// Seed seeds the workload; the same seed gives each worker the same
	// sequence of requests.
	Seed int64
	// KeyPrefix is prepended to key indexes; "" means "bench:".
	KeyPrefix string
	// Timeout bounds dialing, each stats call and waiting for any reply;
	// 0 means 5s. A request without a reply in time is a "timeout" error.
	Timeout time.Duration
	// TLS, if set, makes every connection (the load's and the stats
	// calls') speak TLS with it. Its ServerName, if empty, is each
	// server's host.
	TLS *tls.Config
	// Interval is the throughput sampling period (time series and progress
	// line); 0 means 1s.
	Interval time.Duration
	// Progress, if non-nil, receives a live progress line (rewritten with
	// \r) every Interval. See TerminalProgress.
	Progress io.Writer
	// Observe, if set, is called once for every request of the measured
	// phase when it ends, from the goroutine that read its reply: calls
	// are concurrent, so it must be safe for concurrent use, and quick.
	// It lets a caller slice a run by server, key or time (a fault test
	// asks for the latency at the nodes a fault spared, and when errors
	// came).
	Observe func(Observation)
}

// Observation is one request of the measured phase, for Config.Observe.
type Observation struct {
	Server int  // the entry server it was sent to, an index in Config.Servers
	Key    int  // the key's index
	Set    bool // a set; else a get
	// Result is "hit" or "miss" for a get that succeeded, "" for a set
	// that stored, else the error kind (a key of Report.Errors; "corrupt"
	// is a wrong value).
	Result  string
	Start   time.Time     // issued (closed loop) or scheduled (open loop)
	Latency time.Duration // from Start until the reply (or the failure)
}

// Defaults for zero Config fields.
const (
	DefaultConns    = 50
	DefaultKeys     = 100_000
	DefaultDuration = 10 * time.Second
	DefaultTimeout  = 5 * time.Second
	DefaultValue    = 100
	// MaxKeys bounds Keys: the run keeps 4 bytes per key.
	MaxKeys = 100_000_000
)

// ErrCorrupt is returned (wrapped) by Run when a get returned a value that
// this tool could not have written for the key.
var ErrCorrupt = errCorrupt

// TerminalProgress returns f if it is a terminal (character device), else
// nil: a progress line is noise in a log file or a pipe.
func TerminalProgress(f *os.File) io.Writer {
	if f == nil {
		return nil
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	return f
}

// withDefaults validates cfg and fills in defaults.
func (cfg Config) withDefaults() (Config, error) {
	if len(cfg.Servers) == 0 {
		return cfg, errors.New("bench: no servers")
	}
	cfg.Servers = append([]string(nil), cfg.Servers...)
	switch cfg.Entry {
	case "":
		cfg.Entry = EntrySpread
	case EntrySpread, EntryHashed:
	default:
		return cfg, fmt.Errorf("bench: entry %q: want %q or %q", cfg.Entry, EntrySpread, EntryHashed)
	}
	if cfg.Conns == 0 {
		cfg.Conns = DefaultConns
	}
	if cfg.Pipeline == 0 {
		cfg.Pipeline = 1
	}
	if cfg.Requests == 0 && cfg.Duration == 0 {
		cfg.Duration = DefaultDuration
	}
	if cfg.Keys == 0 {
		cfg.Keys = DefaultKeys
	}
	if cfg.Ratio == (Ratio{}) {
		cfg.Ratio = Ratio{Gets: 9, Sets: 1}
	}
	if cfg.ValueSize == (Size{}) {
		cfg.ValueSize = Size{Min: DefaultValue, Max: DefaultValue}
	}
	if cfg.ValueSize.Max < cfg.ValueSize.Min {
		cfg.ValueSize.Max = cfg.ValueSize.Min
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "bench:"
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	switch {
	case cfg.Conns < 0 || cfg.Pipeline < 0 || cfg.Keys < 0 || cfg.Requests < 0 || cfg.Duration < 0:
		return cfg, errors.New("bench: conns, pipeline, keys, requests and duration must not be negative")
	case cfg.Ratio.Gets < 0 || cfg.Ratio.Sets < 0 || cfg.ValueSize.Min < 1:
		return cfg, errors.New("bench: bad ratio or value size")
	case cfg.Keys > MaxKeys:
		return cfg, fmt.Errorf("bench: more than %d keys", MaxKeys)
	case cfg.ValueSize.Max > 1<<20:
		return cfg, errors.New("bench: value size above 1 MiB")
	case !finite(cfg.Zipf) || !finite(cfg.Rate) || !finite(cfg.HotShare):
		return cfg, errors.New("bench: zipf, rate and hot share must be finite numbers")
	case cfg.Zipf < 0 || cfg.Rate < 0 || cfg.HotShare < 0 || cfg.HotShare > 1 || cfg.HotKeyAt < 0:
		return cfg, errors.New("bench: zipf, rate, hot-key-at must be >= 0 and hot share in [0,1]")
	case cfg.Rate > 0 && cfg.Requests == 0 && cfg.Rate*cfg.Duration.Seconds() < 1:
		return cfg, errors.New("bench: rate * duration is less than one request")
	case cfg.Timeout < 0 || cfg.Interval < 0:
		return cfg, errors.New("bench: timeout and interval must be positive")
	}
	return cfg, nil
}

// finite reports whether x is neither NaN nor infinite: an infinite Zipf
// exponent would never draw a key.
func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Run runs the benchmark described by cfg against cfg.Servers and returns
// its report. It fails before loading anything if a server cannot be
// reached. Once load has started it returns the report even when it also
// returns an error: a wrapped ErrCorrupt if any value read back was wrong,
// or ctx's error if ctx ended the run early.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	e, err := newEngine(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer e.close()

	if cfg.Prefill {
		if err := e.prefill(ctx); err != nil {
			return nil, err
		}
	}
	before := readAllStats(ctx, cfg.Servers, cfg.Timeout, cfg.TLS)
	res := e.measure(ctx)
	after := readAllStats(context.WithoutCancel(ctx), cfg.Servers, cfg.Timeout, cfg.TLS)

	rep := newReport(cfg, res, before, after)
	if rep.Errors[kindCorrupt] > 0 {
		return rep, fmt.Errorf("bench: %d corrupt values, first: %w", rep.Errors[kindCorrupt], res.tally.firstCorrupt)
	}
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	return rep, nil
}
