package server

// The history checker for coherence under membership change (issue 9): real
// nodes on loopback, concurrent gomemcache clients recording every
// operation, a membership change under load, then a porcupine check of the
// history against cacheModel (history_test.go).
//
// go test -run TestCoherence ./server/ runs a short form; with
// SPILLWAY_COHERENCE=long (make test-coherence) every load runs longer.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"spillway/ring"
)

const (
	stringKeys  = 40 // k0..k39: set, get, delete, cas (and bump, with an origin)
	counterKeys = 10 // n0..n9: numeric values, incr too; the origin has none
	loadClients = 8
)

// coherenceLoad sets how long each phase of a scenario runs.
type coherenceLoad struct {
	warm, after time.Duration // load before and after the membership change
	maxOps      int           // per client, a bound besides the time
	pace        time.Duration // if set, each client sends at most one op per pace
	checkBudget time.Duration // porcupine's time for one scenario
}

func coherenceLoadFor() coherenceLoad {
	switch {
	case os.Getenv("SPILLWAY_COHERENCE") == "long":
		// The pace keeps a key's history to some thousands of operations:
		// with the unknown outcomes of a crash, porcupine's search grows
		// fast with the length of a history.
		return coherenceLoad{warm: 4 * time.Second, after: 8 * time.Second, maxOps: 60000,
			pace: time.Millisecond, checkBudget: 100 * time.Second}
	case raceEnabled:
		return coherenceLoad{warm: 300 * time.Millisecond, after: 700 * time.Millisecond, maxOps: 3000, checkBudget: 30 * time.Second}
	default:
		return coherenceLoad{warm: 500 * time.Millisecond, after: time.Second, maxOps: 5000, checkBudget: 30 * time.Second}
	}
}

// versionedOrigin is an HTTP origin serving "o-<key>-<version>" for the
// string keys (404 for counters), after a small random delay so that fills
// overlap writes.
type versionedOrigin struct {
	mu       sync.Mutex
	versions map[string]int         // guarded by mu
	rows     map[string]*sync.Mutex // guarded by mu: see lockKey
	srv      *httptest.Server
	client   *http.Client
}

func startVersionedOrigin(t testing.TB) *versionedOrigin {
	o := &versionedOrigin{versions: map[string]int{}}
	o.srv = httptest.NewServer(o)
	o.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	t.Cleanup(func() {
		o.srv.Close()
		o.client.CloseIdleConnections()
	})
	return o
}

// ServeHTTP answers GET /<key> with the key's current version (404 for
// the counters), after a small random delay so that fills overlap writes.
// The fault tests serve it from a listener of their own.
func (o *versionedOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.URL.Path, "/")
	if strings.HasPrefix(key, "n") {
		http.NotFound(w, r)
		return
	}
	// A row being updated is read once its update is done, delete of the
	// cached key included (lockKey): the history records the update and
	// the delete as one step (opBump), so a fill must not see the new
	// version before that step is over. (Real databases give a reader the
	// committed row; the cache's delete follows the commit, and the race
	// that leaves is the one the server fences: a fill that read before
	// the update and stores after the delete.)
	o.lockKey(key)()
	o.mu.Lock()
	v := o.versions[key]
	o.mu.Unlock()
	select { // the delay is the scenario: fills in flight while writes land
	case <-time.After(time.Duration(rand.IntN(5000)) * time.Microsecond):
	case <-r.Context().Done():
		return
	}
	fmt.Fprintf(w, "o-%s-%d", key, v)
}

func (o *versionedOrigin) origin() Origin {
	return &HTTPOrigin{URL: o.srv.URL + "/{key}", MaxSize: 1 << 20, Client: o.client}
}

