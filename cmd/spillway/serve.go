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
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"

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
	threads         int
	maxItemSize     int64
	verbose         int
	idleTimeout     time.Duration
	writeTimeout    time.Duration
	shutdownTimeout time.Duration
	logFormat       string
	authFile        string
	tlsCert         string
	tlsKey          string
	tlsCA           string

	// cluster
	name          string
	gossip        string
	advertise     string
	join          string
	gossipKey     string
	clusterName   string
	weight        int
	peerListen    string
	epsilon       float64
	load          string
	spillOrder    string
	vnodes        int
	copyMemory    int64
	copyTTL       time.Duration
	hotCopies     int
	peerTimeout   time.Duration
	peerConnLimit int
	peerIdle      time.Duration
	peerSecret    string
	peerTLSCert   string
	peerTLSKey    string
	peerTLSCA     string
	drain         time.Duration
	ownerGrace    time.Duration
	invalidate    time.Duration
	origin        string
	originTimeout time.Duration
	originConc    int
	metrics       string

	config      string
	printConfig bool
}

func (f *serveFlags) options() []option {
	return []option{
		{"l", "listen", &stringValue{&f.listen}, "address to listen on for clients, HOST or HOST:PORT"},
		{"p", "port", &intValue{&f.port}, "TCP port for clients when --listen has none"},
		{"m", "memory-limit", &sizeValue{p: &f.memoryBytes, unit: 1 << 20}, "item memory in MiB (or with a k/m/g suffix)"},
		{"c", "conn-limit", &intValue{&f.connLimit}, "maximum simultaneous client connections (peer connections aside)"},
		{"t", "threads", &intValue{&f.threads}, "threads that run Go code (GOMAXPROCS), as memcached's -t sets its worker threads (0: Go's default: $GOMAXPROCS, else the CPUs this process may use or a container's CPU limit rounded up, at least 2); nodes that share a machine each want their share of its cores"},
		{"I", "max-item-size", &sizeValue{p: &f.maxItemSize, unit: 1}, "largest value accepted, in bytes (or with a k/m suffix); at most half of -m, as memcached"},
		{"v", "verbose", &countValue{&f.verbose}, "log connections (-v) and every command (-vv)"},
		{"", "idle-timeout", &durationValue{&f.idleTimeout}, "close client connections idle this long (0: never)"},
		{"", "write-timeout", &durationValue{&f.writeTimeout}, "close connections that take none of their replies for this long (0: never)"},
		{"", "shutdown-timeout", &durationValue{&f.shutdownTimeout}, "on SIGINT/SIGTERM, how long in-flight requests may take to finish"},
		{"", "log-format", &stringValue{&f.logFormat}, "log format: text or json"},
		{"Y", "auth-file", &stringValue{&f.authFile}, "file of user:password lines; clients must authenticate first, as with memcached -Y"},
		{"", "tls-cert", &stringValue{&f.tlsCert}, "PEM certificate: clients must speak TLS (with --tls-key)"},
		{"", "tls-key", &stringValue{&f.tlsKey}, "PEM private key of --tls-cert"},
		{"", "tls-ca", &stringValue{&f.tlsCA}, "PEM CA certificates: clients must present a certificate one of them signed"},
		{"", "name", &stringValue{&f.name}, "node ID in the cluster; stable across restarts (default: this machine's hostname:GOSSIP-PORT)"},
		{"", "gossip", &stringValue{&f.gossip}, "HOST:PORT for membership gossip (UDP and TCP); empty runs the node alone"},
		{"", "advertise", &stringValue{&f.advertise}, "HOST or HOST:PORT the other nodes should use for gossip, client and peer traffic (for NAT or a 0.0.0.0 listener; a name is resolved once, at start)"},
		{"", "join", &stringValue{&f.join}, "comma-separated gossip addresses of other nodes: HOST:PORT (every address HOST resolves to) or dns+srv:NAME (SRV records); this node's own may be among them; until one answers, the node runs alone and retries"},
		{"", "gossip-key", &stringValue{&f.gossipKey}, "comma-separated base64 keys of 16, 24 or 32 bytes that encrypt gossip: the first encrypts, any decrypts (rotate: add, promote, remove)"},
		{"", "cluster", &stringValue{&f.clusterName}, "the cluster's name, on every gossip packet: nodes with another never merge with this one; the same on every node (setting or changing it takes a full restart)"},
		{"", "weight", &intValue{&f.weight}, "capacity relative to the other nodes (more vnodes, more load)"},
		{"", "peer-listen", &stringValue{&f.peerListen}, "HOST:PORT for requests from other nodes (default: the client port + 10000, on the client host, or on --advertise's host when the client listens on every interface)"},
		{"", "epsilon", &floatValue{&f.epsilon}, "bounded-load slack: no node gets more than (1+epsilon) times the mean load; inf turns it off"},
		{"", "load", &stringValue{&f.load}, "load measure for the bound: rate (EWMA of requests) or inflight"},
		{"", "spill-order", &stringValue{&f.spillOrder}, "where overflow goes: ring (clockwise) or probe (per-key random jumps)"},
		{"", "vnodes", &intValue{&f.vnodes}, "virtual nodes per unit of weight; the same on every node (0: 160)"},
		{"", "copy-memory", &sizeValue{p: &f.copyMemory, unit: 1 << 20}, "memory in MiB for copies of keys other nodes own, and for the registry of which nodes hold copies of this node's keys (a quarter of it)"},
		{"", "copy-ttl", &durationValue{&f.copyTTL}, "how long a copy lives at most (bounds staleness when an invalidation is lost)"},
		{"", "peer-timeout", &durationValue{&f.peerTimeout}, "timeout of each request to another node"},
		{"", "peer-conn-limit", &intValue{&f.peerConnLimit}, "maximum simultaneous connections to the peer port"},
		{"", "peer-idle-timeout", &durationValue{&f.peerIdle}, "close peer-port connections idle this long"},
		{"", "peer-secret", &stringValue{&f.peerSecret}, "comma-separated shared secrets that authenticate peer connections: the first is presented, any is accepted (rotate by adding, promoting, removing); the same on every node"},
		{"", "peer-tls-cert", &stringValue{&f.peerTLSCert}, "PEM certificate of this node for mutual TLS between nodes (with --peer-tls-key and --peer-tls-ca)"},
		{"", "peer-tls-key", &stringValue{&f.peerTLSKey}, "PEM private key of --peer-tls-cert"},
		{"", "peer-tls-ca", &stringValue{&f.peerTLSCA}, "PEM CA certificate that signed every node's --peer-tls-cert"},
		{"", "drain", &durationValue{&f.drain}, "on shutdown, answer the nodes that take this node's keys for up to this long, so they warm them from here (0: not at all)"},
		{"", "owner-grace", &durationValue{&f.ownerGrace}, "after a membership change, how long new owners read misses through from previous owners"},
		{"", "hot-copies", &intValue{&f.hotCopies}, "keep a copy of a key another node owns once reads of it here are this frequent (an estimate over this node's recent reads of others' keys), as of a key spilled here: fewer hops, one invalidation per write (0: copies of spilled keys only)"},
		{"", "invalidate-timeout", &durationValue{&f.invalidate}, "how long a write waits for copies elsewhere to be dropped before it answers (a copy not dropped by then lives until --copy-ttl, and counts in lost_invalidations)"},
		{"", "origin", &stringValue{&f.origin}, "read-through origin: http://host:port/path/{key} or file:///dir"},
		{"", "origin-timeout", &durationValue{&f.originTimeout}, "timeout of one origin load"},
		{"", "origin-concurrency", &intValue{&f.originConc}, "most origin loads at once from this node"},
		{"", "metrics", &stringValue{&f.metrics}, "HOST:PORT serving Prometheus /metrics, /debug/ring and /debug/pprof/ (empty: off)"},
		{"", configOption, &stringValue{&f.config}, "YAML file of settings named as the long flags (memory-limit: 1024); the environment and the command line override it"},
		{"", "print-config", &boolValue{&f.printConfig}, "print the settings in effect, where each came from and secrets masked, and exit"},
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
		peerConnLimit:   server.DefaultPeerMaxConns,
		peerIdle:        server.DefaultPeerIdleTimeout,
		drain:           server.DefaultDrain,
		ownerGrace:      server.DefaultOwnerGrace,
		invalidate:      server.DefaultInvalidateTimeout,
		hotCopies:       server.DefaultHotCopies,
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

// clusterOnly are the flags that mean nothing without --gossip.
var clusterOnly = []string{"name", "advertise", "join", "gossip-key", "cluster", "weight", "peer-listen", "epsilon", "load",
	"spill-order", "vnodes", "copy-memory", "copy-ttl", "peer-timeout", "peer-conn-limit", "peer-idle-timeout",
	"owner-grace", "invalidate-timeout", "hot-copies", "drain", "peer-secret", "peer-tls-cert", "peer-tls-key", "peer-tls-ca"}

// check catches the mistakes that can be caught before anything is bound.
// given is what parseOptions returned.
func (f *serveFlags) check(given map[string]string) error {
	// As memcached ("Cannot set item size limit higher than 1/2 of memory
	// max."): an item more than half of -m may find no room the store
	// can make for it, and a write the store cannot place is answered
	// STORED and lost (memcached says SERVER_ERROR out of memory there;
	// Spillway's store has no such answer yet).
	if f.maxItemSize > f.memoryBytes/2 {
		return fmt.Errorf("-I %d is more than half of -m (%d bytes): an item that large may find no room; raise -m or lower -I, as memcached asks", f.maxItemSize, f.memoryBytes)
	}
	if f.gossip == "" {
		for _, long := range clusterOnly {
			if as, ok := given[long]; ok {
				return fmt.Errorf("%s needs --gossip: without it the node runs alone", as)
			}
		}
		return nil
	}
	if _, _, err := splitPort(f.gossip, 7946); err != nil {
		return fmt.Errorf("--gossip: %w", err)
	}
	if _, ok := given["peer-secret"]; ok && len(f.peerSecrets()) == 0 {
		return errors.New("--peer-secret: no secret in it (an empty value would turn peer authentication off)")
	}
	if (f.authFile != "" || f.tlsCA != "") && f.peerSecret == "" && f.peerTLSCert == "" {
		return errors.New("--auth-file and --tls-ca guard the client port only: the peer port would serve the same keys to anyone who reaches it; set --peer-secret or --peer-tls-cert too")
	}
	if _, err := f.secretKeys(); err != nil {
		return err
	}
	if n := len(f.clusterName); n > memberlist.LabelMaxSize {
		return fmt.Errorf("--cluster: %d bytes; at most %d", n, memberlist.LabelMaxSize)
	}
	_, err := pickerConfig(f.epsilon, f.load, f.spillOrder)
	return err
}

// secretKeys decodes --gossip-key: a comma-separated list, the first key
// to encrypt with and all to decrypt (see peers.Config.SecretKeys).
func (f *serveFlags) secretKeys() ([][]byte, error) {
	var keys [][]byte
	for i, s := range splitList(f.gossipKey) {
		key, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("--gossip-key: key %d is not base64: %w", i+1, err)
		}
		if n := len(key); n != 16 && n != 24 && n != 32 {
			return nil, fmt.Errorf("--gossip-key: key %d decodes to %d bytes; want 16, 24 or 32 (e.g. head -c32 /dev/urandom | base64)", i+1, n)
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// splitList splits a comma-separated flag value, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// nodeName is --name, else this machine's hostname and the gossip port
// (what peers.Config.Name defaults to); "" alone, or when the gossip port
// is picked at random (peers then names the node).
func (f *serveFlags) nodeName() string {
	if f.name != "" || f.gossip == "" {
		return f.name
	}
	_, port, _ := splitPort(f.gossip, 7946)
	host, err := os.Hostname()
	if port == 0 || err != nil || host == "" {
		return ""
	}
	return host + ":" + strconv.Itoa(port)
}

// nodeError is the error of a node with a name: main puts the name in
// front of it, as the logger puts it in every line (several nodes may
// share a terminal).
type nodeError struct {
	node string
	err  error
}

func (e *nodeError) Error() string { return e.err.Error() }
func (e *nodeError) Unwrap() error { return e.err }

const serveSynopsis = "Usage: spillway serve [flags]"

func serve(args []string, stdout, stderr io.Writer) error {
	f := defaultServeFlags()
	given, err := parseOptions("serve", serveSynopsis, f.options(), args, stdout)
	if err != nil {
		return err
	}
	if err := f.check(given); err != nil {
		return err
	}
	name := f.nodeName()
	if f.printConfig {
		if _, ok := given["name"]; !ok && name != "" {
			f.name, given["name"] = name, "default: this machine's hostname:GOSSIP-PORT"
		}
		return printConfig(stdout, f.options(), given)
	}
	log, err := f.logger(stderr)
	if err != nil {
		return err
	}
	if name != "" {
		f.name = name
		log = log.With("self", name)
	}
	if err := f.run(log); err != nil {
		if name != "" {
			return &nodeError{name, err}
		}
		return err
	}
	return nil
}

// run binds the listeners, starts the node and serves until SIGINT or
// SIGTERM.
func (f *serveFlags) run(log *slog.Logger) (err error) {
	// Before the store is made: it sizes its shards by GOMAXPROCS. Nodes
	// sharing a machine each default to all its cores, and their
	// schedulers then hand work between more threads than there are
	// cores: three nodes on 2 cores spent 0.23 context switches per
	// request at -t 1 against 0.37 at the default (README, Benchmarks).
	if f.threads > 0 {
		runtime.GOMAXPROCS(f.threads)
	}
	if cpus := runtime.NumCPU(); f.threads > cpus {
		// Allowed, as memcached allows -t above its cores (it warns
		// above 64), but it costs what the comment above says.
		log.Warn("more threads than CPUs this process may use: the scheduler hands work between threads no core is free to run", "threads", f.threads, "cpus", cpus)
	}
	memLimit, memLimitFrom := f.setMemoryLimit()
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
	if err := f.resolveAdvertise(); err != nil {
		return err
	}
	if f.authFile != "" {
		if cfg.Users, err = server.ReadAuthFile(f.authFile); err != nil {
			return fmt.Errorf("--auth-file: %w", err)
		}
	}
	clientTLS, err := f.clientTLS()
	if err != nil {
		return err
	}
	peerListenTLS, peerDialTLS, err := f.peerTLS()
	if err != nil {
		return err
	}
	// Every port is bound before the node joins: a node that cannot start
	// must not have joined the cluster.
	var bound []io.Closer
	defer func() {
		if err != nil {
			for _, c := range bound {
				c.Close()
			}
		}
	}()
	ln, err := listen("--listen", f.addr())
	if err != nil {
		return err
	}
	bound = append(bound, ln)
	var peerLn net.Listener
	if f.gossip != "" {
		paddr, err := f.peerAddr(ln.Addr())
		if err != nil {
			return err
		}
		what := "--peer-listen"
		if f.peerListen == "" {
			what = "the peer port (--peer-listen, by default the client port + 10000)"
		}
		if peerLn, err = listen(what, paddr); err != nil {
			return err
		}
		bound = append(bound, peerLn)
		if err := gossipFree(f.gossip); err != nil {
			return err
		}
		if cfg.Cluster, err = f.cluster(ln.Addr(), peerLn.Addr(), log); err != nil {
			return err
		}
		cfg.Cluster.PeerTLS = peerDialTLS
		cfg.Cluster.PeerSecrets = f.peerSecrets()
	}
	var mln net.Listener
	if f.metrics != "" {
		if mln, err = listen("--metrics", f.metrics); err != nil {
			return err
		}
		bound = append(bound, mln)
	}
	srv, err := server.New(cfg)
	if err != nil {
		return err
	}
	if f.name == "" && srv.ID() != "" { // peers named it
		log = log.With("self", srv.ID())
	}
	log.Info("serving", "addr", ln.Addr().String(), "memory_limit", f.memoryBytes,
		"max_item_size", f.maxItemSize, "conn_limit", f.connLimit, "threads", runtime.GOMAXPROCS(0), "version", spillwayVersion,
		"go_memory_limit", memLimit, "go_memory_limit_from", memLimitFrom)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 3)
	go func() { served <- srv.Serve(wrapTLS(ln, clientTLS)) }()
	if peerLn != nil {
		log.Info("serving peers", "addr", peerLn.Addr().String(), "gossip", f.gossip,
			"tls", peerListenTLS != nil, "secret", len(cfg.Cluster.PeerSecrets) > 0)
		go func() { served <- srv.ServePeers(wrapTLS(peerLn, peerListenTLS)) }()
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

// listen binds a TCP listener for the flag what, and says which flag's
// address failed, and why in a few words ("address already in use").
func listen(what, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, addr, bindError(err))
	}
	return ln, nil
}

// bindError is the reason inside a net.Listen error, without the
// "listen tcp 127.0.0.1:1: bind:" that repeats the address.
func bindError(err error) error {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Err
	}
	return err
}

// gossipFree checks that the --gossip port is free for TCP and UDP, which
// memberlist binds both, so that a taken port is reported as such rather
// than as a failed join. (A port taken in between still fails the join,
// with memberlist's words.)
func gossipFree(gossip string) error {
	host, port, _ := splitPort(gossip, 7946)
	if port == 0 {
		return nil
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--gossip %s (TCP): %w", addr, bindError(err))
	}
	defer ln.Close()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return fmt.Errorf("--gossip %s (UDP): %w", addr, bindError(err))
	}
	return pc.Close()
}

// peerAddr is --peer-listen, or the client address with the port + 10000.
// The peer port trusts what it is sent more than the client port does, so
// it never listens on every interface unless --peer-listen says so: with a
// client listener on 0.0.0.0 or [::] it takes --advertise's host, the one
// the other nodes are told to use.
func (f *serveFlags) peerAddr(client net.Addr) (string, error) {
	if f.peerListen != "" {
		return f.peerListen, nil
	}
	host, port, _ := net.SplitHostPort(client.String())
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if f.advertise == "" {
			return "", errors.New("the client port listens on every interface: set --advertise (the address other nodes reach this one at, where the peer port listens) or --peer-listen")
		}
		host, _, _ = splitPort(f.advertise, 0)
	}
	p, _ := strconv.Atoi(port)
	if p == 0 || p+10000 > 65535 {
		return net.JoinHostPort(host, "0"), nil
	}
	return net.JoinHostPort(host, strconv.Itoa(p+10000)), nil
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
		Name:     f.name,
		BindAddr: ghost,
		BindPort: gport,
		Logger:   log,
		VNodes:   f.vnodes,
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
	pc.Join = splitList(f.join)
	pc.Cluster = f.clusterName
	if pc.SecretKeys, err = f.secretKeys(); err != nil {
		return nil, err
	}
	pc.Meta = peers.Meta{Client: advertised(client, advHost), Peer: advertised(peer, advHost), Weight: max(f.weight, 1)}

	pick, err := pickerConfig(f.epsilon, f.load, f.spillOrder)
	if err != nil {
		return nil, err
	}
	return &server.ClusterConfig{
		Peers:           pc,
		Picker:          pick,
		CopyMaxBytes:    f.copyMemory,
		CopyTTL:         f.copyTTL,
		PeerTimeout:     f.peerTimeout,
		PeerMaxConns:    f.peerConnLimit,
		PeerIdleTimeout: f.peerIdle,
		Drain:           cmp.Or(f.drain, -1), // 0 on the command line: none
		OwnerGrace:      f.ownerGrace,

		InvalidateTimeout: f.invalidate,
		HotCopies:         cmp.Or(f.hotCopies, -1), // 0 on the command line: none
	}, nil
}

// resolveAdvertise replaces a name in --advertise by its address
// (an IPv4 one if it has one), for gossip advertises an IP: in a
// container, --advertise $HOSTNAME names the container's own address.
func (f *serveFlags) resolveAdvertise() error {
	host, port, _ := splitPort(f.advertise, -1)
	if host == "" || net.ParseIP(host) != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIP(ctx, "ip", host)
	if err != nil {
		return fmt.Errorf("--advertise: %w", err)
	}
	ip := ips[0]
	for _, a := range ips {
		if a.To4() != nil {
			ip = a
			break
		}
	}
	f.advertise = ip.String()
	if port >= 0 {
		f.advertise = net.JoinHostPort(f.advertise, strconv.Itoa(port))
	}
	return nil
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
