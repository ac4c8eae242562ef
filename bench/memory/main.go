// Command memory runs memcached and Spillway side by side on cache-aside
// workloads and prints what each holds per MiB of resident memory and how
// often it hits at equal resident memory (`make bench-memory`; README
// "Memory").
//
// Two phases, each server a fresh process on a loopback port:
//
//  1. Capacity: both at -m 1024 (-capacity-m), filled with more 100-byte
//     items than either holds; then items held, RSS and items per MiB.
//  2. Hit ratio at equal memory: memcached at -m 64 (-m), and Spillway at
//     the -m that gives it the same RSS, and at the -m that gives it the
//     same RSS less file pages (Spillway's 23 MB binary keeps about 10 MiB
//     more of them resident than memcached's: clean page cache, shared,
//     dropped first under pressure), both worked out from a calibration
//     run of Spillway at -m 64. Each of the four traces of internal/trace
//     (Zipf 0.99, Zipf 0.8, uniform, scan mix, over -keys keys) is sent as
//     cache-aside traffic (get; on a miss, set) by -conns clients with
//     -pipeline requests in flight: -warmup requests, then -requests
//     counted ones, the same seeded key streams for every server. Every
//     value read back is checked against its key.
//
// Spillway runs with GODEBUG=gctrace=1; its collections during each phase
// are reported: the longest stop-the-world pause and the longest cycle.
//
// Every phase is bounded in requests and in time (-timeout per phase).
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"spillway/internal/trace"
)

var (
	spillwayBin  = flag.String("spillway", "bin/spillway", "Spillway binary")
	memcachedBin = flag.String("memcached", "/usr/bin/memcached", "memcached binary")
	capacityM    = flag.Int("capacity-m", 1024, "-m of the capacity phase, MiB")
	fillItems    = flag.Int("fill", 9_000_000, "items written in the capacity phase (more than either server holds)")
	hitM         = flag.Int("m", 64, "memcached's -m in the hit-ratio phase, MiB")
	keys         = flag.Int("keys", 2_000_000, "key space of the traces")
	conns        = flag.Int("conns", 8, "client connections")
	pipeline     = flag.Int("pipeline", 8, "requests in flight per connection")
	warmup       = flag.Int("warmup", 8_000_000, "requests before counting hits (S3-FIFO's counts settle later than an LRU's order: README Memory)")
	requests     = flag.Int("requests", 2_000_000, "requests counted")
	timeout      = flag.Duration("timeout", 90*time.Second, "bound on each phase of each run")
	only         = flag.String("traces", "", "comma-separated traces to run (default: all; none: no hit-ratio phase)")
	skipCapacity = flag.Bool("skip-capacity", false, "leave out the capacity phase")
)

const valueSize = 100

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-memory:", err)
		os.Exit(1)
	}
}

func run() error {
	start := time.Now()
	if !*skipCapacity {
		if err := capacity(); err != nil {
			return err
		}
	}
	workloads := trace.Workloads(*keys)
	if *only != "" {
		workloads = slices.DeleteFunc(workloads, func(w trace.Workload) bool {
			return !slices.Contains(strings.Split(*only, ","), w.Name)
		})
	}
	if len(workloads) == 0 {
		return nil
	}
	return hitRatios(workloads, start)
}

// capacity is the first phase.
func capacity() error {
	fmt.Printf("## Capacity: -m %d, %d-byte values, %d items written\n\n", *capacityM, valueSize, *fillItems)
	fmt.Println("| server | `-m` | RSS | items held | items per MiB of RSS | RSS per item | Spillway GC: longest pause / cycle |")
	fmt.Println("|---|---|---|---|---|---|---|")
	var perMiB [2]float64
	for i, kind := range []string{"memcached", "spillway"} {
		srv, err := startServer(kind, int64(*capacityM)<<20)
		if err != nil {
			return err
		}
		err = fill(srv.addr, *fillItems)
		m, items := srv.mem(), srv.items()
		srv.stop()
		if err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		perMiB[i] = float64(items) / mib(m.rss)
		fmt.Printf("| %s | %d | %s | %d | %.0f | %.1f B | %s |\n", kind, *capacityM, m, items,
			perMiB[i], float64(m.rss)/float64(items), srv.gc())
	}
	fmt.Printf("\nSpillway holds %.2f× memcached's items per MiB of RSS.\n\n", perMiB[1]/perMiB[0])
	return nil
}

