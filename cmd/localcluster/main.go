// Command localcluster is `make run`: it starts a cluster of "spillway
// serve" processes on loopback, each in a terminal of its own as far as
// signals go, and looks after them.
//
// Node i (from 0) listens for clients on PORT+i, gossips on PORT+100+i,
// serves metrics on PORT+200+i and takes peer requests on PORT+10000+i
// (spillway's default, the client port + 10000). Every node gets the same
// --join list, all the gossip addresses, its own included.
//
// If a node exits, localcluster says which, and which of its ports is
// taken and by what when it can tell (the process on Linux, a memcached by
// its VERSION anywhere), stops the others and exits 1. On Ctrl-C (SIGINT),
// SIGTERM or SIGHUP it stops the nodes one after another, so that each
// leaves a cluster whose other members are still there to hear it (nodes
// that all leave at once wait for each other's acknowledgements until a
// timeout), and exits 0; a second signal kills what is left.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	os.Exit(run(os.Args[1:], sig, os.Stdout, os.Stderr))
}

// Offsets from -port of each node's ports.
const (
	gossipOffset  = 100
	metricsOffset = 200
	peerOffset    = 10000 // spillway serve's default --peer-listen
)

// Bounds on waiting for the nodes.
const (
	readyTimeout = 30 * time.Second // until every node answers clients
	stopTimeout  = 20 * time.Second // one node's graceful stop: its --shutdown-timeout (10s) and leave (5s)
	pollEvery    = 20 * time.Millisecond
)

// node is one spillway serve process.
type node struct {
	name                          string
	client, gossip, metrics, peer int // ports
	cmd                           *exec.Cmd
	exited                        chan struct{} // closed once cmd.Wait returned
	err                           error         // cmd.Wait's, once exited is closed
}

// port is one of a node's ports: what it is for, the flag that sets it,
// and the protocols bound.
type port struct {
	what, flag string
	port       int
	protos     []string
}

func (n *node) ports() []port {
	return []port{
		{"client port", "--listen", n.client, []string{"tcp"}},
		{"peer port", "the client port + 10000", n.peer, []string{"tcp"}},
		{"gossip port", "--gossip", n.gossip, []string{"tcp", "udp"}},
		{"metrics port", "--metrics", n.metrics, []string{"tcp"}},
	}
}

