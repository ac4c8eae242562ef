// Package peers is a node's view of the cluster: membership gossiped with
// hashicorp/memberlist, turned into consistent-hash ring snapshots.
//
// memberlist does the hard parts (join through any seed, SWIM failure
// detection, graceful leave, optional encryption). This package adds what
// spillway needs on top: each node's addresses and weight carried in the
// gossip (Meta), and a new *ring.Ring on every membership change.
//
// It opens no connections to the other nodes: the caller dials a member's
// Meta.Peer address itself (server's peer client). peers never imports
// store, protocol or server.
package peers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"spillway/ring"
)

// ErrClosed is returned by Leave after Shutdown.
var ErrClosed = errors.New("peers: shut down")

// Peers is a running member of the cluster. It is safe for concurrent use.
// Ring, Meta, GossipAddr and Self read an immutable snapshot that is
// swapped on each membership change: they take no lock and are cheap enough
// for every request.
type Peers struct {
	self string
	ml   *memberlist.Memberlist
	ev   *events

	// giveUp is closed by Leave and Shutdown: a background join (see
	// Config.Join) stops trying the seeds. joinDone is closed when it has
	// stopped (at once if there was none).
	giveUp     chan struct{}
	giveUpOnce sync.Once
	joinDone   chan struct{}

	// What retryJoin needs to resolve and join the seeds again.
	seeds    []string
	port     int
	resolver Resolver
	log      *slog.Logger
	// seedAddrs are the seeds given as IP addresses, as gossip addresses:
	// reconnect tries those that left (see there).
	seedAddrs map[string]bool
	// updateWait bounds Leave's wait for its meta's gossip (see there):
	// a few gossip rounds, and never 0 (no limit to UpdateNode).
	updateWait time.Duration
	// named is set when the cluster has a name (Config.Cluster): another
	// cluster's node refuses a join, so a departed member's address may be
	// joined without an answer to a ping by its name (reconnect, vetted).
	named bool

	life sync.Mutex // serialises Leave and Shutdown: memberlist panics on Leave after Shutdown
	left bool
	shut bool
}

// Join starts gossip, tries to join the cluster through cfg.Join and
// returns the running node.
//
// onChange receives a new ring snapshot: once before Join returns (this
// node plus the members the seeds told about), then whenever the ring's
// members or weights change. Calls never overlap and arrive in order.
// memberlist makes them while holding its own lock, so onChange must
// return quickly (swap a pointer) and must not call Leave or Shutdown;
// reading Ring or Meta from it is fine.
//
// Join fails only if cfg is invalid or gossip cannot start. When no seed
// answers, the node runs alone and keeps trying them in the background
// (Config.Join); onChange then reports the cluster once one answers.
func Join(cfg Config, onChange func(*ring.Ring)) (*Peers, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if onChange == nil {
		onChange = func(*ring.Ring) {}
	}
	meta, err := cfg.Meta.encode()
	if err != nil {
		return nil, err
	}
	ev := newEvents(cfg.Name, meta, &cfg, onChange)
	mc, err := cfg.memberlist(ev)
	if err != nil {
		ev.close()
		return nil, err
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		ev.close()
		return nil, fmt.Errorf("peers: start gossip: %w", err)
	}
	// UpdateNode waits for its gossip to go out; bound it (see Leave),
	// and keep it bounded where gossip is off (0 would mean no limit).
	updateWait := 5 * mc.GossipInterval
	if updateWait <= 0 {
		updateWait = time.Millisecond
	}
	if !announcesSelf(ml, cfg.Name, meta) {
		// memberlist listens before it records this node as alive
		// (Create: newMemberlist, then setAlive). A node restarted on its
		// address may hear the others gossip about its previous run in
		// between (its leave: an alive message with the leaving meta).
		// memberlist records that as this node's own state (dead) and
		// refutes it; if setAlive drew its incarnation before the
		// refutation raised it, setAlive is ignored, and the node goes on
		// announcing its previous run's leave, out of every ring until
		// restarted (seen twice in 550 key rotations under -race).
		// UpdateNode, with an incarnation above the refutation's, puts
		// our meta back.
		cfg.Logger.Info("peers: gossip about this node's previous run came first; announcing this run again")
		if err := reannounce(ml, updateWait); err != nil {
			_ = ml.Shutdown()
			ev.close()
			return nil, err
		}
	}
	p := &Peers{self: cfg.Name, ml: ml, ev: ev, giveUp: make(chan struct{}), joinDone: make(chan struct{}),
		seeds: cfg.Join, port: cfg.BindPort, resolver: cfg.Resolver, log: cfg.Logger, named: cfg.Cluster != "",
		seedAddrs: ipSeeds(cfg.Join, cfg.BindPort), updateWait: updateWait}
	alone := false
	if len(cfg.Join) > 0 {
		n, err := p.join()
		if alone = !p.joined(); alone {
			// Info, not Warn: nodes started together miss each other at
			// first. retryJoin warns if it lasts.
			cfg.Logger.Info("peers: no other node answered yet; running alone and trying the seeds again in the background",
				joinAttrs(cfg.Join, err)...)
		} else {
			cfg.Logger.Info("peers: joined cluster", "seeds_reached", n, "members", ml.NumMembers())
		}
	}
	ev.start()
	if alone || hasNames(cfg.Join, cfg.BindPort) {
		go p.retryJoin(cfg.JoinRetryMax)
	} else {
		close(p.joinDone)
	}
	if cfg.ReconnectInterval > 0 {
		go p.reconnect(cfg.ReconnectInterval)
	}
	return p, nil
}

