package main

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"spillway/internal/loopback"
	"spillway/peers"
	"spillway/ring"
	"spillway/server"
)

// serveFlags are the flags of "spillway serve". Where memcached has a flag
// for the same thing, the short form is memcached's.
type serveFlags struct {
	listen          string
	port            int
	memoryBytes     int64
	connLimit       int
	maxItemSize     int64
	verbose         int
	idleTimeout     time.Duration
	writeTimeout    time.Duration
	shutdownTimeout time.Duration
	logFormat       string

	// cluster
	name          string
	gossip        string
	advertise     string
	join          string
	gossipKey     string
	weight        int
	peerListen    string
	epsilon       float64
	load          string
	spillOrder    string
	vnodes        int
	copyMemory    int64
	copyTTL       time.Duration
	peerTimeout   time.Duration
	ownerGrace    time.Duration
	invalidate    time.Duration
	origin        string
	originTimeout time.Duration
	originConc    int
	metrics       string
}

func (f *serveFlags) options() []option {
	return []option{
		{"l", "listen", &stringValue{&f.listen}, "address to listen on for clients, HOST or HOST:PORT"},
		{"p", "port", &intValue{&f.port}, "TCP port for clients when --listen has none"},
		{"m", "memory-limit", &sizeValue{p: &f.memoryBytes, unit: 1 << 20}, "item memory in MiB (or with a k/m/g suffix)"},
		{"c", "conn-limit", &intValue{&f.connLimit}, "maximum simultaneous client connections (peer connections aside)"},
		{"I", "max-item-size", &sizeValue{p: &f.maxItemSize, unit: 1}, "largest value accepted, in bytes (or with a k/m suffix)"},
		{"v", "verbose", &countValue{&f.verbose}, "log connections (-v) and every command (-vv)"},
		{"", "idle-timeout", &durationValue{&f.idleTimeout}, "close client connections idle this long (0: never)"},
		{"", "write-timeout", &durationValue{&f.writeTimeout}, "close connections that take none of their replies for this long (0: never)"},
		{"", "shutdown-timeout", &durationValue{&f.shutdownTimeout}, "on SIGINT/SIGTERM, how long in-flight requests may take to finish"},
		{"", "log-format", &stringValue{&f.logFormat}, "log format: text or json"},
		{"", "name", &stringValue{&f.name}, "node ID in the cluster; stable across restarts (default HOST:GOSSIP-PORT)"},
		{"", "gossip", &stringValue{&f.gossip}, "HOST:PORT for membership gossip (UDP and TCP); empty runs the node alone"},
		{"", "advertise", &stringValue{&f.advertise}, "HOST or HOST:PORT the other nodes should use for gossip, client and peer traffic (for NAT or a 0.0.0.0 listener)"},
		{"", "join", &stringValue{&f.join}, "comma-separated HOST:PORT gossip addresses of any running nodes"},
		{"", "gossip-key", &stringValue{&f.gossipKey}, "base64 key of 16, 24 or 32 bytes that encrypts gossip; the same on every node"},
		{"", "weight", &intValue{&f.weight}, "capacity relative to the other nodes (more vnodes, more load)"},
		{"", "peer-listen", &stringValue{&f.peerListen}, "HOST:PORT for requests from other nodes (default: client port + 10000)"},
		{"", "epsilon", &floatValue{&f.epsilon}, "bounded-load slack: no node gets more than (1+epsilon) times the mean load; inf turns it off"},
		{"", "load", &stringValue{&f.load}, "load measure for the bound: rate (EWMA of requests) or inflight"},
		{"", "spill-order", &stringValue{&f.spillOrder}, "where overflow goes: ring (clockwise) or probe (per-key random jumps)"},
		{"", "vnodes", &intValue{&f.vnodes}, "virtual nodes per unit of weight; the same on every node (0: 160)"},
		{"", "copy-memory", &sizeValue{p: &f.copyMemory, unit: 1 << 20}, "memory in MiB for copies of keys other nodes own"},
		{"", "copy-ttl", &durationValue{&f.copyTTL}, "how long a copy lives at most (bounds staleness when an invalidation is lost)"},
		{"", "peer-timeout", &durationValue{&f.peerTimeout}, "timeout of each request to another node"},
		{"", "owner-grace", &durationValue{&f.ownerGrace}, "after a membership change, how long new owners read misses through from previous owners"},
		{"", "invalidate-timeout", &durationValue{&f.invalidate}, "how long a write waits for copies elsewhere to be dropped before it answers (a copy not dropped by then lives until --copy-ttl)"},
		{"", "origin", &stringValue{&f.origin}, "read-through origin: http://host:port/path/{key} or file:///dir"},
		{"", "origin-timeout", &durationValue{&f.originTimeout}, "timeout of one origin load"},
		{"", "origin-concurrency", &intValue{&f.originConc}, "most origin loads at once from this node"},
		{"", "metrics", &stringValue{&f.metrics}, "HOST:PORT serving Prometheus /metrics, /debug/ring and /debug/pprof/ (empty: off)"},
	}
}

