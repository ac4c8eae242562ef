package peers

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
)

// DefaultBindAddr is used when Config.BindAddr is empty: all interfaces.
const DefaultBindAddr = "0.0.0.0"

// DefaultJoinRetryMax is used when Config.JoinRetryMax is zero.
const DefaultJoinRetryMax = 10 * time.Second

// DefaultReconnectInterval is used when Config.ReconnectInterval is zero.
// A try costs a ping per departed member (a join follows if it answers, or,
// in a cluster with a name, in the background, one at a time), so it can
// be short: a healed partition merges within it.
const DefaultReconnectInterval = 2 * time.Second

// reconnectFor is how long after its death a member is still tried again
// (Config.ReconnectInterval): as long as Serf's reconnect_timeout default.
// A member that died for good costs one connection attempt an interval.
const reconnectFor = 24 * time.Hour

// Profile picks the memberlist timing preset a node starts from. All nodes
// of a cluster should use the same one.
type Profile uint8

const (
	// LAN is memberlist.DefaultLANConfig: probe every 1s, a dead node is
	// removed after some seconds (more in larger clusters). The default.
	LAN Profile = iota
	// Local is memberlist.DefaultLocalConfig: shorter timeouts, for a
	// cluster on one host (loopback) and for tests.
	Local
	// WAN is memberlist.DefaultWANConfig: for nodes far apart.
	WAN
)

// Config configures Join. Its zero value runs a node alone on a random
// gossip port.
type Config struct {
	// Name is this node's ID: unique in the cluster, and the identity the
	// ring hashes, so keep it stable across restarts. If empty, it is
	// "<hostname>:<BindPort>" (unique per host, since two nodes cannot bind
	// one port), or "<hostname>-<random hex>" when BindPort is 0 or a
	// Transport is given.
	Name string

	// BindAddr and BindPort are where gossip listens, UDP and TCP alike
	// (--gossip HOST:PORT). If BindAddr is empty, DefaultBindAddr (all
	// interfaces) is used. BindPort 0 picks a free port; GossipAddr tells
	// which. Both are ignored when Transport is set.
	BindAddr string
	BindPort int

	// AdvertiseAddr and AdvertisePort are the gossip address other nodes
	// should use (--advertise), for NAT or a BindAddr of 0.0.0.0. If empty,
	// memberlist derives them from the bound address (a private IP for
	// 0.0.0.0).
	AdvertiseAddr string
	AdvertisePort int

	// Join lists seed nodes: "ip:port", "host:port" (every address host
	// resolves to) or "dns+srv:name" (the targets and ports of name's SRV
	// records, such as a Kubernetes headless service's); a seed without
	// a port means BindPort (see resolveSeeds). Names are resolved again
	// at every attempt, and, once the node has joined, every JoinRetryMax
	// (seeds it did not know yet are joined: the nodes DNS listed late,
	// or a cluster that formed apart).
	//
	// Join tries the seeds once; if none answers (this node's own
	// address does not count, so every node of a cluster may share one
	// list), the node runs alone and keeps trying them in the background,
	// as Consul's and Serf's retry-join do, until it knows another member
	// (one answered, or joined it), or until Leave or Shutdown. If empty,
	// the node runs alone until others join it.
	Join []string

	// JoinRetryMax is the longest wait between two background attempts to
	// reach the seeds: the first comes after 100ms, each later one after
	// twice the wait before, up to this. If zero, DefaultJoinRetryMax.
	JoinRetryMax time.Duration

	// ReconnectInterval is how often a node tries again to reach the
	// members that failure detection declared dead (for a day after their
	// death), as Serf's reconnect does (see Peers.reconnect: it pings each
	// by name at its address first). memberlist itself never
	// contacts a member it holds dead once it has gossiped the death, so
	// without this the two sides of a partition that outlasted failure
	// detection would stay two clusters after it heals. If zero,
	// DefaultReconnectInterval; if negative, never.
	ReconnectInterval time.Duration

	// SecretKeys, if set, encrypt and authenticate all gossip (AES-GCM).
	// Each must be 16, 24 or 32 bytes long. The first encrypts what this
	// node sends; any of them decrypts what it receives. A node none of
	// whose keys the others hold (or that has none) cannot join.
	//
	// memberlist can change a running node's keys, but only that node's,
	// so a cluster rotates its key with three rolling restarts, each
	// leaving every pair of nodes one key in common: add the new key
	// after the old one on every node ([old new]: all still encrypt with
	// old), then put it first ([new old]: some encrypt with new, and all
	// can read it), then drop the old one ([new]).
	SecretKeys [][]byte

	// Cluster names the cluster: memberlist's Label, carried outside every
	// gossip packet and stream (inside the encryption's authenticated data
	// when SecretKeys are set). A node drops what comes with another
	// label, so nodes of two clusters never merge, whatever addresses or
	// names they share. Every node of a cluster must have the same one;
	// changing it, or setting it on a running cluster, takes a full
	// restart. Empty: no label, as before there was one. At most 255
	// bytes.
	Cluster string

	// Resolver looks up the names in Join (see there). If nil,
	// net.DefaultResolver is used.
	Resolver Resolver

	// Meta is what this node tells the others: its addresses and weight.
	Meta Meta

	// Logger receives this package's events (members joining, leaving)
	// and memberlist's own log lines: its DEBUG and INFO lines at
	// slog.LevelDebug, its WARN and ERR lines at slog.LevelWarn. If nil,
	// slog.Default() is used.
	Logger *slog.Logger

	// Transport replaces memberlist's UDP+TCP transport, e.g. with an
	// in-memory one in tests (memberlist.MockNetwork). If nil, a network
	// transport is bound to BindAddr:BindPort.
	Transport memberlist.Transport

	// VNodes is the number of virtual nodes per unit of weight in the ring;
	// zero means the ring's default. All nodes must agree on it.
	VNodes int

	// Profile picks memberlist's timing preset. The zero value is LAN.
	Profile Profile

	// Tune, if set, may adjust memberlist's timings (ProbeInterval,
	// SuspicionMult, GossipInterval ...) after the Profile preset is
	// applied. The fields this Config sets (names, addresses, keys,
	// delegates, logger, transport) are set after Tune and win.
	Tune func(*memberlist.Config)

	// OnDeclaredDead, if set, is called (on a goroutine of its own) when
	// another member declared this node dead and this node refuted it:
	// the others have routed around it meanwhile (a partition, or a pause
	// longer than failure detection), so what it held may be stale.
	OnDeclaredDead func()
}