// run is main without the exit: sig delivers the signals that stop the
// nodes (a second one kills them).
func run(args []string, sig <-chan os.Signal, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("localcluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bin := fs.String("bin", "bin/spillway", "the spillway binary")
	n := fs.Int("nodes", 3, "number of nodes")
	base := fs.Int("port", 11311, "first client port; gossip from port+100, metrics from port+200, peers from port+10000")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *n < 1 || *base < 1 || *base+peerOffset+*n-1 > 65535 {
		fmt.Fprintf(stderr, "localcluster: want -nodes 1 or more and -port from 1 to %d\n", 65535-peerOffset-*n+1)
		return 2
	}
	say := func(format string, a ...any) { fmt.Fprintf(stderr, "localcluster: "+format+"\n", a...) }

	nodes := make([]*node, *n)
	var join []string
	for i := range nodes {
		c := *base + i
		nodes[i] = &node{name: fmt.Sprintf("node%d", i+1), client: c, gossip: c + gossipOffset,
			metrics: c + metricsOffset, peer: c + peerOffset, exited: make(chan struct{})}
		join = append(join, addr(nodes[i].gossip))
	}
	// The nodes share this machine: each gets its share of the cores it
	// may use, as a deployment of several nodes on one machine should
	// (spillway serve --threads).
	threads := strconv.Itoa(max(1, runtime.GOMAXPROCS(0)/len(nodes)))
	exits := make(chan *node, len(nodes))
	for _, nd := range nodes {
		nd.cmd = exec.Command(*bin, "serve", "--listen", addr(nd.client), "--gossip", addr(nd.gossip),
			"--name", nd.name, "--metrics", addr(nd.metrics), "--join", strings.Join(join, ","), "--threads", threads)
		nd.cmd.Stdout, nd.cmd.Stderr = stdout, stderr
		nd.cmd.SysProcAttr = sysProcAttr()
		if err := nd.cmd.Start(); err != nil {
			say("%v", err)
			stopAll(nodes, sig, say)
			return 1
		}
		go func() {
			nd.err = nd.cmd.Wait()
			close(nd.exited)
			exits <- nd
		}()
	}

	ready := false
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		select {
		case s := <-sig:
			say("%v: stopping the nodes one after another", s)
			if stopAll(nodes, sig, say) {
				return 0
			}
			return 1
		case nd := <-exits:
			why := fmt.Sprint(nd.err)
			if nd.err == nil {
				why = "exit status 0"
			}
			say("%s exited (%s)%s; stopping the other nodes", nd.name, why, takenPorts(nd))
			stopAll(nodes, sig, say)
			return 1
		case <-tick.C:
			if ready {
				continue
			}
			if ready = allAnswer(nodes); ready {
				tick.Reset(time.Second) // only signals and exits matter now
				var clients []string
				for _, nd := range nodes {
					clients = append(clients, addr(nd.client))
				}
				last := nodes[len(nodes)-1]
				say("%d nodes up: clients %s; metrics, /debug/ring on %s-%d; Ctrl-C stops them",
					len(nodes), strings.Join(clients, ","), addr(nodes[0].metrics), last.metrics)
			} else if time.Now().After(deadline) {
				say("the nodes did not all answer clients within %v", readyTimeout)
				stopAll(nodes, sig, say)
				return 1
			}
		}
	}
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// allAnswer reports whether every node answers "version" on its client port.
func allAnswer(nodes []*node) bool {
	for _, nd := range nodes {
		if _, ok := version(addr(nd.client)); !ok {
			return false
		}
	}
	return true
}

// version asks addr for its memcached "version" line.
func version(a string) (string, bool) {
	c, err := net.DialTimeout("tcp", a, 200*time.Millisecond)
	if err != nil {
		return "", false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := io.WriteString(c, "version\r\n"); err != nil {
		return "", false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	v, ok := strings.CutPrefix(strings.TrimSpace(line), "VERSION ")
	return v, err == nil && ok
}

// takenPorts describes which of an exited node's ports another process
// holds, and which process when that can be told: "" if none is taken.
func takenPorts(nd *node) string {
	var b strings.Builder
	for _, p := range nd.ports() {
		for _, proto := range p.protos {
			if free(proto, p.port) {
				continue
			}
			fmt.Fprintf(&b, ": its %s %s (%s, %s) is taken", p.what, addr(p.port), p.flag, strings.ToUpper(proto))
			by := portHolder(proto, p.port)
			if by == "" {
				by = "another process"
			}
			if v, ok := version(addr(p.port)); ok && proto == "tcp" {
				by += ", which answers VERSION " + v
			}
			b.WriteString(" by " + by)
		}
	}
	return b.String()
}

// free reports whether the loopback port is free for proto.
func free(proto string, p int) bool {
	var c io.Closer
	var err error
	if proto == "udp" {
		c, err = net.ListenPacket("udp", addr(p))
	} else {
		c, err = net.Listen("tcp", addr(p))
	}
	if err != nil {
		return !errors.Is(err, syscall.EADDRINUSE)
	}
	c.Close()
	return true
}

// stopAll stops the running nodes one after another, the last started
// first, each with SIGTERM and then SIGKILL after stopTimeout; a signal on
// sig meanwhile kills them all at once. It reports whether every node
// stopped by itself with exit status 0.
func stopAll(nodes []*node, sig <-chan os.Signal, say func(string, ...any)) bool {
	clean := true
	killed := false
	for _, nd := range slices.Backward(nodes) {
		if nd.cmd == nil || nd.cmd.Process == nil {
			continue
		}
		select {
		case <-nd.exited:
			continue // reported already, or exited with the others
		default:
		}
		if killed {
			nd.cmd.Process.Kill()
		} else {
			nd.cmd.Process.Signal(syscall.SIGTERM)
		}
		t := time.NewTimer(stopTimeout)
		select {
		case <-nd.exited:
		case s := <-sig:
			say("%v again: killing the nodes", s)
			killed = true
			nd.cmd.Process.Kill()
			<-nd.exited
		case <-t.C:
			say("%s did not stop within %v: killing it", nd.name, stopTimeout)
			nd.cmd.Process.Kill()
			<-nd.exited
		}
		t.Stop()
		if nd.err != nil {
			clean = false
		}
	}
	return clean && !killed
}