// hitRatios is the second phase.
func hitRatios(workloads []trace.Workload, start time.Time) error {
	// Calibration: Spillway at memcached's -m, for the memory it takes.
	// Its RSS moves with -m byte for byte (Spillway maps what -m allows,
	// and touches all of it once full).
	mcM := int64(*hitM) << 20
	cal, err := cacheAside("spillway", mcM, &workloads[0])
	if err != nil {
		return err
	}
	fmt.Printf("## Hit ratio at equal memory: cache-aside, %d keys, %d-byte values, %d conns × pipeline %d, %d requests after %d of warm-up\n\n",
		*keys, valueSize, *conns, *pipeline, *requests, *warmup)
	fmt.Println("| trace | server | `-m` | RSS (of which file pages) | items | hit ratio | Δ points | Spillway GC: longest pause / cycle |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	var equalRSS, equalAnon int64 // Spillway's -m for memcached's RSS, and for its RSS less file pages
	for i := range workloads {
		w := &workloads[i]
		mc, err := cacheAside("memcached", mcM, w)
		if err != nil {
			return err
		}
		fmt.Printf("| %s | memcached | %d | %s | %d | %.2f %% | | |\n", w.Name, *hitM, mc.mem, mc.items, 100*mc.hitRatio)
		if equalRSS == 0 {
			equalRSS = (mcM + mc.rss - cal.rss) &^ (1<<10 - 1)
			equalAnon = (mcM + (mc.rss - mc.file) - (cal.rss - cal.file)) &^ (1<<10 - 1)
			if equalRSS <= 0 {
				return fmt.Errorf("memcached's RSS (%s) is below Spillway's without items (%s): raise -m", mc.mem, cal.mem)
			}
		}
		for _, v := range []struct {
			name string
			m    int64
		}{{"Spillway, equal RSS", equalRSS}, {"Spillway, equal RSS less file pages", equalAnon}} {
			sp, err := cacheAside("spillway", v.m, w)
			if err != nil {
				return err
			}
			fmt.Printf("| %s | %s | %.1f | %s | %d | %.2f %% | %+.2f | %s |\n", w.Name, v.name, float64(v.m)/(1<<20),
				sp.mem, sp.items, 100*sp.hitRatio, 100*(sp.hitRatio-mc.hitRatio), sp.gc)
		}
	}
	fmt.Printf("\n(Spillway at -m %d, the calibration run on %s: RSS %s, %d items, hit ratio %.2f %%.) Took %s.\n",
		*hitM, workloads[0].Name, cal.mem, cal.items, 100*cal.hitRatio, time.Since(start).Round(time.Second))
	return nil
}

// result is one cache-aside run.
type result struct {
	mem
	items    int64
	hitRatio float64
	gc       string
}

// cacheAside starts a server of kind with maxBytes and runs w against it.
func cacheAside(kind string, maxBytes int64, w *trace.Workload) (result, error) {
	srv, err := startServer(kind, maxBytes)
	if err != nil {
		return result{}, err
	}
	defer srv.stop()
	var r result
	if _, err := load(srv.addr, w, 1, *warmup); err != nil {
		return r, fmt.Errorf("%s warm-up: %w", kind, err)
	}
	srv.resetGC()
	r.hitRatio, err = load(srv.addr, w, 2, *requests)
	if err != nil {
		return r, fmt.Errorf("%s: %w", kind, err)
	}
	r.mem, r.items, r.gc = srv.mem(), srv.items(), srv.gc()
	return r, nil
}

// server is a running memcached or Spillway.
type server struct {
	kind string
	addr string
	cmd  *exec.Cmd

	mu       sync.Mutex
	maxPause time.Duration // of the Spillway collections since resetGC
	maxCycle time.Duration
	cycles   int
}

func startServer(kind string, maxBytes int64) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &server{kind: kind, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	var stderr io.ReadCloser
	switch kind {
	case "memcached":
		args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "0", "-t", "2", "-m", strconv.FormatInt(maxBytes>>20, 10)}
		if os.Geteuid() == 0 {
			args = append(args, "-u", "root") // memcached will not run as root unless told to
		}
		s.cmd = exec.Command(*memcachedBin, args...)
	default:
		s.cmd = exec.Command(*spillwayBin, "serve", "-l", "127.0.0.1", "-p", strconv.Itoa(port),
			"-m", strconv.FormatInt(maxBytes>>10, 10)+"k")
		s.cmd.Env = append(os.Environ(), "GODEBUG=gctrace=1")
		if stderr, err = s.cmd.StderrPipe(); err != nil {
			return nil, err
		}
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	if stderr != nil {
		go s.readGCTrace(stderr)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", s.addr)
		if err == nil {
			c.Close()
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("%s did not listen on %s: %w", kind, s.addr, err)
		}
	}
}

func (s *server) stop() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

// mem is a process's resident memory: all of it, and the part that is
// file pages (the binary's, mostly; clean page cache the kernel can drop).
type mem struct{ rss, file int64 }

func (m mem) String() string {
	return fmt.Sprintf("%.1f MiB (%.1f file)", mib(m.rss), mib(m.file))
}

// mem reads the server's resident memory from /proc.
func (s *server) mem() mem {
	var m mem
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			m.rss = kb << 10
		case "RssFile:":
			m.file = kb << 10
		}
	}
	return m
}

