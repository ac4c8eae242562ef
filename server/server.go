package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"spillway/internal/rawio"
	"spillway/protocol"
	"spillway/store"
)

// Version is the memcached version this node reports to clients. Clients and
// libmemcached's memccapable gate features on the memcached version, so the
// reply starts with the memcached release whose behaviour Spillway follows.
const Version = "1.6.18"

// Defaults used when the corresponding Config field is zero.
const (
	DefaultMaxBytes     = 64 << 20
	DefaultMaxItemSize  = 1 << 20
	DefaultMaxConns     = 1024
	DefaultWriteTimeout = 30 * time.Second

	DefaultOriginTimeout     = 2 * time.Second
	DefaultOriginConcurrency = 64
)

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("server: closed")

// Config configures a node. Its zero value is a usable single node.
type Config struct {
	// MaxBytes is the store's memory limit. If zero, DefaultMaxBytes.
	MaxBytes int64
	// MaxItemSize is the largest value accepted. If zero, DefaultMaxItemSize.
	MaxItemSize int
	// MaxConns limits concurrent client connections; a connection over the
	// limit is told "SERVER_ERROR too many open connections" and closed.
	// If zero, DefaultMaxConns.
	MaxConns int
	// IdleTimeout closes a client connection that sends nothing for this
	// long. If zero, connections never time out.
	IdleTimeout time.Duration
	// WriteTimeout closes a connection, client or peer, that takes none of
	// the bytes of its replies for this long: a client that stops reading
	// holds its connection's memory and goroutine only this long. If zero,
	// DefaultWriteTimeout; negative, never.
	WriteTimeout time.Duration
	// Users, if set, makes every client connection authenticate first,
	// as memcached's -Y (auth.go): user name to password.
	Users map[string]string
	// Logger receives structured logs. If nil, slog.Default().
	Logger *slog.Logger
	// Verbosity is memcached's -v level: 1 logs connection events, 2 also
	// logs every command.
	Verbosity int
	// Now is the clock. If nil, time.Now; tests inject their own.
	Now func() time.Time

	// Origin, if set, is where a read that misses everywhere loads from.
	Origin Origin
	// OriginTimeout bounds one origin load. If zero, DefaultOriginTimeout.
	OriginTimeout time.Duration
	// OriginConcurrency bounds concurrent origin loads from this node. If
	// zero, DefaultOriginConcurrency.
	OriginConcurrency int

	// Cluster, if set, makes the node a member of a cluster; nil runs it
	// alone.
	Cluster *ClusterConfig
	// LeaveTimeout bounds the graceful leave on Shutdown. If zero, 5s.
	LeaveTimeout time.Duration

	// sweepEvery is how often a port sweeps its idle connections
	// (sweepEnded). If zero, defaultSweepEvery; tests shorten it.
	sweepEvery time.Duration
}

