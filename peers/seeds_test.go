package peers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeDNS is a Resolver from maps, which a test may change while nodes
// run. Names it does not hold are NXDOMAIN.
type fakeDNS struct {
	mu    sync.Mutex // guards both maps
	hosts map[string][]string
	srv   map[string][]*net.SRV
}

func (d *fakeDNS) LookupHost(_ context.Context, host string) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if a, ok := d.hosts[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (d *fakeDNS) LookupSRV(_ context.Context, service, proto, name string) (string, []*net.SRV, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if service != "" || proto != "" {
		return "", nil, errors.New("fakeDNS: want the full SRV name")
	}
	if s, ok := d.srv[name]; ok {
		return name, s, nil
	}
	return "", nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
}

func (d *fakeDNS) setSRV(name string, targets ...*net.SRV) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.srv[name] = targets
}

func TestResolveSeeds(t *testing.T) {
	dns := &fakeDNS{
		hosts: map[string][]string{
			"multi":                 {"10.0.0.1", "10.0.0.2", "fd00::3"},
			"spillway-0.spillway.x": {"10.1.0.1"},
			"spillway-1.spillway.x": {"10.1.0.2"},
		},
		srv: map[string][]*net.SRV{
			"_gossip._tcp.spillway.x": {
				{Target: "spillway-0.spillway.x.", Port: 7001},
				{Target: "spillway-1.spillway.x.", Port: 7002},
				{Target: "spillway-2.spillway.x.", Port: 7003}, // no A record yet
			},
			"_gossip._tcp.empty": {},
		},
	}
	tests := []struct {
		name    string
		seeds   []string
		want    []string
		wantErr string
	}{
		{"ip and port", []string{"10.9.9.9:1234"}, []string{"10.9.9.9:1234"}, ""},
		{"ip alone takes the bind port", []string{"10.9.9.9"}, []string{"10.9.9.9:7946"}, ""},
		{"ipv6", []string{"[fd00::1]:5", "fd00::2"}, []string{"[fd00::1]:5", "[fd00::2]:7946"}, ""},
		{"name with several addresses", []string{"multi:99"}, []string{"10.0.0.1:99", "10.0.0.2:99", "[fd00::3]:99"}, ""},
		{"name alone takes the bind port", []string{"multi"}, []string{"10.0.0.1:7946", "10.0.0.2:7946", "[fd00::3]:7946"}, ""},
		{"srv: targets at their ports; one not resolved", []string{"dns+srv:_gossip._tcp.spillway.x"},
			[]string{"10.1.0.1:7001", "10.1.0.2:7002"}, "spillway-2.spillway.x"},
		{"repeats once", []string{"10.0.0.1:99", "multi:99", "10.0.0.1:99"}, []string{"10.0.0.1:99", "10.0.0.2:99", "[fd00::3]:99"}, ""},
		{"unknown name, the others kept", []string{"nope:1", "10.9.9.9:1"}, []string{"10.9.9.9:1"}, "nope"},
		{"srv with no records", []string{"dns+srv:_gossip._tcp.empty"}, nil, "no addresses"},
		{"srv unknown", []string{"dns+srv:_x._tcp.nope"}, nil, "SRV _x._tcp.nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := resolveSeeds(context.Background(), dns, tt.seeds, 7946)
			if !slices.Equal(got, tt.want) {
				t.Errorf("addresses %q, want %q", got, tt.want)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("err = %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("err = %v, want it to mention %q", err, tt.wantErr)
			}
		})
	}
	if hasNames([]string{"10.0.0.1:1", "[fd00::1]:2", "fd00::2"}, 7946) {
		t.Error("hasNames: addresses taken for names")
	}
	for _, s := range []string{"multi", "multi:1", "dns+srv:_g._tcp.x"} {
		if !hasNames([]string{"10.0.0.1:1", s}, 7946) {
			t.Errorf("hasNames misses %q", s)
		}
	}
}

