package server

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"spillway/peers"
	"spillway/ring"
)

// An in-process cluster for routing tests. Nodes join through fakeNet's
// membership (every member learns of every change at once, no
// memberlist) and talk over net.Pipe (no sockets), so these tests run
// inside testing/synctest: the owner grace, copy TTL and timeouts pass in
// the bubble's time, as soon as every goroutine waits, and a test that
// asserts how long something took asserts it exactly.
//
// net.Pipe is unbuffered: a write returns only when the other end has
// read it, which real sockets' buffers hide. A peer exchange that writes
// all its requests before reading any reply stalls on it as it would on a
// real network once the buffers fill.

// fakeNet is the network and the gossip of one in-process cluster.
type fakeNet struct {
	mu        sync.Mutex
	listeners map[string]*pipeListener
	members   map[string]*fakeMember
	// views holds, for a member whose gossip is split off (split), the
	// members it sees; a member not in it sees all.
	views map[string]map[string]bool
	// left holds the boot ID of each member's run that left (Leave).
	left map[string]string
}

func newFakeNet() *fakeNet {
	return &fakeNet{listeners: make(map[string]*pipeListener), members: make(map[string]*fakeMember),
		left: make(map[string]string)}
}

// listen opens a listener at addr (any string: the network is fake).
func (n *fakeNet) listen(addr string) *pipeListener {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := &pipeListener{n: n, addr: addr, conns: make(chan net.Conn), done: make(chan struct{}), open: make(map[*gatedConn]bool)}
	n.listeners[addr] = l
	return l
}

// dial connects to the listener at addr, or is refused if there is none.
func (n *fakeNet) dial(ctx context.Context, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.listeners[addr]
	n.mu.Unlock()
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: "pipe", Err: syscall.ECONNREFUSED}
	}
	client, server := net.Pipe()
	gc := &gatedConn{Conn: server, l: l, closed: make(chan struct{})}
	l.gate.Lock()
	l.open[gc] = true
	l.gate.Unlock()
	select {
	case l.conns <- gc:
		return client, nil
	case <-l.done:
		return nil, &net.OpError{Op: "dial", Net: "pipe", Err: syscall.ECONNREFUSED}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// hang black-holes the node behind addr, on its connections old and new:
// what is sent to it is lost, and it answers nothing. resume ends that and
// resets the connections that lived through it, as their peers' timeouts
// would have: nothing sent during the outage arrives after it.
func (n *fakeNet) hang(addr string) { n.gate(addr, true) }

func (n *fakeNet) resume(addr string) { n.gate(addr, false) }

func (n *fakeNet) gate(addr string, hang bool) {
	n.mu.Lock()
	l := n.listeners[addr]
	n.mu.Unlock()
	l.gate.Lock()
	defer l.gate.Unlock()
	switch {
	case hang && l.resumed == nil:
		l.resumed = make(chan struct{})
	case !hang && l.resumed != nil:
		for c := range l.open {
			c.Conn.Close()
		}
		close(l.resumed)
		l.resumed = nil
	}
}

// gatedConn is the server end of a connection: it reads and writes only
// while its listener is not hung.
type gatedConn struct {
	net.Conn
	l      *pipeListener
	closed chan struct{}
	once   sync.Once
}

func (c *gatedConn) wait() error {
	c.l.gate.Lock()
	resumed := c.l.resumed
	c.l.gate.Unlock()
	if resumed == nil {
		return nil
	}
	select {
	case <-resumed:
		return nil
	case <-c.closed:
		return net.ErrClosed
	}
}

func (c *gatedConn) Read(b []byte) (int, error) {
	for {
		if err := c.wait(); err != nil {
			return 0, err
		}
		n, err := c.Conn.Read(b)
		if err != nil || !c.hung() {
			return n, err
		}
		// Hung while this read waited: the bytes are lost.
	}
}

func (c *gatedConn) hung() bool {
	c.l.gate.Lock()
	defer c.l.gate.Unlock()
	return c.l.resumed != nil
}

func (c *gatedConn) Write(b []byte) (int, error) {
	if err := c.wait(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func (c *gatedConn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		c.l.gate.Lock()
		delete(c.l.open, c)
		c.l.gate.Unlock()
	})
	return c.Conn.Close()
}

// pipeListener is a net.Listener on fakeNet.
type pipeListener struct {
	n     *fakeNet
	addr  string
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once

	gate    sync.Mutex
	resumed chan struct{}       // guarded by gate; open while hung
	open    map[*gatedConn]bool // guarded by gate
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.n.mu.Lock()
		if l.n.listeners[l.addr] == l {
			delete(l.n.listeners, l.addr)
		}
		l.n.mu.Unlock()
	})
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr(l.addr) }