// items reads curr_items from the server's stats.
func (s *server) items() int64 {
	c, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
	if err != nil {
		return 0
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "stats\r\n")
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil || strings.HasPrefix(line, "END") {
			return 0
		}
		if f := strings.Fields(line); len(f) == 3 && f[1] == "curr_items" {
			n, _ := strconv.ParseInt(f[2], 10, 64)
			return n
		}
	}
}

// gcLine matches the clock times of a gctrace line: "gc 7 @1.2s 0%:
// 0.01+1.5+0.02 ms clock, ...": the two stop-the-world phases around the
// concurrent mark.
var gcLine = regexp.MustCompile(`^gc \d+ @[\d.]+s \d+%: ([\d.]+)\+([\d.]+)\+([\d.]+) ms clock`)

func (s *server) readGCTrace(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := gcLine.FindStringSubmatch(sc.Text())
		if m == nil {
			if !strings.Contains(sc.Text(), "level=INFO") {
				fmt.Fprintf(os.Stderr, "%s: %s\n", s.kind, sc.Text())
			}
			continue
		}
		ms := func(i int) time.Duration {
			f, _ := strconv.ParseFloat(m[i], 64)
			return time.Duration(f * float64(time.Millisecond))
		}
		if max(ms(1), ms(3)) > 5*time.Millisecond {
			fmt.Fprintf(os.Stderr, "%s: long pause: %s\n", s.kind, sc.Text())
		}
		s.mu.Lock()
		s.maxPause = max(s.maxPause, ms(1), ms(3))
		s.maxCycle = max(s.maxCycle, ms(1)+ms(2)+ms(3))
		s.cycles++
		s.mu.Unlock()
	}
}

func (s *server) resetGC() {
	s.mu.Lock()
	s.maxPause, s.maxCycle, s.cycles = 0, 0, 0
	s.mu.Unlock()
}