// announcesSelf reports whether ml holds itself alive with meta. After
// Create only UpdateNode writes a node's own meta, and nothing but it
// makes a dead own entry alive, so what this sees then stays so.
func announcesSelf(ml *memberlist.Memberlist, self string, meta []byte) bool {
	for _, n := range ml.Members() { // the alive and suspect ones
		if n.Name == self {
			return bytes.Equal(n.Meta, meta)
		}
	}
	return false
}

// reannounce runs UpdateNode, which puts this node's own entry back with
// its meta. The entry that the early gossip made is dead, and memberlist
// drops dead entries when its probe list wraps (from one probe interval
// after Create): had that happened first, UpdateNode would dereference
// the missing entry (memberlist v0.7.0 reads it without a check). That
// state has no repair short of starting again, which the error asks for.
func reannounce(ml *memberlist.Memberlist, wait time.Duration) (err error) {
	defer func() {
		if recover() != nil {
			err = errors.New("peers: gossip lost this node's own entry before it could announce itself again; start it again")
		}
	}()
	_ = ml.UpdateNode(wait)
	return nil
}

// joinAttrs are the log attributes of a join that left the node alone; err
// is nil when only the node itself answered.
func joinAttrs(seeds []string, err error) []any {
	if err == nil {
		return []any{"seeds", seeds}
	}
	return []any{"seeds", seeds, "err", err}
}

// joined reports whether this node knows another live member. A seed that
// is this node itself answers a join, but leaves it alone.
func (p *Peers) joined() bool { return p.ml.NumMembers() > 1 }

// join resolves the seeds and joins every address they name. It returns
// how many answered, and what failed: lookups, and the join itself when
// none answered.
func (p *Peers) join() (int, error) {
	addrs, rerr := resolveSeeds(context.Background(), p.resolver, p.seeds, p.port)
	addrs = p.vetted(addrs)
	if len(addrs) == 0 {
		return 0, rerr
	}
	n, err := p.ml.Join(addrs)
	return n, errors.Join(rerr, err)
}

