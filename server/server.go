package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

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
	metrics   *metrics

	verbosity atomic.Int32
	closing   atomic.Bool

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	// clientConns counts the client connections in conns (peers aside).
	clientConns int
	connWG      sync.WaitGroup

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
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*conn]struct{}),
	}
	scfg := store.Config{MaxBytes: cfg.MaxBytes, Now: cfg.Now}
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
	if !s.trackListener(ln, true) {
		return ErrServerClosed
	}
	defer s.trackListener(ln, false)
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
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
		if !s.trackConn(c, true) {
			c.reject("SERVER_ERROR too many open connections")
			continue
		}
		go c.serve()
	}
}

// Addr-independent bookkeeping of listeners and connections, so Shutdown
// can find them.

func (s *Server) trackListener(ln net.Listener, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.closing.Load() {
			return false
		}
		s.listeners[ln] = struct{}{}
		return true
	}
	delete(s.listeners, ln)
	return true
}

// trackConn registers c, refusing it when the server is closing or full.
func (s *Server) trackConn(c *conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.conns, c)
		if !c.peer {
			s.clientConns--
			s.stats.currConns.Add(-1)
		}
		s.connWG.Done()
		return true
	}
	// Peer connections do not count against the client limit: a burst of
	// clients must not lock the other nodes out of this one.
	if s.closing.Load() || (!c.peer && s.clientConns >= s.cfg.MaxConns) {
		s.counters[ctrRejectedConns].Add(1)
		return false
	}
	s.conns[c] = struct{}{}
	if !c.peer {
		s.clientConns++
		s.stats.currConns.Add(1)
	}
	s.connWG.Add(1)
	return true
}

// Shutdown stops accepting connections, lets every connection finish the
// requests it has already received, and returns when all have closed or ctx
// is done; then it closes the remaining connections and the store.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.cl != nil {
		// Own nothing from now on (writes here are refused, reads go to
		// the others), then leave, so the others route around this node
		// while it finishes what it has.
		s.cl.leave()
		s.cl.peers.Leave(s.cfg.LeaveTimeout)
	}
	s.mu.Lock()
	s.closing.Store(true)
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		c.interruptIdle()
	}
	s.mu.Unlock()

	done := make(chan struct{})
	go func() { s.connWG.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		s.closeConns()
		<-done
	}
	s.release()
	return err
}

// release frees what New made, once.
func (s *Server) release() {
	s.releaseOnce.Do(func() {
		if s.cl != nil {
			s.cl.close()
		}
		s.store.Close()
	})
}

// Close closes every listener and connection at once and releases the store.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closing.Store(true)
	for ln := range s.listeners {
		ln.Close()
	}
	s.mu.Unlock()
	s.closeConns()
	s.connWG.Wait()
	s.release()
	return nil
}

func (s *Server) closeConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.nc.Close()
	}
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
