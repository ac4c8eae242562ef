package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// A setup is one column of the table: the processes that serve, started
// fresh for each run.
type setup struct {
	name    string // as the table shows it
	missing string // why it cannot run here ("" if it can)
	start   func(dir string) (*deployment, error)
}

// deployment is a running setup.
type deployment struct {
	procs []*proc  // all it runs: the setup's CPU is theirs
	entry []string // where the load goes
	nodes []string // the cache nodes, whose stats count requests per node
	// spillway is set when the nodes are Spillway's: a read a node
	// forwards is then counted at two nodes (see nodeRequests).
	spillway bool
	cmds     []string // the command lines that started it
}

func (d *deployment) stop() {
	for _, p := range d.procs {
		p.stop()
	}
}

// alive returns an error if one of d's processes has exited.
func (d *deployment) alive() error {
	for _, p := range d.procs {
		if err := p.exited(); err != nil {
			return err
		}
	}
	return nil
}

// launch starts a process of d and records its command line. A failure
// stops what d has started so far.
func (d *deployment) launch(name, bin string, args ...string) (*proc, error) {
	p, err := start(name, bin, args...)
	if err != nil {
		d.stop()
		return nil, err
	}
	d.procs = append(d.procs, p)
	d.cmds = append(d.cmds, bin+" "+strings.Join(args, " "))
	return p, nil
}

// memcachedArgs are the reference's flags: threads worker threads, 1 GiB,
// no UDP.
func memcachedArgs(port, threads int) []string {
	args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(port), "-t", strconv.Itoa(threads), "-m", "1024", "-U", "0"}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "root") // memcached will not run as root unless told to
	}
	return args
}

// startMemcached adds a memcached with threads worker threads on port to d
// and waits until it answers.
func (d *deployment) startMemcached(name string, port, threads int) error {
	p, err := d.launch(name, *memcachedBin, memcachedArgs(port, threads)...)
	if err != nil {
		return err
	}
	d.nodes = append(d.nodes, addr(port))
	return answersStats(p, addr(port))
}

func memcachedSetup() *setup {
	return &setup{name: "memcached", missing: missing(*memcachedBin, "memcached"),
		start: func(string) (*deployment, error) {
			ports, err := freePorts(1)
			if err != nil {
				return nil, err
			}
			d := new(deployment)
			if err := d.startMemcached("memcached", ports[0], singleThreads()); err != nil {
				d.stop()
				return nil, err
			}
			d.entry = d.nodes
			return d, nil
		}}
}

func spillwaySetup() *setup {
	return &setup{name: "Spillway", missing: missing(*spillwayBin, "`make build`"),
		start: oneProcess("spillway", true, *spillwayBin, func(listen string) []string {
			return []string{"serve", "-l", listen, "-m", "1024"}
		})}
}

// floorSetup is bench/floor serving model's way (goroutine or epoll), with
// as many event loops as memcached has worker threads.
func floorSetup(model string) *setup {
	name := map[string]string{"goroutine": "Go floor, goroutine per connection", "epoll": "Go floor, epoll loops"}[model]
	return &setup{name: name, missing: missing(*floorBin, "`go build -o bin/floor ./bench/floor`"),
		start: oneProcess("floor", false, *floorBin, func(listen string) []string {
			return []string{"-model", model, "-loops", strconv.Itoa(singleThreads()), "-l", listen}
		})}
}

// oneProcess starts a setup of one server: bin, with the arguments args
// makes of its listening address, on a free port (spillway: the server is
// Spillway, see deployment); the setup is ready once it answers stats.
func oneProcess(label string, spillway bool, bin string, args func(listen string) []string) func(string) (*deployment, error) {
	return func(string) (*deployment, error) {
		ports, err := freePorts(1)
		if err != nil {
			return nil, err
		}
		d := &deployment{spillway: spillway}
		p, err := d.launch(label, bin, args(addr(ports[0]))...)
		if err != nil {
			return nil, err
		}
		d.nodes = []string{addr(ports[0])}
		d.entry = d.nodes
		if err := answersStats(p, d.nodes[0]); err != nil {
			d.stop()
			return nil, err
		}
		return d, nil
	}
}

// clusterSize is the number of nodes of both cluster setups.
const clusterSize = 3

// singleThreads is the worker threads of the single memcached and the
// event loops of the epoll floor: the cores this process may use, which
// is also the single Spillway node's default (-t 0: GOMAXPROCS). On the
// README's 2-core machine, memcached -t 2, as in the table.
func singleThreads() int { return runtime.GOMAXPROCS(0) }

// clusterThreads is the threads of each server process of a cluster
// setup (memcached -t, spillway serve -t): the cluster's processes share
// this machine, and each gets its share of the cores, as nodes sharing a
// machine should be run. At the default, Spillway's three nodes ran 0.37
// context switches per request on 2 cores against 0.23 at -t 1, and spent
// more CPU per request in all of 6 pairs; memcached -t 1 and -t 2 were
// within noise of each other.
func clusterThreads() int { return max(1, runtime.GOMAXPROCS(0)/clusterSize) }