// retryJoin tries the seeds after 100ms, then after twice the wait before
// each time, up to longest, until this node knows another member or Leave or
// Shutdown gives up. An attempt under way when they do ends by itself,
// within memberlist's TCPTimeout.
//
// When the seeds are names, it goes on once joined: every longest, it
// resolves them again and joins the addresses that are no member's (see
// Config.Join). Nodes started together may each find only some of the
// others in DNS, and two halves that each joined would otherwise stay
// two clusters.
func (p *Peers) retryJoin(longest time.Duration) {
	defer close(p.joinDone)
	rediscover := hasNames(p.seeds, p.port)
	joined := p.joined() // Join got in: only rediscover
	wait := min(100*time.Millisecond, longest)
	if joined {
		wait = longest
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for attempt := 2; ; attempt++ {
		select {
		case <-p.giveUp:
			return
		case <-t.C:
		}
		if joined && p.joined() {
			p.joinNew()
			t.Reset(longest)
			continue
		}
		n := 0
		var err error
		if !p.joined() { // a member may have joined this node meanwhile
			n, err = p.join()
		}
		if p.joined() {
			p.log.Info("peers: joined cluster", "seeds_reached", n, "members", p.ml.NumMembers(), "attempts", attempt)
			if !rediscover {
				return
			}
			joined, wait = true, longest
			t.Reset(wait)
			continue
		}
		level := slog.LevelDebug
		if wait = min(2*wait, longest); wait == longest {
			level = slog.LevelWarn // every longest wait from now on: the node is still alone
		}
		p.log.Log(context.Background(), level, "peers: no other node answered; running alone",
			append(joinAttrs(p.seeds, err), "attempts", attempt, "retry_in", wait)...)
		t.Reset(wait)
	}
}

// joinNew resolves the seeds and joins the addresses among them that are
// no alive member's gossip address.
func (p *Peers) joinNew() {
	addrs, err := resolveSeeds(context.Background(), p.resolver, p.seeds, p.port)
	if err != nil {
		p.log.Debug("peers: resolving the seeds again", "seeds", p.seeds, "err", err)
	}
	known := aliveAddrs(p.ev.cur.Load().nodes)
	var unknown []string
	for _, a := range p.vetted(addrs) {
		if !known[a] {
			unknown = append(unknown, a)
		}
	}
	if len(unknown) == 0 {
		return
	}
	n, err := p.ml.Join(unknown)
	level := slog.LevelDebug // seeds that are gone and not yet out of DNS
	if n > 0 {
		level = slog.LevelInfo
	}
	p.log.Log(context.Background(), level, "peers: joined seeds that were not members",
		"seeds", unknown, "reached", n, "err", err)
}

// vetted returns addrs (seeds, resolved) less, when the cluster has no name
// (Config.Cluster), the addresses of members that died or left whose node
// does not answer a ping by the member's name: a node of another cluster
// may hold the address now (a recycled IP that DNS still lists), and a
// join would merge the clusters. With a name, such a node refuses the
// join itself.
func (p *Peers) vetted(addrs []string) []string {
	if p.named {
		return addrs
	}
	nodes := p.ev.cur.Load().nodes
	alive := aliveAddrs(nodes)
	departed := make(map[string]string) // name by address
	for id, m := range nodes {
		if id != p.self && m.state != stateAlive && !alive[m.addr] {
			departed[m.addr] = id
		}
	}
	keep := make([]bool, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		name, ok := departed[a]
		if !ok {
			keep[i] = true
			continue
		}
		wg.Go(func() {
			_, err := p.ml.Ping(name, gossipAddr(a))
			keep[i] = err == nil
		})
	}
	wg.Wait()
	var out []string
	for i, a := range addrs {
		if keep[i] {
			out = append(out, a)
		}
	}
	return out
}

// reconnect tries, every interval until Leave or Shutdown, to join again
// the members failure detection declared dead within reconnectFor, all at
// once. An attempt under way when they give up ends by itself, within
// memberlist's TCPTimeout.
//
// Why: memberlist probes and pushes state only to members it holds alive,
// gossips a death to the dead member for GossipToTheDeadTime at most,
// then forgets it. When a partition outlasts failure detection, each side
// holds the other dead and no packet would cross again once it heals.
// One join across is enough: the push/pull hands each side the other's
// members, and each node refutes the death the other side reports of it.
// A member that really died refuses or times out; one that came back
// under its name has joined by itself and is alive again, so not tried.
//
// In a cluster with a name, seeds that left are tried too (those given as
// IP addresses: names are looked up again by retryJoin): the first node
// of a cluster, which the others joined, often has only itself for a
// seed, and restarted it finds no one; it left, so without this the
// cluster stayed split for good. Without a name they are not: a seed
// retired on purpose may serve another cluster under the same node name
// (a fixed --name, or hostname:port), which a ping cannot tell apart.
//
// A join merges two clusters whoever answers. With a cluster name
// (Config.Cluster), another cluster's node drops the join. Without one,
// an address is joined only once a ping names the dead member and the
// node there answers it (memberlist answers only pings that name it):
// another cluster's node that took the address since, as a recycled pod
// IP, does not answer unless it has the same name, and the clusters stay
// apart. Without either they merged, and each served the other's keys
// (TestReconnectChecksIdentity). The ping is UDP only: a cluster whose
// UDP is blocked (memberlist then probes over TCP) heals only if it has a
// name, which joins over TCP when the ping goes unanswered.
//
// What the server must do about a member that comes back (it may have
// owned this node's keys meanwhile) is the server's: peers only reports it
// as a member again.
func (p *Peers) reconnect(interval time.Duration) {
	var joining sync.Map // addresses with a join under way in the background
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-p.giveUp:
			return
		case <-t.C:
		}
		dead := p.deadMembers(time.Now())
		if len(dead) == 0 {
			continue
		}
		var wg sync.WaitGroup
		var back atomic.Int32
		for _, m := range dead {
			wg.Go(func() {
				if _, err := p.ml.Ping(m.name, gossipAddr(m.addr)); err != nil {
					if !p.named {
						return // not there, or another node is
					}
					// Named: another cluster's node refuses the join, so
					// join over TCP anyway (UDP may be blocked), in the
					// background and one at a time per address, so that a
					// dial into a partition holds up no round. It ends by
					// itself within memberlist's TCPTimeout, Shutdown or not.
					if _, busy := joining.LoadOrStore(m.addr, true); !busy {
						go func() {
							defer joining.Delete(m.addr)
							_, _ = p.ml.Join([]string{m.addr})
						}()
					}
					return
				}
				if n, _ := p.ml.Join([]string{m.addr}); n > 0 {
					back.Add(1)
				}
			})
		}
		wg.Wait()
		level := slog.LevelDebug // a member that died for good
		if back.Load() > 0 {
			level = slog.LevelInfo
		}
		p.log.Log(context.Background(), level, "peers: tried to reach members that departed",
			"members", dead, "reached", back.Load())
	}
}