func defaultServeFlags() serveFlags {
	return serveFlags{
		listen:          "127.0.0.1",
		port:            11211,
		memoryBytes:     server.DefaultMaxBytes,
		connLimit:       server.DefaultMaxConns,
		maxItemSize:     server.DefaultMaxItemSize,
		shutdownTimeout: 10 * time.Second,
		logFormat:       "text",
		weight:          1,
		epsilon:         ring.DefaultEpsilon,
		load:            "rate",
		spillOrder:      "ring",
		copyMemory:      server.DefaultCopyMaxBytes,
		copyTTL:         server.DefaultCopyTTL,
		peerTimeout:     server.DefaultPeerTimeout,
		ownerGrace:      server.DefaultOwnerGrace,
		invalidate:      server.DefaultInvalidateTimeout,
		originTimeout:   server.DefaultOriginTimeout,
		originConc:      server.DefaultOriginConcurrency,
		writeTimeout:    server.DefaultWriteTimeout,
	}
}

// addr joins --listen and --port the way memcached's -l and -p combine.
func (f *serveFlags) addr() string {
	if _, _, err := net.SplitHostPort(f.listen); err == nil {
		return f.listen
	}
	return net.JoinHostPort(f.listen, strconv.Itoa(f.port))
}

func (f *serveFlags) logger(stderr io.Writer) (*slog.Logger, error) {
	level := slog.LevelInfo
	if f.verbose >= 2 {
		level = slog.LevelDebug
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: want text or json, not %q", f.logFormat)
}

func serve(args []string, stderr io.Writer) error {
	f := defaultServeFlags()
	if err := parseOptions("serve", "Usage: spillway serve [flags]", f.options(), args, stderr); err != nil {
		return err
	}
	log, err := f.logger(stderr)
	if err != nil {
		return err
	}
	cfg := server.Config{
		MaxBytes:          f.memoryBytes,
		MaxItemSize:       int(f.maxItemSize),
		MaxConns:          f.connLimit,
		IdleTimeout:       f.idleTimeout,
		WriteTimeout:      cmp.Or(f.writeTimeout, -1), // 0 on the command line: never
		Logger:            log,
		Verbosity:         f.verbose,
		OriginTimeout:     f.originTimeout,
		OriginConcurrency: f.originConc,
	}
	if f.origin != "" {
		if cfg.Origin, err = server.ParseOrigin(f.origin, int(f.maxItemSize)); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", f.addr())
	if err != nil {
		return err
	}
	var peerLn net.Listener
	if f.gossip != "" {
		if peerLn, err = net.Listen("tcp", f.peerAddr(ln.Addr())); err != nil {
			ln.Close()
			return err
		}
		if cfg.Cluster, err = f.cluster(ln.Addr(), peerLn.Addr(), log); err != nil {
			ln.Close()
			peerLn.Close()
			return err
		}
	}
	// Bind the metrics port before joining: a node that cannot start
	// must not have joined the cluster.
	var mln net.Listener
	if f.metrics != "" {
		if mln, err = net.Listen("tcp", f.metrics); err != nil {
			ln.Close()
			if peerLn != nil {
				peerLn.Close()
			}
			return err
		}
	}
	srv, err := server.New(cfg)
	if err != nil {
		ln.Close()
		if peerLn != nil {
			peerLn.Close()
		}
		if mln != nil {
			mln.Close()
		}
		return err
	}
	log.Info("serving", "addr", ln.Addr().String(), "node", srv.ID(), "memory_limit", f.memoryBytes,
		"max_item_size", f.maxItemSize, "conn_limit", f.connLimit, "version", spillwayVersion)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 3)
	go func() { served <- srv.Serve(ln) }()
	if peerLn != nil {
		log.Info("serving peers", "addr", peerLn.Addr().String(), "gossip", f.gossip)
		go func() { served <- srv.ServePeers(peerLn) }()
	}
	var metricsSrv *http.Server
	if mln != nil {
		metricsSrv = &http.Server{Handler: srv.MetricsHandler(), ReadHeaderTimeout: 5 * time.Second}
		log.Info("serving metrics", "addr", mln.Addr().String())
		go metricsSrv.Serve(mln)
	}
	select {
	case err := <-served:
		srv.Close()
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", f.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
	defer cancel()
	// The node first (it leaves the cluster and drains its clients), then
	// the metrics, which may be serving a long profile.
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("shutdown: connections still open were closed", "err", err)
	}
	if metricsSrv != nil {
		metricsSrv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, server.ErrServerClosed) {
		return err
	}
	log.Info("stopped")
	return nil
}

// peerAddr is --peer-listen, or the client address with the port + 10000.
func (f *serveFlags) peerAddr(client net.Addr) string {
	if f.peerListen != "" {
		return f.peerListen
	}
	host, port, _ := net.SplitHostPort(client.String())
	p, _ := strconv.Atoi(port)
	if p == 0 || p+10000 > 65535 {
		return net.JoinHostPort(host, "0")
	}
	return net.JoinHostPort(host, strconv.Itoa(p+10000))
}

// cluster turns the cluster flags into a ClusterConfig. The addresses the
// node advertises are the listeners' own, with --advertise's host when the
// listeners are bound to every interface or behind NAT.
func (f *serveFlags) cluster(client, peer net.Addr, log *slog.Logger) (*server.ClusterConfig, error) {
	ghost, gport, err := splitPort(f.gossip, 7946)
	if err != nil {
		return nil, fmt.Errorf("--gossip: %w", err)
	}
	pc := peers.Config{
		Name:      f.name,
		BindAddr:  ghost,
		BindPort:  gport,
		Logger:    log,
		VNodes:    f.vnodes,
		JoinRetry: 10 * time.Second,
	}
	advHost := ""
	if f.advertise != "" {
		h, p, err := splitPort(f.advertise, gport)
		if err != nil {
			return nil, fmt.Errorf("--advertise: %w", err)
		}
		advHost, pc.AdvertiseAddr, pc.AdvertisePort = h, h, p
	}
	if loopback.Is(ghost) {
		pc.Profile = peers.Local
	}
	for _, j := range strings.Split(f.join, ",") {
		if j = strings.TrimSpace(j); j != "" {
			pc.Join = append(pc.Join, j)
		}
	}
	if f.gossipKey != "" {
		key, err := base64.StdEncoding.DecodeString(f.gossipKey)
		if err != nil {
			return nil, fmt.Errorf("--gossip-key: not base64: %w", err)
		}
		pc.SecretKey = key
	}
	pc.Meta = peers.Meta{Client: advertised(client, advHost), Peer: advertised(peer, advHost), Weight: max(f.weight, 1)}

	pick, err := pickerConfig(f.epsilon, f.load, f.spillOrder)
	if err != nil {
		return nil, err
	}
	return &server.ClusterConfig{
		Peers:        pc,
		Picker:       pick,
		CopyMaxBytes: f.copyMemory,
		CopyTTL:      f.copyTTL,
		PeerTimeout:  f.peerTimeout,
		OwnerGrace:   f.ownerGrace,

		InvalidateTimeout: f.invalidate,
	}, nil
}

// splitPort splits HOST:PORT, or takes HOST with a default port.
func splitPort(s string, def int) (string, int, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return s, def, nil
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", s)
	}
	return host, p, nil
}

// advertised is a listener's address as others should dial it.
func advertised(a net.Addr, host string) string {
	h, port, _ := net.SplitHostPort(a.String())
	if host != "" {
		h = host
	}
	return net.JoinHostPort(h, port)
}