// twemproxySetup is nutcracker in front of three memcached, placing keys
// by ketama (libmemcached's consistent hashing), as twemproxy is usually
// deployed for memcached. The load goes to nutcracker.
func twemproxySetup() *setup {
	why := missing(*memcachedBin, "memcached")
	if why == "" {
		why = missing(*nutcrackerBin, "nutcracker")
	}
	return &setup{name: "twemproxy + 3 memcached", missing: why, start: func(dir string) (*deployment, error) {
		ports, err := freePorts(clusterSize + 2) // backends, proxy, nutcracker's stats port
		if err != nil {
			return nil, err
		}
		d := new(deployment)
		var servers strings.Builder
		for i, port := range ports[:clusterSize] {
			if err := d.startMemcached(fmt.Sprintf("memcached %d", i+1), port, clusterThreads()); err != nil {
				d.stop()
				return nil, err
			}
			// Named, so that ketama places keys by the name and not
			// by the port, which changes from run to run.
			fmt.Fprintf(&servers, "    - %s:1 mc%d\n", addr(port), i+1)
		}
		proxy := addr(ports[clusterSize])
		conf, text := filepath.Join(dir, "nutcracker.yml"), fmt.Sprintf(nutcrackerConf, proxy, servers.String())
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			d.stop()
			return nil, err
		}
		// Debian's build logs to /var/log and writes a pid file to /run
		// by default; its stats listen on every interface unless told.
		p, err := d.launch("nutcracker", *nutcrackerBin, "-c", conf, "-s", strconv.Itoa(ports[clusterSize+1]),
			"-a", "127.0.0.1", "-o", filepath.Join(dir, "nutcracker.log"), "-p", filepath.Join(dir, "nutcracker.pid"))
		if err != nil {
			return nil, err
		}
		d.cmds = append(d.cmds, "# nutcracker.yml:\n"+text)
		d.entry = []string{proxy}
		if err := accepts(p, proxy); err != nil {
			d.stop()
			return nil, err
		}
		return d, nil
	}}
}

// nutcrackerConf is the pool: listen address, then the servers' lines.
const nutcrackerConf = `pool:
  listen: %s
  hash: fnv1a_64
  distribution: ketama
  timeout: 1000
  auto_eject_hosts: false
  servers:
%s`

// clusterSetup is three `spillway serve` processes joined into one
// cluster, each told every gossip address. It is ready once every node's
// ring holds all three (stat cluster_nodes) and the owner grace of the
// last join is over.
//
// Within that grace a write of a key that moved in the join also clears
// it at its previous owner (one more exchange), and a miss warms from
// there: the cost of a membership change, not of the cluster as it runs,
// which twemproxy's side does not pay. The grace is set to clusterGrace
// (default 30 s) so that the runs do not wait that long for it.
func clusterSetup() *setup {
	return &setup{name: "Spillway, 3 nodes", missing: missing(*spillwayBin, "`make build`"),
		start: func(string) (*deployment, error) {
			ports, err := freePorts(3 * clusterSize) // client, gossip, peer
			if err != nil {
				return nil, err
			}
			client, gossip, peer := ports[:clusterSize], ports[clusterSize:2*clusterSize], ports[2*clusterSize:]
			join := make([]string, clusterSize)
			for i := range join {
				join[i] = addr(gossip[i])
			}
			d := &deployment{spillway: true}
			for i := range clusterSize {
				_, err := d.launch(fmt.Sprintf("spillway node%d", i+1), *spillwayBin, "serve",
					"-l", addr(client[i]), "-m", "1024", "--name", fmt.Sprintf("node%d", i+1),
					"--gossip", addr(gossip[i]), "--peer-listen", addr(peer[i]), "--join", strings.Join(join, ","),
					"--owner-grace", clusterGrace.String(), "--threads", strconv.Itoa(clusterThreads()))
				if err != nil {
					return nil, err
				}
				d.nodes = append(d.nodes, addr(client[i]))
			}
			d.entry = d.nodes
			deadline := time.Now().Add(joinTimeout)
			for i, p := range d.procs {
				err := poll(p, time.Until(deadline), fmt.Sprintf("in a cluster of %d", clusterSize), func() bool {
					s, err := stats(d.nodes[i])
					n, _ := statUint(s, "cluster_nodes")
					return err == nil && n == clusterSize
				})
				if err != nil {
					d.stop()
					return nil, err
				}
			}
			time.Sleep(clusterGrace + time.Second)
			return d, nil
		}}
}

// clusterGrace is the clusters' owner grace (spillway serve
// --owner-grace), waited out before a run.
const clusterGrace = 5 * time.Second

// missing says why bin cannot be run ("" if it can), naming what to
// install.
func missing(bin, install string) string {
	st, err := os.Stat(bin)
	if err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return ""
	}
	if strings.HasPrefix(install, "`") {
		return fmt.Sprintf("%s not found: run %s", bin, install)
	}
	return fmt.Sprintf("%s not found: apt-get install %s", bin, install)
}
