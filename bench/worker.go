package bench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// engine holds what the workers of one run share.
type engine struct {
	cfg      Config
	run      uint32          // random per run: tells this run's values from earlier ones
	base     time.Time       // offsets (op.start, plan times) count from here
	versions []atomic.Uint32 // per key: highest version issued by this run
	workers  []*worker
	// cancelled is the run's ctx.Done(): once closed, connection failures
	// are the run's own doing and not errors.
	cancelled <-chan struct{}
	// observe is Config.Observe from the measured phase on; nil before.
	// Set before that phase's workers start, read by the readers of the
	// ops they send.
	observe func(Observation)
}

// worker is one client: it generates requests and writes them; its
// connections' readers complete them.
type worker struct {
	e      *engine
	id     int
	addrs  []string // one per slot: spread, the worker's server; hashed, all
	conns  []*conn  // current connection per slot; nil until redialled
	old    []*conn  // retired connections whose readers may still run
	nextAt []time.Time
	free   chan *op
	wl     *workload
	val    []byte // scratch for set values

	// mu guards t, which the readers of all of this worker's connections
	// record into.
	mu sync.Mutex
	t  *tally

	done, errs atomic.Int64 // finished requests and errors, for the sampler
}

func newEngine(ctx context.Context, cfg Config) (*engine, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	e := &engine{
		cfg:      cfg,
		run:      binary.LittleEndian.Uint32(b[:]),
		base:     time.Now(),
		versions: make([]atomic.Uint32, cfg.Keys),
	}
	e.cancelled = ctx.Done()
	for i := range cfg.Conns {
		w := &worker{e: e, id: i, free: make(chan *op, cfg.Pipeline), wl: newWorkload(&cfg, i)}
		w.t = newTally()
		if cfg.Entry == EntryHashed {
			w.addrs = cfg.Servers
		} else {
			w.addrs = []string{cfg.Servers[i%len(cfg.Servers)]}
		}
		for range cfg.Pipeline {
			w.free <- &op{key: make([]byte, 0, len(cfg.KeyPrefix)+20)}
		}
		w.conns = make([]*conn, len(w.addrs))
		w.nextAt = make([]time.Time, len(w.addrs))
		e.workers = append(e.workers, w)
	}
	// Dial everything up front: an unreachable server is a usage error, not
	// a stream of "conn" errors.
	for _, w := range e.workers {
		for s, addr := range w.addrs {
			if err := ctx.Err(); err != nil {
				e.close()
				return nil, err
			}
			c, err := dial(w, addr, cfg.Pipeline, cfg.Timeout)
			if err != nil {
				e.close()
				return nil, fmt.Errorf("bench: %w", err)
			}
			w.conns[s] = c
		}
	}
	return e, nil
}

// close closes every connection and waits for the readers.
func (e *engine) close() {
	for _, w := range e.workers {
		for _, c := range w.conns {
			if c != nil {
				c.retire()
				w.old = append(w.old, c)
			}
		}
		w.conns = nil
		for _, c := range w.old {
			<-c.exited
		}
		w.old = nil
	}
}

func (e *engine) since() time.Duration { return time.Since(e.base) }

// plan bounds one phase for one worker.
type plan struct {
	prefill  bool
	count    int64         // >= 0: exactly this many requests; -1: unbounded
	tokens   *atomic.Int64 // closed loop with Requests: shared budget
	deadline time.Duration // closed loop with Duration: stop issuing at this offset
	// Open loop: request i is due at first + i*every; none is sent after stop.
	open    bool
	first   time.Duration
	every   float64 // nanoseconds
	stop    time.Duration
	hotFrom time.Duration // offset the hot key turns hot
}