func (c *Config) setDefaults() {
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MaxItemSize == 0 {
		c.MaxItemSize = DefaultMaxItemSize
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.sweepEvery == 0 {
		c.sweepEvery = defaultSweepEvery
	}
	if c.OriginTimeout == 0 {
		c.OriginTimeout = DefaultOriginTimeout
	}
	if c.OriginConcurrency == 0 {
		c.OriginConcurrency = DefaultOriginConcurrency
	}
	if c.LeaveTimeout == 0 {
		c.LeaveTimeout = 5 * time.Second
	}
}

// Server is one Spillway node. It is safe for concurrent use; Serve may be
// called on several listeners at once.
type Server struct {
	cfg   Config
	store *store.Store
	stats stats
	start time.Time

	cl        *cluster // nil for a single node
	rt        router   // local, or cl
	routed    bool     // reads may need more than the owned store
	origin    Origin
	originSem chan struct{}
	flights   singleflight.Group
	gens      fillGens
	uniq      *uniques // CAS uniques of a cluster node
	counters  totals
	latencies latencyTotals
	metrics   *metrics

	verbosity atomic.Int32
	// closing is set when Shutdown or Close stops the client port;
	// peersClosing when it stops the peer port, which a leaving node
	// keeps open a little longer (ClusterConfig.Drain).
	closing, peersClosing atomic.Bool

	mu        sync.Mutex
	listeners map[net.Listener]bool // true: the peer port
	conns     map[*conn]struct{}
	// sweeps counts each port's sweeps of idle connections (sweepEnded),
	// the client port's first.
	sweeps [2]atomic.Uint64
	// clientConns and peerConns count the connections in conns of each
	// port.
	clientConns, peerConns int
	// unauthed holds the peer connections that have not authenticated
	// yet, oldest first. There are at most maxUnauthed; a new one over
	// that ends the oldest, so a party without the secret that keeps
	// connections open cannot lock the other nodes out: theirs
	// authenticate in a round trip, long before they are the oldest.
	unauthed []*conn
	// refused and refusedLogged rate-limit the log of refused peer
	// connections (refusedPeer).
	refused, refusedLogged atomic.Int64
	clientWG, peerWG       sync.WaitGroup
	// warmReads counts the requests of the nodes that warm keys from this
	// one (the old tag), for drain: a leaving node waits while they come.
	warmReads atomic.Uint64
	// readers and writers are the buffers of the connections that have
	// requests to answer (conn.awaitInput).
	readers, writers sync.Pool
	// values holds the buffers (*[]byte) one-key reads copy a value
	// into (get, readKey): from the owned store, or from another node.
	values sync.Pool
	// clockBase is what request latencies and write deadlines are read
	// against (monotime).
	clockBase time.Time

	releaseOnce sync.Once
}

// New returns a node with its own store. Call Close or Shutdown to release it.
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if cfg.MaxItemSize < 0 || cfg.MaxConns < 0 || cfg.MaxBytes < 0 {
		return nil, fmt.Errorf("server: negative limit in config")
	}
	s := &Server{
		cfg:       cfg,
		start:     cfg.Now(),
		listeners: make(map[net.Listener]bool),
		conns:     make(map[*conn]struct{}),
	}
	scfg := store.Config{MaxBytes: cfg.MaxBytes, Now: cfg.Now, Engine: store.Segments}
	if cfg.Cluster != nil {
		// A cluster node serves an owned item only while the view history
		// says it owned the key throughout (ownership.go), and hands out
		// CAS uniques no other node does.
		scfg.Valid = func(key string, seq uint64) bool { return s.cl == nil || s.cl.valid(key, seq) }
		scfg.Uniques = func() uint64 { return s.uniq.next() }
	}
	st, err := store.New(scfg)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s.store = st
	s.verbosity.Store(int32(cfg.Verbosity))
	s.origin = cfg.Origin
	s.originSem = make(chan struct{}, cfg.OriginConcurrency)
	s.metrics = newMetrics(s)
	s.rt = local{s}
	s.clockBase = time.Now()
	s.readers.New = s.newReader
	s.values.New = func() any {
		// Values up to this size are read without allocating; a nil
		// buffer would have every read of the owned store carve its
		// value from a new chunk (store.copyOut).
		b := make([]byte, 0, valueBuffer)
		return &b
	}
	s.writers.New = func() any { return protocol.NewWriter(nil) }
	s.routed = cfg.Cluster != nil || cfg.Origin != nil
	if cfg.Cluster != nil {
		cl, err := newCluster(*cfg.Cluster, s)
		if err != nil {
			st.Close()
			return nil, fmt.Errorf("server: %w", err)
		}
		s.cl, s.rt = cl, cl
		// No write can reach the store before New returns: the
		// listeners are served after it.
		s.uniq = newUniques(cl.id, cfg.Now)
	}
	return s, nil
}

// ID is the node's name in the cluster ("" for a single node).
func (s *Server) ID() string { return s.rt.self() }