// setDefaults validates c and fills in its zero fields.
func (c *Config) setDefaults() error {
	for _, k := range c.SecretKeys {
		switch len(k) {
		case 16, 24, 32:
		default:
			return fmt.Errorf("peers: secret key is %d bytes; want 16, 24 or 32", len(k))
		}
	}
	if c.BindPort < 0 || c.BindPort > 65535 || c.AdvertisePort < 0 || c.AdvertisePort > 65535 {
		return fmt.Errorf("peers: bad port (bind %d, advertise %d)", c.BindPort, c.AdvertisePort)
	}
	if c.VNodes < 0 || c.JoinRetryMax < 0 {
		return errors.New("peers: negative VNodes or JoinRetryMax")
	}
	if len(c.Cluster) > memberlist.LabelMaxSize {
		return fmt.Errorf("peers: cluster name is %d bytes; at most %d", len(c.Cluster), memberlist.LabelMaxSize)
	}
	if c.Profile > WAN {
		return fmt.Errorf("peers: unknown profile %d", c.Profile)
	}
	if err := c.Meta.validate(); err != nil {
		return err
	}
	if c.BindAddr == "" {
		c.BindAddr = DefaultBindAddr
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.JoinRetryMax == 0 {
		c.JoinRetryMax = DefaultJoinRetryMax
	}
	if c.ReconnectInterval == 0 {
		c.ReconnectInterval = DefaultReconnectInterval
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	if c.Name == "" {
		c.Name = defaultName(c.BindPort, c.Transport != nil)
	}
	return nil
}

func defaultName(port int, custom bool) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "spillway"
	}
	if port != 0 && !custom {
		return host + ":" + strconv.Itoa(port)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// memberlist builds memberlist's configuration from c (defaults set).
func (c *Config) memberlist(ev *events) (*memberlist.Config, error) {
	var mc *memberlist.Config
	switch c.Profile {
	case Local:
		mc = memberlist.DefaultLocalConfig()
	case WAN:
		mc = memberlist.DefaultWANConfig()
	default:
		mc = memberlist.DefaultLANConfig()
	}
	// A node that comes back under its name at another address (a
	// rescheduled pod) is admitted as soon as the old one is dead or
	// left, rather than refused as a name conflict forever (memberlist's
	// default). The server tells the runs apart by their boot IDs.
	mc.DeadNodeReclaimTime = time.Nanosecond
	if c.Tune != nil {
		c.Tune(mc)
	}
	mc.Name = c.Name
	mc.BindAddr = c.BindAddr
	mc.BindPort = c.BindPort
	mc.AdvertiseAddr = c.AdvertiseAddr
	mc.AdvertisePort = c.AdvertisePort
	if c.AdvertisePort == 0 {
		mc.AdvertisePort = c.BindPort
	}
	mc.SecretKey, mc.Keyring = nil, nil
	if len(c.SecretKeys) > 0 {
		kr, err := memberlist.NewKeyring(c.SecretKeys, c.SecretKeys[0])
		if err != nil {
			return nil, fmt.Errorf("peers: %w", err)
		}
		mc.Keyring = kr
	}
	mc.Label = c.Cluster
	mc.Delegate = ev
	mc.Events = ev
	mc.Transport = c.Transport
	mc.LogOutput = nil
	mc.Logger = log.New(logWriter{l: c.Logger, onDead: c.OnDeclaredDead}, "", 0)
	return mc, nil
}

// logWriter turns memberlist's log lines ("[WARN] memberlist: text") into
// slog records. memberlist writes each line with one Write call.
//
// Its chatter (DEBUG, and INFO such as "Marking x as failed", which this
// package logs itself as a member change) goes to Debug. WARN and ERR stay
// visible at Warn: they are how an operator learns of a wrong gossip key
// ("no installed keys could decrypt the message") or a node reachable over
// TCP but not UDP.
//
// It also watches for the one event memberlist reports only in its log:
// another member declared this node dead (and this node refuted it, which
// is how a partition heals), for Config.OnDeclaredDead.
type logWriter struct {
	l      *slog.Logger
	onDead func()
}

// refutedDeath is memberlist's log line when another member declared this
// node dead (memberlist v0.7 state.go, deadNode).
var refutedDeath = []byte("Refuting a dead message")

// otherNodesPing is memberlist's warning when a ping names another node
// (net.go, handlePing): what a node of another cluster sees, every
// reconnect interval for a day, once it took the address of one of our
// dead members. It is expected then, and logged at Debug.
var otherNodesPing = []byte("Got ping for unexpected node")

func (w logWriter) Write(b []byte) (int, error) {
	level := slog.LevelDebug
	line := bytes.TrimSpace(b)
	if w.onDead != nil && bytes.Contains(line, refutedDeath) {
		// memberlist holds its state lock here: do not call back into it.
		go w.onDead()
	}
	if rest, ok := bytes.CutPrefix(line, []byte("[WARN]")); ok {
		level, line = slog.LevelWarn, rest
		if bytes.Contains(rest, otherNodesPing) {
			level = slog.LevelDebug
		}
	} else if rest, ok := bytes.CutPrefix(line, []byte("[ERR]")); ok {
		level, line = slog.LevelWarn, rest
	} else if i := bytes.IndexByte(line, ']'); i > 0 && line[0] == '[' {
		line = line[i+1:] // [DEBUG], [INFO]
	}
	ctx := context.Background()
	if !w.l.Enabled(ctx, level) {
		return len(b), nil
	}
	line = bytes.TrimSpace(line)
	line = bytes.TrimPrefix(line, []byte("memberlist: "))
	w.l.Log(ctx, level, "memberlist: "+string(line))
	return len(b), nil
}