// runPhase issues requests under p, then waits until every one has finished.
func (w *worker) runPhase(ctx context.Context, p plan) {
	e := w.e
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for i := int64(0); p.count < 0 || i < p.count; i++ {
		if ctx.Err() != nil {
			break
		}
		now := e.since()
		at := now
		if p.open {
			if now >= p.stop {
				w.addErrors(kindUnsent, p.count-i)
				break
			}
			at = p.first + time.Duration(float64(i)*p.every)
			if wait := at - now; wait > 20*time.Microsecond {
				// Flush before idling: what was written is due now.
				w.flush()
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				select {
				case <-timer.C:
				case <-ctx.Done():
				}
				if ctx.Err() != nil {
					break
				}
			}
		} else {
			if p.deadline > 0 && now >= p.deadline {
				break
			}
			if p.tokens != nil && p.tokens.Add(-1) < 0 {
				break
			}
		}
		o := w.acquire(ctx)
		if o == nil {
			break
		}
		if p.prefill {
			o.kind, o.index = opSet, w.id+int(i)*e.cfg.Conns
		} else {
			o.kind, o.index = w.wl.kind(), w.wl.key(at >= p.hotFrom)
		}
		if !p.open {
			at = e.since()
		}
		o.start = at
		w.send(ctx, o)
	}
	w.flush()
	w.drain(ctx)
}

func (w *worker) addErrors(kind string, n int64) {
	w.mu.Lock()
	w.t.errors[kind] += n
	w.mu.Unlock()
	w.errs.Add(n)
	w.done.Add(n)
}

// acquire returns a free op, flushing first if it has to wait for one (the
// pipeline is full: what is buffered must go out for replies to come back).
func (w *worker) acquire(ctx context.Context) *op {
	select {
	case o := <-w.free:
		return o
	default:
	}
	w.flush()
	select {
	case o := <-w.free:
		return o
	case <-ctx.Done():
		return nil
	}
}

func (w *worker) flush() {
	for _, c := range w.conns {
		if c != nil {
			c.flush()
		}
	}
}

// send routes o to its connection, redialling a dead one.
func (w *worker) send(ctx context.Context, o *op) {
	e := w.e
	o.key = appendKey(o.key[:0], e.cfg.KeyPrefix, o.index)
	slot := 0 // spread: the worker's one connection, to server id mod n
	o.server = w.id % len(e.cfg.Servers)
	if e.cfg.Entry == EntryHashed {
		slot = pickHashed(o.key, len(w.conns))
		o.server = slot
	}
	c := w.conns[slot]
	if c == nil || c.isDead() {
		if c = w.redial(ctx, slot); c == nil {
			w.finish(o, kindConn, nil)
			return
		}
	}
	var val []byte
	if o.kind == opSet {
		ver := e.versions[o.index].Add(1) // before the set is sent: see checkValue
		w.val = appendValue(w.val[:0], o.key, e.run, ver, w.wl.valueSize())
		val = w.val
	}
	c.send(o, val, e.cfg.Timeout)
}

// redial replaces the connection in slot, no more often than every 100ms
// per slot, so a server that is down costs one error per attempt instead of
// a busy loop.
func (w *worker) redial(ctx context.Context, slot int) *conn {
	if old := w.conns[slot]; old != nil {
		old.retire()
		w.old = append(w.old, old)
		w.conns[slot] = nil
	}
	if wait := time.Until(w.nextAt[slot]); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil
		}
	}
	w.nextAt[slot] = time.Now().Add(100 * time.Millisecond)
	c, err := dial(w, w.addrs[slot], w.e.cfg.Pipeline, w.e.cfg.Timeout)
	if err != nil {
		return nil
	}
	w.conns[slot] = c
	return c
}

// drain waits until every op is back. Each reply wait is bounded by the
// read deadline; if ctx ends, closing the connections fails the rest at once.
func (w *worker) drain(ctx context.Context) {
	ops := make([]*op, 0, cap(w.free))
	done := ctx.Done()
	for len(ops) < cap(w.free) {
		select {
		case o := <-w.free:
			ops = append(ops, o)
		case <-done:
			for _, c := range w.conns {
				if c != nil {
					_ = c.nc.Close()
				}
			}
			done = nil
		}
	}
	for _, o := range ops {
		w.free <- o
	}
}

