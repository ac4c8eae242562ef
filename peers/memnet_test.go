package peers

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// memNet is an in-memory network for memberlist, addressed the way
// memberlist.MockNetwork is (127.0.0.1:<n>) but routed by address alone
// (MockNetwork routes by node name when memberlist gives one), and without
// MockNetwork's three problems for these tests:
//
//   - its maps have no lock, so creating a transport while another node
//     sends is a data race;
//   - a packet send waits on an unbuffered channel until the receiver
//     reads it. Nothing reads once a node has shut down, so every probe or
//     gossip sent to a dead node blocks its sender forever: the survivors'
//     probe loops stall, the dead node is never declared dead, and their
//     goroutines leak;
//   - even between live nodes, a node's packet loop answers a ping by
//     sending an ack; two nodes pinging each other at once then wait on each
//     other for good.
//
// Here packets behave like UDP: queued without waiting, dropped when the
// queue is full or the receiver has shut down. A dial to a shut-down
// transport is refused, as TCP would be. cut splits the network in two.
type memNet struct {
	mu     sync.Mutex
	port   int
	byAddr map[string]*memTransport
	byName map[string]*memTransport
	cutOff map[*memTransport]bool // one side of a partition; nil when whole
}

// cut partitions the network: from now on nothing crosses between the
// nodes named and the others (packets are lost, dials time out), until
// heal. Streams already open stay open, as TCP connections with nothing
// to send would.
func (n *memNet) cut(names ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cutOff = make(map[*memTransport]bool)
	for _, name := range names {
		n.cutOff[n.byName[name]] = true
	}
}

// heal ends the partition cut made.
func (n *memNet) heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cutOff = nil
}

// apart reports whether a partition lies between a and b.
func (n *memNet) apart(a, b *memTransport) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cutOff != nil && n.cutOff[a] != n.cutOff[b]
}

// NewTransport returns a transport, on an address of its own, for the node
// called name; cut finds the node's latest transport by that name.
func (n *memNet) NewTransport(name string) *memTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.port++
	return n.newTransportLocked(name, n.port)
}

// Restart returns a transport for the node called name on the address its
// last transport had, as a process restarted with the same flags listens;
// that transport must have shut down.
func (n *memNet) Restart(name string) *memTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	old, ok := n.byName[name]
	if !ok {
		panic("memnet: restart of " + name + ", which never ran")
	}
	if !old.isShut() {
		panic("memnet: restart of " + name + " while it runs")
	}
	return n.newTransportLocked(name, old.port)
}

func (n *memNet) newTransportLocked(name string, port int) *memTransport {
	if n.byAddr == nil {
		n.byAddr = make(map[string]*memTransport)
		n.byName = make(map[string]*memTransport)
	}
	t := &memTransport{
		net:     n,
		addr:    memAddr("127.0.0.1:" + strconv.Itoa(port)),
		port:    port,
		packets: make(chan *memberlist.Packet, packetQueue),
		streams: make(chan net.Conn),
		done:    make(chan struct{}),
	}
	n.byAddr[string(t.addr)] = t
	n.byName[name] = t
	return t
}

// peer finds the transport at a's address. It routes by address alone,
// as a real network does, though memberlist names the node it means: a
// node restarted on a new address must not answer for its old one, or a
// member that missed its leave probes the old address, gets the new
// node's ack, never finds the old one dead, and refuses the new address
// as a conflict for good.
func (n *memNet) peer(a memberlist.Address) (*memTransport, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	t, ok := n.byAddr[a.Addr]
	if !ok {
		return nil, fmt.Errorf("memnet: no route to %s", a.String())
	}
	return t, nil
}

type memAddr string

func (a memAddr) Network() string { return "mem" }
func (a memAddr) String() string  { return string(a) }

// memTransport implements memberlist.NodeAwareTransport.
type memTransport struct {
	net      *memNet
	addr     memAddr
	port     int
	packets  chan *memberlist.Packet
	streams  chan net.Conn
	done     chan struct{}
	shutOnce sync.Once
}

var _ memberlist.NodeAwareTransport = (*memTransport)(nil)

var errRefused = errors.New("memnet: connection refused")

// errShut is what a shut-down transport answers a send or a dial with.
// memberlist's probe of a node can outlive its Shutdown (it finishes with
// a TCP ping); in a test that restarts a node on its address, that ping
// would reach the node's next run, which is not the process that sent it.
var errShut = errors.New("memnet: transport shut down")

// packetQueue is a transport's receive buffer, in packets.
const packetQueue = 1024

func (t *memTransport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return net.IPv4(127, 0, 0, 1), t.port, nil
}

func (t *memTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (t *memTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if t.isShut() {
		return time.Time{}, errShut
	}
	dest, err := t.net.peer(a)
	if err != nil {
		return time.Time{}, err
	}
	now := time.Now()
	if t.net.apart(t, dest) {
		return now, nil // lost in the partition
	}
	p := &memberlist.Packet{Buf: append([]byte(nil), b...), From: t.addr, Timestamp: now}
	select {
	case <-dest.done: // lost, like a datagram to a dead host
	case dest.packets <- p:
	default: // lost, like a datagram to a full socket buffer
	}
	return now, nil
}

func (t *memTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

func (t *memTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *memTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.isShut() {
		return nil, errShut
	}
	dest, err := t.net.peer(a)
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	if t.net.apart(t, dest) {
		select { // no answer across a partition
		case <-t.done:
		case <-timer.C:
		}
		return nil, errRefused
	}
	local, remote := net.Pipe()
	select {
	case dest.streams <- remote:
		return local, nil
	case <-dest.done:
	case <-t.done:
	case <-timer.C:
	}
	local.Close()
	remote.Close()
	return nil, errRefused
}

func (t *memTransport) StreamCh() <-chan net.Conn { return t.streams }

// isShut reports whether Shutdown has run.
func (t *memTransport) isShut() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// Shutdown makes the transport unreachable, and unable to reach others, as
// if the process it stands for were gone; memberlist calls it first thing
// in its own Shutdown.
func (t *memTransport) Shutdown() error {
	t.shutOnce.Do(func() { close(t.done) })
	return nil
}
