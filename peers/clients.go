package peers

import (
	"net"
	"strings"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

// peerClient is one member's connection pool and the address it dials, so
// that a member whose peer address changes gets a fresh pool.
type peerClient struct {
	addr string
	mc   *memcache.Client
}

// newPeerClient returns a gomemcache client bound to a single peer.
//
// memcache.New would resolve addr through DNS right here, inside a
// memberlist event callback that must not block, and would silently yield a
// client with no servers if resolution failed. A static selector hands the
// dialer the unresolved address instead: resolution then happens when a
// connection is dialed, bounded by the client's Timeout, and follows DNS
// changes.
func newPeerClient(addr string, timeout time.Duration, maxIdle int) *peerClient {
	mc := memcache.NewFromSelector(staticSelector{addr: lazyAddr(addr)})
	mc.Timeout = timeout
	mc.MaxIdleConns = maxIdle
	return &peerClient{addr: addr, mc: mc}
}

// close drops the idle connections. Requests already running on the client
// finish normally; the connections they put back afterwards are not reused
// and are closed by the runtime when the client is collected.
func (c *peerClient) close() { _ = c.mc.Close() }

// lazyAddr is a net.Addr that is only resolved when dialed.
type lazyAddr string

// Network reports "unix" for socket paths, as gomemcache's ServerList does.
func (a lazyAddr) Network() string {
	if strings.Contains(string(a), "/") {
		return "unix"
	}
	return "tcp"
}

func (a lazyAddr) String() string { return string(a) }

// staticSelector is a memcache.ServerSelector for exactly one server: the
// ring, not gomemcache's modulo hashing, decides which peer gets a key.
type staticSelector struct{ addr net.Addr }

func (s staticSelector) PickServer(string) (net.Addr, error) { return s.addr, nil }

func (s staticSelector) Each(f func(net.Addr) error) error { return f(s.addr) }
