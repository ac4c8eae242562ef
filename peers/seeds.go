package peers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// Resolver looks up the names in Config.Join. *net.Resolver satisfies it;
// tests give a map.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
	LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error)
}

// SRVPrefix marks a seed looked up as SRV records:
// "dns+srv:_gossip._tcp.spillway.default.svc.cluster.local".
const SRVPrefix = "dns+srv:"

// resolveTimeout bounds the lookups of one attempt to join.
const resolveTimeout = 5 * time.Second

// A seed in Config.Join is one of
//
//	IP:PORT, IP         as it is (PORT defaults to BindPort)
//	HOST:PORT, HOST     every address HOST resolves to (A and AAAA records), at PORT
//	dns+srv:NAME        every target of NAME's SRV records at the record's port,
//	                    each target resolved as a HOST
//
// memberlist could resolve HOST itself, but it asks the resolv.conf
// servers over TCP first, which a test cannot redirect; resolving here
// also lets a Kubernetes headless service name its pods by SRV.

// hasNames reports whether any seed is a name to look up, which may
// resolve to other nodes tomorrow than today.
func hasNames(seeds []string, port int) bool {
	for _, s := range seeds {
		if strings.HasPrefix(s, SRVPrefix) {
			return true
		}
		if host, _ := seedHostPort(s, port); net.ParseIP(host) == nil {
			return true
		}
	}
	return false
}

// ipSeeds returns the seeds that are IP addresses, as "ip:port" gossip
// addresses (as memberlist gives members' addresses).
func ipSeeds(seeds []string, port int) map[string]bool {
	addrs := make(map[string]bool)
	for _, s := range seeds {
		host, p := seedHostPort(s, port)
		if ip := net.ParseIP(host); ip != nil { // a dns+srv: seed never is
			addrs[net.JoinHostPort(ip.String(), p)] = true
		}
	}
	return addrs
}

// seedHostPort splits a HOST:PORT or HOST seed.
func seedHostPort(s string, port int) (string, string) {
	if host, p, err := net.SplitHostPort(s); err == nil {
		return host, p
	}
	return strings.Trim(s, "[]"), strconv.Itoa(port)
}

// resolveSeeds turns seeds into "ip:port" addresses for memberlist, in
// order, without repeats. A name that does not resolve is skipped and its
// error returned with the addresses of the others (a headless service has
// no records until its first pod runs: the caller tries again later).
func resolveSeeds(ctx context.Context, r Resolver, seeds []string, port int) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	var addrs []string
	seen := make(map[string]bool)
	add := func(host, port string) {
		a := net.JoinHostPort(host, port)
		if !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	var errs []error
	lookup := func(host, port string) {
		if net.ParseIP(host) != nil {
			add(host, port)
			return
		}
		ips, err := r.LookupHost(ctx, host)
		if err != nil {
			errs = append(errs, err)
		}
		for _, ip := range ips {
			add(ip, port)
		}
	}
	for _, s := range seeds {
		name, ok := strings.CutPrefix(s, SRVPrefix)
		if !ok {
			lookup(seedHostPort(s, port))
			continue
		}
		_, srvs, err := r.LookupSRV(ctx, "", "", name)
		if err != nil {
			errs = append(errs, fmt.Errorf("SRV %s: %w", name, err))
		}
		for _, srv := range srvs {
			lookup(strings.TrimSuffix(srv.Target, "."), strconv.Itoa(int(srv.Port)))
		}
	}
	if len(addrs) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("no addresses"))
	}
	return addrs, errors.Join(errs...)
}