type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }

// join is ClusterConfig.join on fakeNet: the member is in every member's
// ring as soon as it returns.
func (n *fakeNet) join(cfg peers.Config, onChange func(*ring.Ring)) (membership, error) {
	m := &fakeMember{n: n, name: cfg.Name, meta: cfg.Meta, vnodes: cfg.VNodes, onChange: onChange}
	m.meta.Weight = max(m.meta.Weight, 1)
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, dup := n.members[cfg.Name]; dup {
		return nil, fmt.Errorf("fake gossip: %s is a member already", cfg.Name)
	}
	n.members[cfg.Name] = m
	n.publishLocked()
	return m, nil
}

// drop takes a member out of every other member's ring, as gossip does
// when it leaves or is declared dead.
func (n *fakeNet) drop(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.members[name]; ok {
		delete(n.members, name)
		n.publishLocked()
	}
}

// split partitions the gossip, not the network: each member named sees
// only those named, every other member only the others, as if a
// partition had outlasted failure detection on both sides. heal ends it
// for the members named (all when none is), one side first if the test
// wants: their gossip brings the others back while the others' lags.
func (n *fakeNet) split(side ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	in, out := make(map[string]bool), make(map[string]bool)
	for name := range n.members {
		if slices.Contains(side, name) {
			in[name] = true
		} else {
			out[name] = true
		}
	}
	n.views = make(map[string]map[string]bool)
	for name := range n.members {
		n.views[name] = out
		if in[name] {
			n.views[name] = in
		}
	}
	n.publishLocked()
}

func (n *fakeNet) heal(names ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(names) == 0 {
		n.views = nil
	}
	for _, name := range names {
		delete(n.views, name)
	}
	n.publishLocked()
}

// publishLocked tells every member the ring of the members it sees: all,
// unless split says otherwise.
func (n *fakeNet) publishLocked() {
	metas := make(map[string]peers.Meta)
	for name, m := range n.members {
		metas[name] = m.meta
	}
	for self, m := range n.members {
		var nodes []ring.Node
		for name, o := range n.members {
			if see, split := n.views[self]; !split || see[name] {
				nodes = append(nodes, ring.Node{ID: name, Weight: o.meta.Weight})
			}
		}
		sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })
		r := ring.New(nodes, ring.Config{VNodes: m.vnodes})
		m.ring.Store(r)
		m.metas.Store(&metas)
		m.onChange(r)
	}
}

// fakeMember is one node's membership on fakeNet.
type fakeMember struct {
	n        *fakeNet
	name     string
	meta     peers.Meta
	vnodes   int
	onChange func(*ring.Ring)
	ring     atomic.Pointer[ring.Ring]
	metas    atomic.Pointer[map[string]peers.Meta]
}

func (m *fakeMember) Self() string       { return m.name }
func (m *fakeMember) GossipAddr() string { return "gossip:" + m.name }
func (m *fakeMember) Ring() *ring.Ring   { return m.ring.Load() }

func (m *fakeMember) Meta(id string) (peers.Meta, bool) {
	meta, ok := (*m.metas.Load())[id]
	return meta, ok
}