// swapTally hands back what the readers counted since the last swap. Only
// between phases, when no op is in flight.
func (w *worker) swapTally() *tally {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.t
	w.t = newTally()
	w.done.Store(0)
	w.errs.Store(0)
	return t
}

// phaseResult is what a phase measured.
type phaseResult struct {
	start    time.Time
	tally    *tally
	elapsed  time.Duration
	samples  []Sample
	openLoop bool
}

// runAll runs the plan mk makes for each worker on every worker and merges
// their tallies.
// start is the phase's start offset, which plans are built from.
func (e *engine) runAll(ctx context.Context, start time.Duration, mk func(w *worker) plan, sample bool) phaseResult {
	var wg sync.WaitGroup
	for _, w := range e.workers {
		p := mk(w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.runPhase(ctx, p)
		}()
	}
	var samples []Sample
	if sample {
		samples = e.sampleUntil(&wg, start)
	} else {
		wg.Wait()
	}
	res := phaseResult{start: e.base.Add(start), tally: newTally(), elapsed: e.since() - start, samples: samples}
	for _, w := range e.workers {
		res.tally.merge(w.swapTally())
	}
	return res
}

// prefill sets every key once, version 1, not measured. Key i goes to
// worker i mod Conns.
func (e *engine) prefill(ctx context.Context) error {
	n := e.cfg.Conns
	if e.cfg.Progress != nil {
		fmt.Fprintf(e.cfg.Progress, "prefilling %d keys...\n", e.cfg.Keys)
	}
	res := e.runAll(ctx, e.since(), func(w *worker) plan {
		return plan{prefill: true, count: int64((e.cfg.Keys - w.id + n - 1) / n)}
	}, false)
	if err := ctx.Err(); err != nil {
		return err
	}
	var failed int64
	for _, v := range res.tally.errors {
		failed += v
	}
	if failed > 0 {
		return fmt.Errorf("bench: prefill: %d of %d sets failed: %v", failed, e.cfg.Keys, res.tally.errors)
	}
	return nil
}

// measure runs the measured phase.
func (e *engine) measure(ctx context.Context) phaseResult {
	cfg := e.cfg
	e.observe = cfg.Observe
	start := e.since()
	var tokens *atomic.Int64
	if cfg.Rate == 0 && cfg.Requests > 0 {
		tokens = new(atomic.Int64)
		tokens.Store(cfg.Requests)
	}
	total := cfg.Requests
	if cfg.Rate > 0 && total == 0 {
		total = int64(cfg.Rate*cfg.Duration.Seconds() + 0.5)
	}
	res := e.runAll(ctx, start, func(w *worker) plan {
		p := plan{count: -1, tokens: tokens, hotFrom: start + cfg.HotKeyAt}
		if cfg.Duration > 0 {
			p.deadline = start + cfg.Duration
		}
		if cfg.Rate > 0 {
			// Worker w takes requests w, w+n, w+2n... of one global
			// schedule at 1/Rate spacing, so the sum is exactly total.
			n := int64(cfg.Conns)
			p.open, p.tokens, p.deadline = true, nil, 0
			p.count = total / n
			if int64(w.id) < total%n {
				p.count++
			}
			gap := float64(time.Second) / cfg.Rate
			p.first = start + time.Duration(float64(w.id)*gap)
			p.every = gap * float64(n)
			// Scheduled work past its window by more than Timeout is dropped
			// ("unsent"), so a server that cannot keep up cannot hold the
			// run open indefinitely.
			p.stop = start + time.Duration(float64(total)*gap) + cfg.Timeout
		}
		return p
	}, true)
	res.openLoop = cfg.Rate > 0
	return res
}