// ClusterSize is the number of nodes in this node's ring (1 alone).
func (s *Server) ClusterSize() int {
	if s.cl == nil {
		return 1
	}
	return s.cl.view.Load().ring.Len()
}

// GossipAddr is the address other nodes join through ("" alone).
func (s *Server) GossipAddr() string {
	if s.cl == nil {
		return ""
	}
	return s.cl.peers.GossipAddr()
}

// ServePeers accepts connections from other nodes on ln, the peer port.
// Requests there are served by this node, never routed further.
func (s *Server) ServePeers(ln net.Listener) error {
	if s.cl == nil {
		return errors.New("server: a single node has no peer port")
	}
	return s.serve(ln, true)
}

// Serve accepts client connections on ln until Shutdown or Close, serving
// each on its own goroutine. It always returns a non-nil error.
func (s *Server) Serve(ln net.Listener) error {
	return s.serve(ln, false)
}

func (s *Server) serve(ln net.Listener, peer bool) error {
	if !s.trackListener(ln, peer, true) {
		return ErrServerClosed
	}
	defer s.trackListener(ln, peer, false)
	stop := make(chan struct{})
	var sweeper sync.WaitGroup
	sweeper.Go(func() { s.sweepEnded(peer, stop) })
	defer sweeper.Wait()
	defer close(stop)
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.stopping(peer) {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscallEMFILE) {
				// Out of file descriptors or a transient accept error: back
				// off as net/http does instead of spinning.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.cfg.Logger.Warn("accept", "err", err, "retry_in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		s.counters[ctrTotalConns].Add(1)
		c := newConn(s, nc)
		c.peer = peer
		c.unauthed = peer && len(s.cl.cfg.PeerSecrets) > 0
		if !s.trackConn(c, true) {
			c.reject("SERVER_ERROR too many open connections")
			continue
		}
		go pprof.Do(context.Background(), connLabels[peer], func(context.Context) { c.serve() })
	}
}

// defaultSweepEvery is how often a port looks at its idle connections for
// a stream that ended unseen (sweepEnded).
const defaultSweepEvery = 2 * time.Second

// sweepEnded ends the idle connections of a port (peer or client) whose
// other end closed or reset them unseen, every Config.sweepEvery until
// stop.
//
// An idle connection waits before it reads (rawio.ReadIdle). When a
// client sends its last request and closes at once (a noreply set piped
// to nc, a request followed by shutdown(SHUT_WR)), the end of stream
// arrives with the request, the poller reports both at once, and the
// wait after the reply is never woken for the end: without the sweep the
// connection would stay open, half closed, for good (found by review:
// 17 of 40 such connections, counted against -c). A connection idle since
// before the last sweep whose socket holds an end of stream or an error
// is interrupted as Shutdown interrupts one: no request of it is lost,
// since nothing can arrive after the end. It costs a peek per idle
// connection per sweep, and such a connection closes within two sweeps.
func (s *Server) sweepEnded(peer bool, stop <-chan struct{}) {
	t := time.NewTicker(s.cfg.sweepEvery)
	defer t.Stop()
	var idle []*conn
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		n := s.sweeps[portIndex(peer)].Add(1)
		idle = idle[:0]
		s.mu.Lock()
		for c := range s.conns {
			if c.peer == peer && c.idle.Load() && c.idleSince.Load() < n-1 {
				idle = append(idle, c)
			}
		}
		s.mu.Unlock()
		for _, c := range idle {
			if rawio.EndPending(c.counted.Conn) {
				c.interruptIdle()
			}
		}
		clear(idle)
	}
}

// portIndex is the index of a port's entries: the client port's 0, the
// peer port's 1.
func portIndex(peer bool) int {
	if peer {
		return 1
	}
	return 0
}

// connLabels label the CPU profile samples of a connection's goroutine,
// and of those it starts, by port: "go tool pprof -tagfocus conn=peer"
// on /debug/pprof/profile shows what serving the other nodes costs a
// node, conn=client what its clients cost (the readers of the
// connections this node shares to others are conn=mux-replies, in
// peers/wire).
var connLabels = map[bool]pprof.LabelSet{false: pprof.Labels("conn", "client"), true: pprof.Labels("conn", "peer")}