// Left reports a member whose run left gracefully (Leave), as gossip
// remembers it.
func (m *fakeMember) Left(id string) (string, bool) {
	m.n.mu.Lock()
	defer m.n.mu.Unlock()
	boot, ok := m.n.left[id]
	return boot, ok
}

// Leave drops the member from every ring and remembers its run as left.
func (m *fakeMember) Leave(time.Duration) error {
	m.n.mu.Lock()
	m.n.left[m.name] = m.meta.Boot
	m.n.mu.Unlock()
	m.n.drop(m.name)
	return nil
}
func (m *fakeMember) Shutdown() error { m.n.drop(m.name); return nil }

// startPipeServer runs a single node on n at the address "client" until
// the test ends.
func startPipeServer(t *testing.T, cfg Config) (*fakeNet, *Server) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	n := newFakeNet()
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(n.listen("client"))
	t.Cleanup(func() { srv.Close() })
	return n, srv
}

// fakeNode is a node of an in-process cluster.
type fakeNode struct {
	name string
	srv  *Server
}

func (nd *fakeNode) client() string { return "client:" + nd.name }
func (nd *fakeNode) peer() string   { return "peer:" + nd.name }

// startFakeNode starts a node named name on n; tune may change its
// config. The node is closed when the test ends.
func startFakeNode(t *testing.T, n *fakeNet, name string, tune func(*Config)) *fakeNode {
	t.Helper()
	return startFakeNodeAt(t, n, name, name, tune)
}

// startFakeNodeAt is startFakeNode for a node whose client and peer
// addresses are addr's, as a pod rescheduled under the same name has
// addresses of its own.
func startFakeNodeAt(t *testing.T, n *fakeNet, name, addr string, tune func(*Config)) *fakeNode {
	t.Helper()
	nd := &fakeNode{name: addr}
	ln, pln := n.listen(nd.client()), n.listen(nd.peer())
	cfg := Config{
		Logger: quietLogger(),
		Cluster: &ClusterConfig{
			Peers: peers.Config{Name: name, Meta: peers.Meta{Client: nd.client(), Peer: nd.peer()}},
			join:  n.join,
			dial:  n.dial,
		},
	}
	if tune != nil {
		tune(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nd.srv = srv
	go srv.Serve(ln)
	go srv.ServePeers(pln)
	t.Cleanup(func() { srv.Close() })
	return nd
}

// startFakeCluster starts nodes node0..node<count-1> and waits until every
// one has installed the ring of all and its hand-off is over.
func startFakeCluster(t *testing.T, count int, tune func(*Config)) (*fakeNet, []*fakeNode) {
	t.Helper()
	n := newFakeNet()
	var nodes []*fakeNode
	for i := range count {
		nodes = append(nodes, startFakeNode(t, n, fmt.Sprintf("node%d", i), tune))
	}
	settle(t, nodes)
	return n, nodes
}

// settle waits until every node's view holds all of nodes and is
// settled.
func settle(t *testing.T, nodes []*fakeNode) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // the bubble's time: instant
	for _, nd := range nodes {
		for {
			v := nd.srv.cl.view.Load()
			if v.ring.Len() == len(nodes) && isClosed(v.done) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: view of %d members, want %d", nd.name, v.ring.Len(), len(nodes))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// dialPipe opens a raw connection to addr on n.
func dialPipe(t *testing.T, n *fakeNet, addr string) *rawConn {
	t.Helper()
	nc, err := n.dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, r: bufio.NewReader(nc)}
}

// ownedBy returns count keys named prefix<i> that owner owns in nd's
// view.
func ownedBy(nd *fakeNode, owner, prefix string, count int) []string {
	var keys []string
	r := nd.srv.cl.view.Load().ring
	for i := 0; len(keys) < count; i++ {
		if k := fmt.Sprintf("%s%d", prefix, i); r.Owner(k) == owner {
			keys = append(keys, k)
		}
	}
	return keys
}