func (s *server) gc() string {
	if s.kind != "spillway" {
		return "—"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%.2f ms / %.1f ms (%d cycles)", float64(s.maxPause.Microseconds())/1000,
		float64(s.maxCycle.Microseconds())/1000, s.cycles)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// fill writes n items with noreply sets over the connections, then waits
// for each connection's writes to be done (mn, MN).
func fill(addr string, n int) error {
	return parallel(addr, func(id int, c *client) error {
		for k := id; k < n; k += *conns {
			c.set(k)
			if k%(*conns*1024) == id {
				if err := c.sync(); err != nil {
					return err
				}
			}
		}
		return c.sync()
	})
}

// load sends n requests of w's streams of seed as cache-aside traffic and
// returns the hit ratio. Every value read back must be the key's.
func load(addr string, w *trace.Workload, seed uint64, n int) (float64, error) {
	var hits, gets atomic.Int64
	err := parallel(addr, func(id int, c *client) error {
		stream := w.Stream(seed, id)
		batch := make([]int, *pipeline)
		for sent := 0; sent < n / *conns; sent += len(batch) {
			for i := range batch {
				batch[i] = stream.Next()
				c.get(batch[i])
			}
			if err := c.w.Flush(); err != nil {
				return err
			}
			for _, k := range batch {
				hit, err := c.reply(k)
				if err != nil {
					return err
				}
				if hit {
					hits.Add(1)
				} else {
					c.set(k)
				}
			}
			gets.Add(int64(len(batch)))
		}
		return c.sync()
	})
	return float64(hits.Load()) / float64(max(gets.Load(), 1)), err
}

// parallel runs fn on -conns connections at once, each bounded by
// -timeout.
func parallel(addr string, fn func(id int, c *client) error) error {
	errs := make([]error, *conns)
	var wg sync.WaitGroup
	for id := range *conns {
		wg.Go(func() {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				errs[id] = err
				return
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(*timeout))
			errs[id] = fn(id, &client{r: bufio.NewReaderSize(conn, 64<<10), w: bufio.NewWriterSize(conn, 64<<10)})
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

var padding = bytes.Repeat([]byte{'.'}, valueSize)

// client speaks just enough of the memcached text protocol.
type client struct {
	r        *bufio.Reader
	w        *bufio.Writer
	key, val []byte
}

// value is key k's value: its key, padded to valueSize, so that a value
// read back under another key is caught.
func (c *client) value(k int) []byte {
	c.val = append(append(c.val[:0], c.keyOf(k)...), padding...)[:valueSize]
	return c.val
}

func (c *client) keyOf(k int) []byte {
	c.key = strconv.AppendInt(append(c.key[:0], "key:"...), int64(k), 10)
	return c.key
}

// get sends "get <key>".
func (c *client) get(k int) {
	c.w.WriteString("get ")
	c.w.Write(c.keyOf(k))
	c.w.WriteString("\r\n")
}

// set sends "set <key> 0 0 100 noreply" and the value.
func (c *client) set(k int) {
	c.w.WriteString("set ")
	c.w.Write(c.keyOf(k))
	fmt.Fprintf(c.w, " 0 0 %d noreply\r\n", valueSize)
	c.w.Write(c.value(k))
	c.w.WriteString("\r\n")
}

// reply reads one get's reply, for key k: a value and END, or END.
func (c *client) reply(k int) (hit bool, err error) {
	for {
		line, err := c.r.ReadSlice('\n')
		switch {
		case err != nil:
			return false, err
		case bytes.HasPrefix(line, []byte("END")):
			return hit, nil
		case bytes.HasPrefix(line, []byte("VALUE ")):
			f := bytes.Fields(line)
			if n, err := strconv.Atoi(string(f[len(f)-1])); err != nil || n != valueSize {
				return false, fmt.Errorf("bad reply %q", line)
			}
			v, err := c.r.Peek(valueSize + 2)
			if err != nil {
				return false, err
			}
			if !bytes.Equal(v[:valueSize], c.value(k)) {
				return false, fmt.Errorf("key %d: read back %q", k, v[:valueSize])
			}
			c.r.Discard(valueSize + 2)
			hit = true
		default:
			return false, fmt.Errorf("unexpected reply %q", line)
		}
	}
}

// sync waits until the server has handled everything sent so far.
func (c *client) sync() error {
	c.w.WriteString("mn\r\n")
	if err := c.w.Flush(); err != nil {
		return err
	}
	line, err := c.r.ReadSlice('\n')
	if err == nil && !bytes.HasPrefix(line, []byte("MN")) {
		err = fmt.Errorf("unexpected reply %q", line)
	}
	return err
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