// Addr-independent bookkeeping of listeners and connections, so Shutdown
// can find them.

// stopping reports whether Shutdown or Close has stopped the client port,
// or the peer port.
func (s *Server) stopping(peer bool) bool {
	if peer {
		return s.peersClosing.Load()
	}
	return s.closing.Load()
}

func (s *Server) trackListener(ln net.Listener, peer, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.stopping(peer) {
			return false
		}
		s.listeners[ln] = peer
		return true
	}
	delete(s.listeners, ln)
	return true
}

// refusedPeer counts a peer connection that failed to authenticate, and
// logs it, at most once every refusedLogEvery with the count since: a
// flood of them must not flood the log.
func (s *Server) refusedPeer(c *conn, err error) {
	s.counters[ctrRejectedConns].Add(1)
	n := s.refused.Add(1)
	now := time.Now().UnixNano()
	last := s.refusedLogged.Load()
	if now-last < int64(refusedLogEvery) || !s.refusedLogged.CompareAndSwap(last, now) {
		return
	}
	s.refused.Add(-n)
	s.cfg.Logger.Warn("peer connections refused: no valid secret", "count", n, "last_remote", c.nc.RemoteAddr().String(), "err", err)
}

const refusedLogEvery = 10 * time.Second

// maxUnauthed bounds the peer connections that have yet to authenticate.
const maxUnauthed = 16

// authed moves c out of the unauthenticated ones, once.
func (s *Server) authed(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.authedLocked(c)
}

func (s *Server) authedLocked(c *conn) {
	if !c.unauthed {
		return
	}
	c.unauthed = false
	if i := slices.Index(s.unauthed, c); i >= 0 {
		s.unauthed = slices.Delete(s.unauthed, i, i+1)
	}
}

// trackConn registers c, refusing it when the server is closing or full.
func (s *Server) trackConn(c *conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.conns, c)
		if c.peer {
			s.peerConns--
			s.peerWG.Done()
			s.authedLocked(c)
		} else {
			s.clientConns--
			s.stats.currConns.Add(-1)
			s.clientWG.Done()
		}
		return true
	}
	// Peer connections have a limit of their own: a burst of clients must
	// not lock the other nodes out of this one, nor the other way round.
	full := !c.peer && s.clientConns >= s.cfg.MaxConns ||
		c.peer && s.peerConns >= s.cl.cfg.PeerMaxConns && !(c.unauthed && len(s.unauthed) > 0)
	if s.stopping(c.peer) || full {
		s.counters[ctrRejectedConns].Add(1)
		return false
	}
	s.conns[c] = struct{}{}
	if c.peer {
		s.peerConns++
		s.peerWG.Add(1)
		if c.unauthed {
			if len(s.unauthed) >= maxUnauthed || s.peerConns > s.cl.cfg.PeerMaxConns {
				s.unauthed[0].nc.Close() // its Challenge fails; it untracks itself
				s.unauthed = s.unauthed[1:]
			}
			s.unauthed = append(s.unauthed, c)
		}
	} else {
		s.clientConns++
		s.stats.currConns.Add(1)
		s.clientWG.Add(1)
	}
	return true
}

// logf-style helpers keep verbosity checks out of the request path.
func (s *Server) verbose(level int) bool { return int(s.verbosity.Load()) >= level }

var _ io.Closer = (*Server)(nil)

// countServed counts a read at its entry node: node is who served it,
// primary whether that node owns the key, here whether it was this node.
func (s *Server) countServed(node string, primary, here bool) {
	if here {
		s.counters[ctrServed].Add(1)
	}
	if s.cl == nil {
		return
	}
	status := "displaced"
	if primary {
		status = "primary"
	}
	s.metrics.routing.WithLabelValues(node, status).Inc()
}

var pid = os.Getpid()