// deadMember is a member reconnect tries: its name and gossip address.
type deadMember struct{ name, addr string }

// String is how the log shows it.
func (m deadMember) String() string { return m.name + "@" + m.addr }

// deadMembers returns the members that died, and the seeds (seedAddrs)
// that left, within reconnectFor of now, less those at the address of an
// alive member (a node back at the same address under another name), one
// per address.
func (p *Peers) deadMembers(now time.Time) []deadMember {
	nodes := p.ev.cur.Load().nodes
	alive := aliveAddrs(nodes)
	var dead []deadMember
	for id, m := range nodes {
		gone := m.state == stateDead || p.named && m.state == stateLeft && !m.died.IsZero() && p.seedAddrs[m.addr]
		if id != p.self && gone && now.Sub(m.died) < reconnectFor && !alive[m.addr] {
			alive[m.addr] = true // once per address
			dead = append(dead, deadMember{id, m.addr})
		}
	}
	slices.SortFunc(dead, func(a, b deadMember) int { return strings.Compare(a.addr, b.addr) })
	return dead
}

// gossipAddr is a gossip address (HOST:PORT) as a net.Addr, for
// memberlist's Ping, which sends to its String.
type gossipAddr string

func (a gossipAddr) Network() string { return "udp" }
func (a gossipAddr) String() string  { return string(a) }

// aliveAddrs returns the gossip addresses of the alive members in nodes.
func aliveAddrs(nodes map[string]*member) map[string]bool {
	alive := make(map[string]bool)
	for _, m := range nodes {
		if m.state == stateAlive {
			alive[m.addr] = true
		}
	}
	return alive
}

// Self returns this node's ID.
func (p *Peers) Self() string { return p.self }

// GossipAddr returns the address this node gossips on, as the others see
// it: what to put in another node's Config.Join.
func (p *Peers) GossipAddr() string {
	if m, ok := p.ev.cur.Load().nodes[p.self]; ok {
		return m.addr
	}
	return ""
}