// lockKey serialises the database updates of one key, and returns the
// unlock. Two clients that update one row at once, each then deleting the
// key in the cache, race in any cache-aside setup: the first delete can
// land after the second update, and the next fill then reads the second
// version while the history says the first update came last. Real
// applications serialise writers of a row; so does the load.
func (o *versionedOrigin) lockKey(key string) func() {
	o.mu.Lock()
	if o.rows == nil {
		o.rows = make(map[string]*sync.Mutex)
	}
	m := o.rows[key]
	if m == nil {
		m = new(sync.Mutex)
		o.rows[key] = m
	}
	o.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// bump makes the origin's value of key a new version and returns it.
func (o *versionedOrigin) bump(key string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.versions[key]++
	return fmt.Sprintf("o-%s-%d", key, o.versions[key])
}

func initialOrigin(key string) (string, bool) {
	if strings.HasPrefix(key, "n") {
		return "", false
	}
	return "o-" + key + "-0", true
}

// clientPool is one gomemcache client per node; each operation picks one.
type clientPool struct {
	mu      sync.Mutex
	names   []string           // guarded by mu
	clients []*memcache.Client // guarded by mu
	addrs   []string           // guarded by mu: for reads with mg (metaGet)
}

func (p *clientPool) add(t testing.TB, name, addr string) {
	mc := memcache.New(addr)
	mc.Timeout = 2 * time.Second
	mc.MaxIdleConns = loadClients
	t.Cleanup(func() { mc.Close() })
	p.mu.Lock()
	defer p.mu.Unlock()
	p.names = append(p.names, name)
	p.clients = append(p.clients, mc)
	p.addrs = append(p.addrs, addr)
}

func (p *clientPool) remove(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := slices.Index(p.names, name); i >= 0 {
		p.names = slices.Delete(p.names, i, i+1)
		p.clients = slices.Delete(p.clients, i, i+1)
		p.addrs = slices.Delete(p.addrs, i, i+1)
	}
}

// pick returns a node's name, a client of it, and its address.
func (p *clientPool) pick(r *rand.Rand) (string, *memcache.Client, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := r.IntN(len(p.clients))
	return p.names[i], p.clients[i], p.addrs[i]
}

// loadGen runs the clients and records their history.
type loadGen struct {
	h      *history
	pool   *clientPool
	origin *versionedOrigin // nil: no origin
	flush  bool             // client 0 sends flush_all now and then
	stop   chan struct{}
	wg     sync.WaitGroup
	ops    [loadClients]int // per client, read after wg.Wait
}

func (g *loadGen) start(maxOps int, maxTime, pace time.Duration) {
	g.stop = make(chan struct{})
	deadline := time.Now().Add(maxTime)
	for c := range loadClients {
		r := rand.New(rand.NewPCG(9, uint64(c)))
		g.wg.Go(func() {
			var tick <-chan time.Time
			if pace > 0 {
				tk := time.NewTicker(pace)
				defer tk.Stop()
				tick = tk.C
			}
			for i := 0; i < maxOps && time.Now().Before(deadline); i++ {
				if tick != nil {
					select {
					case <-g.stop:
						return
					case <-tick:
					}
				}
				select {
				case <-g.stop:
					return
				default:
				}
				g.one(c, i, r)
				g.ops[c]++
			}
		})
	}
}

func (g *loadGen) halt() {
	close(g.stop)
	g.wg.Wait()
}

// outcome classifies a reply: known results, an unknown outcome, or a
// request that certainly never reached a node (a failed dial), which is
// not recorded at all.
func outcome(err error) (res hResult, record bool) {
	var op *net.OpError
	var cte *memcache.ConnectTimeoutError
	switch {
	case err == nil:
		return resOK, true
	case errors.Is(err, memcache.ErrCacheMiss):
		return resMiss, true
	case errors.Is(err, memcache.ErrCASConflict):
		return resExists, true
	case errors.As(err, &op) && op.Op == "dial", errors.As(err, &cte):
		return resUnknown, false
	}
	return resUnknown, true
}

// metaGet reads key with "mg <key> v" on a connection of its own, as
// gomemcache has no meta commands: a miss is memcache.ErrCacheMiss, and a
// failed dial a *net.OpError of "dial", as from gomemcache (outcome).
func metaGet(addr, key string) ([]byte, error) {
	nc, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(nc, "mg "+key+" v\r\n"); err != nil {
		return nil, err
	}
	br := bufio.NewReader(nc)
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	f := strings.Fields(line)
	switch {
	case len(f) == 1 && f[0] == "EN":
		return nil, memcache.ErrCacheMiss
	case len(f) >= 2 && f[0] == "VA":
		n, err := strconv.Atoi(f[1])
		if err != nil {
			return nil, fmt.Errorf("mg %s: %q", key, line)
		}
		data := make([]byte, n+2)
		if _, err := io.ReadFull(br, data); err != nil {
			return nil, err
		}
		return data[:n], nil
	}
	return nil, fmt.Errorf("mg %s: %q", key, line)
}

func meta(node string, err error) string {
	if err != nil && !errors.Is(err, memcache.ErrCacheMiss) && !errors.Is(err, memcache.ErrCASConflict) {
		return node + ": " + err.Error()
	}
	return node
}

// one runs one operation of client c, its i-th.
func (g *loadGen) one(c, i int, r *rand.Rand) {
	node, mc, addr := g.pool.pick(r)
	h := g.h
	if g.flush && c == 0 && r.IntN(150) == 0 {
		call := h.now()
		err := mc.FlushAll()
		if res, ok := outcome(err); ok {
			h.add(c, hInput{kind: opFlush}, call, hOutput{res: res}, meta(node, err))
		}
		return
	}
	counter := r.IntN(5) == 0
	var key, value string
	if counter {
		key = "n" + strconv.Itoa(r.IntN(counterKeys))
		value = strconv.FormatUint(uint64(c+1)*1e12+uint64(i)*1e6, 10)
	} else {
		key = "k" + strconv.Itoa(r.IntN(stringKeys))
		value = fmt.Sprintf("c%d-op%d", c, i)
	}
	call := h.now()
	switch p := r.IntN(100); {
	case p < 45: // get, or mg: a node serves each on a path of its own
		var value []byte
		var err error
		if p < 30 {
			var it *memcache.Item
			if it, err = mc.Get(key); err == nil {
				value = it.Value
			}
		} else {
			value, err = metaGet(addr, key)
		}
		res, ok := outcome(err)
		if ok && res != resUnknown { // a read that failed tells nothing
			out := hOutput{res: res}
			if res == resOK {
				out.value = string(value)
			}
			h.add(c, hInput{kind: opGet, key: key}, call, out, meta(node, err))
		}
	case p < 65: // set
		err := mc.Set(&memcache.Item{Key: key, Value: []byte(value)})
		if res, ok := outcome(err); ok {
			h.add(c, hInput{kind: opSet, key: key, value: value}, call, hOutput{res: res}, meta(node, err))
		}
	case p < 75: // delete, or with an origin sometimes bump-then-delete
		if g.origin != nil && !counter && r.IntN(2) == 0 {
			unlock := g.origin.lockKey(key)
			v := g.origin.bump(key)
			err := mc.Delete(key)
			unlock()
			res, ok := outcome(err)
			if res == resMiss {
				res = resOK
			}
			if !ok { // the bump happened; only the delete did not
				res = resUnknown
			}
			h.add(c, hInput{kind: opBump, key: key, value: v}, call, hOutput{res: res}, meta(node, err))
			return
		}
		err := mc.Delete(key)
		if res, ok := outcome(err); ok {
			h.add(c, hInput{kind: opDelete, key: key}, call, hOutput{res: res}, meta(node, err))
		}
	case p < 88 && counter: // incr
		d := uint64(1 + r.IntN(9))
		n, err := mc.Increment(key, d)
		if res, ok := outcome(err); ok {
			out := hOutput{res: res}
			if res == resOK {
				out.value = strconv.FormatUint(n, 10)
			}
			h.add(c, hInput{kind: opIncr, key: key, delta: d}, call, out, meta(node, err))
		}
	default: // gets, then cas through another random node
		it, err := mc.Get(key)
		res, ok := outcome(err)
		if !ok || res == resUnknown {
			return
		}
		out := hOutput{res: res}
		if res == resOK {
			out.value = string(it.Value)
		}
		h.add(c, hInput{kind: opGet, key: key}, call, out, meta(node, err))
		if res != resOK {
			return
		}
		node2, mc2, _ := g.pool.pick(r)
		expect := string(it.Value)
		it.Value = []byte(value)
		call = h.now()
		err = mc2.CompareAndSwap(it)
		if res, ok := outcome(err); ok {
			h.add(c, hInput{kind: opCas, key: key, expect: expect, value: value}, call, hOutput{res: res}, meta(node2, err))
		}
	}
}

// coherenceRun is one scenario's cluster under load.
type coherenceRun struct {
	t     *testing.T
	load  coherenceLoad
	opts  clusterOpts
	nodes []*testNode
	pool  *clientPool
	gen   *loadGen
}

// pause lets the load run for d: the pause is the scenario.
func (cr *coherenceRun) pause(d time.Duration) { time.Sleep(d) }

// join starts a node under load and adds it to the clients' pool.
func (cr *coherenceRun) join(name string) {
	nd := startNode(cr.t, name, cr.nodes, cr.opts)
	cr.nodes = append(cr.nodes, nd)
	cr.pool.add(cr.t, name, nd.addr)
}

// restart stops node i (gracefully or as a crash), and starts it again
// under the same name and the same client, peer and gossip ports, after
// down of load.
func (cr *coherenceRun) restart(i int, graceful bool, down time.Duration) {
	old := cr.nodes[i]
	name := old.srv.cl.id
	old.stop(cr.t, graceful)
	cr.pause(down)
	_, gport, _ := net.SplitHostPort(old.gossip)
	port, _ := strconv.Atoi(gport)
	o := cr.opts
	o.clientAddr, o.peerAddr = old.addr, old.peer
	tune := o.tune
	o.tune = func(n string, cfg *Config) {
		if tune != nil {
			tune(n, cfg)
		}
		cfg.Cluster.Peers.BindPort = port
	}
	var seeds []*testNode
	for j, nd := range cr.nodes {
		if j != i {
			seeds = append(seeds, nd)
		}
	}
	cr.nodes[i] = startNode(cr.t, name, seeds, o)
}

type coherenceScenario struct {
	name   string
	origin bool
	flush  bool
	// tune adjusts node configs (view gates); release, if set, is called
	// before the cluster stops, to let a blocked gate return.
	gate func() (tune func(string, *Config), release func())
	run  func(cr *coherenceRun)
}

func coherenceScenarios() []coherenceScenario {
	steady := func(cr *coherenceRun) { cr.pause(cr.load.warm + cr.load.after) }
	join := func(cr *coherenceRun) {
		cr.pause(cr.load.warm)
		cr.join("node3")
		waitConverged(cr.t, cr.nodes)
		cr.pause(cr.load.after)
	}
	return []coherenceScenario{
		{name: "steady", run: steady},
		{name: "steady-origin", origin: true, run: steady},
		{name: "join", run: join},
		{name: "join-origin", origin: true, run: join},
		{name: "leave", run: func(cr *coherenceRun) {
			cr.pause(cr.load.warm)
			cr.nodes[2].stop(cr.t, true)
			cr.pool.remove("node2")
			waitConverged(cr.t, cr.nodes)
			cr.pause(cr.load.after)
		}},
		{name: "crash-restart", run: func(cr *coherenceRun) {
			cr.pause(cr.load.warm)
			cr.restart(1, false, cr.load.warm)
			waitConverged(cr.t, cr.nodes)
			cr.pause(cr.load.after)
		}},
		{name: "rolling-restart", run: func(cr *coherenceRun) {
			cr.pause(cr.load.warm)
			for i := range cr.nodes {
				cr.restart(i, true, cr.load.warm/2)
				waitConverged(cr.t, cr.nodes)
				cr.pause(cr.load.warm)
			}
			cr.pause(cr.load.after)
		}},
		{name: "flush", flush: true, run: steady},
		{name: "join-held-views", gate: holdViews("node3", 2*time.Second, "node0", "node1"), run: join},
	}
}

// holdViews makes the named old nodes install the first ring that has
// joiner only after hold (or release), while the joiner already serves.
func holdViews(joiner string, hold time.Duration, on ...string) func() (func(string, *Config), func()) {
	return func() (func(string, *Config), func()) {
		released := make(chan struct{})
		var once sync.Once
		tune := func(name string, cfg *Config) {
			if !slices.Contains(on, name) {
				return
			}
			var held bool // only the applier goroutine reads and writes it
			cfg.Cluster.viewGate = func(members []string) {
				if held || !slices.Contains(members, joiner) {
					return
				}
				held = true
				select {
				case <-time.After(hold):
				case <-released:
				}
			}
		}
		return tune, func() { once.Do(func() { close(released) }) }
	}
}

func TestCoherence(t *testing.T) {
	load := coherenceLoadFor()
	for _, sc := range coherenceScenarios() {
		for _, eps := range []float64{0.25, math.Inf(1)} {
			t.Run(fmt.Sprintf("%s/eps=%v", sc.name, eps), func(t *testing.T) {
				runCoherence(t, sc, eps, load)
			})
		}
	}
}

func runCoherence(t *testing.T, sc coherenceScenario, eps float64, load coherenceLoad) {
	began := time.Now()
	opts := clusterOpts{picker: ring.PickerConfig{Epsilon: eps}, copyTTL: time.Hour}
	var release func()
	var gateTune func(string, *Config)
	if sc.gate != nil {
		gateTune, release = sc.gate()
		defer release() // before the cleanups that close the nodes
	}
	opts.tune = func(name string, cfg *Config) {
		cfg.Cluster.InvalidateTimeout = 2 * time.Second
		if gateTune != nil {
			gateTune(name, cfg)
		}
	}
	var model = cacheModel(nil)
	var vo *versionedOrigin
	if sc.origin {
		vo = startVersionedOrigin(t) // its cleanup runs after the nodes'
		opts.origin = vo.origin()
		model = cacheModel(initialOrigin)
	}
	cr := &coherenceRun{t: t, load: load, opts: opts, pool: &clientPool{}}
	cr.nodes = startCluster(t, 3, opts)
	for _, nd := range cr.nodes {
		cr.pool.add(t, nd.srv.cl.id, nd.addr)
	}
	cr.gen = &loadGen{h: newHistory(), pool: cr.pool, origin: vo, flush: sc.flush}
	cr.gen.start(load.maxOps, 20*(load.warm+load.after)+30*time.Second, load.pace)
	func() {
		defer cr.gen.halt() // also when the scenario fails
		sc.run(cr)
	}()
	if release != nil {
		release()
	}
	ran := time.Since(began)
	var inval, lost, dead, merges, peerErrs, spilled, origin uint64
	for _, nd := range cr.nodes {
		if !nd.closed {
			inval += nd.srv.counters[ctrInvalidations].Load()
			lost += nd.srv.counters[ctrLostInvalidations].Load()
			dead += nd.srv.counters[ctrDeclaredDead].Load()
			merges += nd.srv.counters[ctrMergeDrops].Load()
			peerErrs += nd.srv.counters[ctrPeerErrors].Load()
			spilled += nd.srv.counters[ctrSpilledServed].Load()
			origin += nd.srv.counters[ctrOriginFetches].Load()
		}
	}
	t.Logf("live nodes: %d spilled fills, %d invalidations sent (%d lost: the contract's exception), %d peer errors, %d origin loads, %d times a node learned it had been declared dead, %d merge drops",
		spilled, inval, lost, peerErrs, origin, dead, merges)
	ops := cr.gen.h.operations()
	checkStart := time.Now()
	res := checkHistory(model, ops, load.checkBudget, t.Name())
	t.Logf("%d operations checked (%d unknown outcome) on %d keys: %d violations (keys %v); run %v, check %v",
		res.ops, res.unknown, res.keys, len(res.illegal), res.illegal,
		ran.Round(time.Millisecond), time.Since(checkStart).Round(time.Millisecond))
	if len(res.timedOut) > 0 {
		t.Logf("porcupine timed out (not counted as violations) on keys %v", res.timedOut)
	}
	if len(res.illegal) > 0 {
		for _, k := range res.illegal[:min(3, len(res.illegal))] {
			for _, s := range staleHits(ops, k, 2) {
				t.Logf("stale hit: %s", s)
			}
		}
		t.Errorf("not linearizable: %d of %d keys; visualisation: %s", len(res.illegal), res.keys, res.visualization)
	}
}