// joinTest starts a node with cfg and the tests' timings (fastTimings
// unless cfg.Tune is set) and logger, and shuts it down when the test
// ends.
func joinTest(t *testing.T, cfg Config) *testNode {
	t.Helper()
	cfg.Logger = cmp.Or(cfg.Logger, quietLogger(t))
	cfg.Profile = Local
	if cfg.Tune == nil {
		cfg.Tune = fastTimings
	}
	rec := &recorder{}
	p, err := Join(cfg, rec.onChange)
	if err != nil {
		t.Fatalf("Join %s: %v", cfg.Name, err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	return &testNode{p: p, rec: rec}
}

// startDNSNode starts a node on mn whose seeds are looked up in dns.
func startDNSNode(t *testing.T, mn *memNet, dns Resolver, name string, seeds ...string) *testNode {
	t.Helper()
	return joinTest(t, Config{
		Name: name, Join: seeds, Resolver: dns, JoinRetryMax: 200 * time.Millisecond,
		Transport: mn.NewTransport(name), Meta: Meta{Peer: "p-" + name + ":1", Weight: 1},
	})
}

// TestJoinThroughSRV: the nodes of a StatefulSet share one seed, their
// headless service's SRV name, and form one cluster, though the first
// finds only itself.
func TestJoinThroughSRV(t *testing.T) {
	const name = "_gossip._tcp.spillway.default.svc.cluster.local"
	dns := &fakeDNS{hosts: map[string][]string{}, srv: map[string][]*net.SRV{}}
	mn := &memNet{}
	var nodes []*testNode
	for i := range 3 {
		// memNet numbers addresses in order: spillway-i is 127.0.0.1:i+1.
		// Each pod is in DNS once it runs (publishNotReadyAddresses).
		pod := fmt.Sprintf("spillway-%d.spillway.default.svc.cluster.local", i)
		dns.mu.Lock()
		dns.hosts[pod] = []string{"127.0.0.1"}
		dns.srv[name] = append(dns.srv[name], &net.SRV{Target: pod + ".", Port: uint16(i + 1)})
		dns.mu.Unlock()
		nodes = append(nodes, startDNSNode(t, mn, dns, fmt.Sprintf("spillway-%d", i), SRVPrefix+name))
	}
	eventually(t, "one cluster", ringsAre(nodes, "spillway-0/1 spillway-1/1 spillway-2/1"))
}

// TestRediscoveryMergesHalves: nodes that each found only half of the
// others in DNS (records published late) formed two clusters; once DNS
// lists them all, they become one, as the nodes resolve their seeds again.
func TestRediscoveryMergesHalves(t *testing.T) {
	mn := &memNet{}
	halves := []*fakeDNS{
		{hosts: map[string][]string{"cache": {"127.0.0.1"}}, srv: map[string][]*net.SRV{}},
		{hosts: map[string][]string{"cache": {"127.0.0.1"}}, srv: map[string][]*net.SRV{}},
	}
	const name = "_gossip._tcp.cache"
	halves[0].setSRV(name, &net.SRV{Target: "cache", Port: 1}, &net.SRV{Target: "cache", Port: 2})
	halves[1].setSRV(name, &net.SRV{Target: "cache", Port: 3}, &net.SRV{Target: "cache", Port: 4})
	var nodes []*testNode
	for i := range 4 {
		nodes = append(nodes, startDNSNode(t, mn, halves[i/2], fmt.Sprintf("n%d", i), SRVPrefix+name))
	}
	eventually(t, "first half", ringsAre(nodes[:2], "n0/1 n1/1"))
	eventually(t, "second half", ringsAre(nodes[2:], "n2/1 n3/1"))

	all := []*net.SRV{{Target: "cache", Port: 1}, {Target: "cache", Port: 2}, {Target: "cache", Port: 3}, {Target: "cache", Port: 4}}
	for _, d := range halves {
		d.setSRV(name, all...)
	}
	eventually(t, "one cluster", ringsAre(nodes, "n0/1 n1/1 n2/1 n3/1"))
}

// hostsOnly resolves from /etc/hosts alone: a DNS server is never asked.
var hostsOnly = &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
	return nil, errors.New("no DNS in tests")
}}

// startNetNode starts a node with real gossip on 127.0.0.1 (a port of its
// own) that joins seeds, resolved from /etc/hosts.
func startNetNode(t *testing.T, name string, seeds ...string) *testNode {
	t.Helper()
	return joinTest(t, Config{
		Name: name, BindAddr: "127.0.0.1", Join: seeds, Resolver: hostsOnly,
		Meta: Meta{Peer: "127.0.0.1:1", Weight: 1},
	})
}

// TestJoinByHostname: a seed given as a name ("localhost:PORT", which
// /etc/hosts may resolve to 127.0.0.1 and ::1) joins every address it
// resolves to that answers.
func TestJoinByHostname(t *testing.T) {
	a := startNetNode(t, "a")
	_, port, _ := net.SplitHostPort(a.p.GossipAddr())
	b := startNetNode(t, "b", "localhost:"+port)
	eventually(t, "joined through localhost", ringsAre([]*testNode{a, b}, "a/1 b/1"))
}

// TestReturnsAtNewAddress: a node that comes back under its name at
// another address (a rescheduled pod: same name, new IP) is taken in by
// the others as soon as it joins after a graceful leave, and once failure
// detection has found it dead after a crash, instead of being refused as
// a name conflict (memberlist's default).
func TestReturnsAtNewAddress(t *testing.T) {
	for _, graceful := range []bool{true, false} {
		t.Run(map[bool]string{true: "after leave", false: "after crash"}[graceful], func(t *testing.T) {
			nodes := []*testNode{startNetNode(t, "n0")}
			seed := nodes[0].p.GossipAddr()
			nodes = append(nodes, startNetNode(t, "n1", seed), startNetNode(t, "n2", seed))
			eventually(t, "three", ringsAre(nodes, "n0/1 n1/1 n2/1"))
			oldAddr := nodes[2].p.GossipAddr()
			if graceful {
				if err := nodes[2].p.Leave(5 * time.Second); err != nil {
					t.Fatal(err)
				}
			}
			_ = nodes[2].p.Shutdown()
			eventually(t, "n2 gone", ringsAre(nodes[:2], "n0/1 n1/1"))

			start := time.Now()
			nodes[2] = startNetNode(t, "n2", seed) // port 0: another address
			newAddr := nodes[2].p.GossipAddr()
			if newAddr == oldAddr {
				t.Fatalf("same address %s", newAddr)
			}
			eventually(t, "n2 back", func() string {
				if msg := ringsAre(nodes, "n0/1 n1/1 n2/1")(); msg != "" {
					return msg
				}
				for _, n := range nodes[:2] {
					if m := n.p.ev.cur.Load().nodes["n2"]; m == nil || m.addr != newAddr {
						return fmt.Sprintf("%s has n2 at %v", n.p.Self(), m)
					}
				}
				return ""
			})
			t.Logf("back in %v at %s (was %s)", time.Since(start), newAddr, oldAddr)
		})
	}
}