// Ring returns the current ring snapshot. After Leave it no longer holds
// this node; it may then be empty.
func (p *Peers) Ring() *ring.Ring { return p.ev.cur.Load().ring }

// Meta returns the metadata of the alive member id.
func (p *Peers) Meta(id string) (Meta, bool) {
	m, ok := p.ev.cur.Load().nodes[id]
	if !ok || m.state != stateAlive {
		return Meta{}, false
	}
	return m.meta, true
}

// Left reports whether gossip saw member id leave gracefully (it
// announced its leave), and the boot ID (Meta.Boot) of the run that left.
// A run that left never comes back: a node that returns under the same
// name is a new run, with a boot ID of its own. Departed members are
// remembered for a while only (maxDeparted).
func (p *Peers) Left(id string) (boot string, ok bool) {
	m, ok := p.ev.cur.Load().nodes[id]
	if !ok || m.state != stateLeft {
		return "", false
	}
	return m.meta.Boot, true
}

// Leave tells the cluster this node is going, and waits up to timeout
// (0: no limit) for the news to go out. The others drop the node from their
// rings at once instead of waiting for failure detection, and log it as
// left rather than dead. Gossip keeps running until Shutdown,
// which should follow. Calling Leave again does nothing.
func (p *Peers) Leave(timeout time.Duration) error {
	p.life.Lock()
	defer p.life.Unlock()
	if p.shut {
		return ErrClosed
	}
	if p.left {
		return nil
	}
	p.left = true
	p.giveUpOnce.Do(func() { close(p.giveUp) })
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	remaining := func() time.Duration {
		if deadline.IsZero() {
			return 0
		}
		return max(time.Until(deadline), time.Millisecond)
	}
	// memberlist's own leave message looks like a failure to the others
	// (see NotifyLeave), so first announce the leave in our meta. Gossip
	// alone may not carry it to everyone before the leave message (it
	// piggybacks on whatever packets go out, and the leave message replaces
	// it in the others' queues), so also hand it to each member directly.
	p.ev.setLeaving()
	// UpdateNode queues the new meta for gossip, then waits to hear that
	// it went out. memberlist (v0.7.0, memberlistBroadcast.Finished) tells
	// that with a send that is dropped when nobody waits yet: a broadcast
	// that reaches its retransmit limit before UpdateNode starts waiting
	// is never reported, and UpdateNode waits out its whole timeout (seen
	// under -race: all of Leave's 5 s, then the leave message itself given
	// 1 ms). Its wait is not what carries the news: pushState hands it to
	// every member over TCP, and they gossip it on. So it gets a few
	// gossip rounds, and running out of them is no error.
	wait := p.updateWait
	if !deadline.IsZero() {
		wait = min(wait, remaining())
	}
	_ = p.ml.UpdateNode(wait)
	pushBy := deadline
	if !deadline.IsZero() {
		pushBy = time.Now().Add(time.Until(deadline) / 2) // keep time for the leave itself
	}
	p.pushState(pushBy)
	return p.ml.Leave(remaining())
}

// pushState runs a TCP push/pull (memberlist's Join) with every other alive
// member at once, which hands over our current meta, and waits for them
// until deadline (zero: no limit). A push/pull still under way then ends by
// itself within memberlist's TCPTimeout.
func (p *Peers) pushState(deadline time.Time) {
	var wg sync.WaitGroup
	for id, m := range p.ev.cur.Load().nodes {
		if id != p.self && m.state == stateAlive {
			wg.Go(func() { _, _ = p.ml.Join([]string{m.addr}) })
		}
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-done:
	case <-timeout:
	}
}

// Shutdown stops gossip.
// Without a Leave first, the others notice only by failure detection.
// It is safe to call more than once.
func (p *Peers) Shutdown() error {
	p.life.Lock()
	defer p.life.Unlock()
	if p.shut {
		return nil
	}
	p.shut = true
	p.giveUpOnce.Do(func() { close(p.giveUp) })
	err := p.ml.Shutdown()
	p.ev.close()
	return err
}
