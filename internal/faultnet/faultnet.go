// Package faultnet builds a small network of Linux network namespaces for
// fault tests, and breaks it on demand: one namespace per host, each
// joined to a bridge in the root namespace (which has the bridge's address,
// for the load generator and a test origin), then partitions, a slow and
// lossy link, and their repair.
//
//	root namespace:  <prefix>-br  10.77.0.254/24
//	                   │ <prefix>-h1 … <prefix>-hN   (host side of each link)
//	<prefix>-n1 … :  eth0  10.77.0.1/24 …
//
// A link is a veth pair. A host created Impairable gets a pair of TAP
// devices instead, which this process forwards frames between, so that it
// can delay and drop them when the kernel has no sch_netem (tc netem is
// used when it has). A partition gives each side permanent neighbour
// entries for the other side's addresses that point at a MAC nobody has:
// packets vanish silently, as on a cut link, and only between the nodes.
//
// It needs root (CAP_NET_ADMIN) and iproute2's ip and tc, and is for tests
// only. Setup first removes whatever a crashed earlier run with the same
// prefix left behind (namespaces, the processes in them, links); Close
// removes what Setup made.
package faultnet

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Config describes a network. Zero fields take the defaults given.
type Config struct {
	// Prefix names every namespace and link made ("spwf" if empty); it
	// must be short, since a link name is at most 15 bytes.
	Prefix string
	// Hosts is the number of namespaces; at most 200.
	Hosts int
	// Subnet is the first three octets of the /24 used ("10.77.0" if
	// empty): host i (from 1) gets .i, the bridge .254.
	Subnet string
	// Impairable are the hosts (from 1) whose link Impair may slow down.
	Impairable []int
}

// Net is a running network. Its methods are safe for concurrent use.
type Net struct {
	cfg    Config
	netem  bool         // the kernel has sch_netem
	links  map[int]*tap // emulated links, by host
	mu     sync.Mutex
	parted bool // guarded by mu
}

// Check reports why this process cannot build a network: not root, or ip
// missing (it installs iproute2 with apt-get first when it can).
func Check() error {
	if os.Geteuid() != 0 {
		return errors.New("faultnet: needs root (CAP_NET_ADMIN) to create network namespaces; run it as root, e.g. sudo make test-faults")
	}
	if _, err := exec.LookPath("ip"); err == nil {
		if _, err := exec.LookPath("tc"); err == nil {
			return nil
		}
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return errors.New("faultnet: ip and tc (iproute2) are missing and there is no apt-get to install them")
	}
	for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "iproute2"}} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("faultnet: installing iproute2: apt-get %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("faultnet: iproute2 installed, but ip is still not on PATH")
	}
	return nil
}

func (c *Config) setDefaults() error {
	if c.Prefix == "" {
		c.Prefix = "spwf"
	}
	if c.Subnet == "" {
		c.Subnet = "10.77.0"
	}
	if c.Hosts < 1 || c.Hosts > 200 {
		return fmt.Errorf("faultnet: %d hosts; want 1 to 200", c.Hosts)
	}
	if len(c.Prefix)+len("-h")+3 > 15 {
		return fmt.Errorf("faultnet: prefix %q too long for a link name", c.Prefix)
	}
	return nil
}

// Setup removes the leftovers of an earlier run with cfg's prefix, then
// builds the network. On error nothing of it is left.
func Setup(cfg Config) (_ *Net, err error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if err := Check(); err != nil {
		return nil, err
	}
	if err := Cleanup(cfg.Prefix); err != nil {
		return nil, err
	}
	n := &Net{cfg: cfg, links: map[int]*tap{}}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if err := n.checkSubnet(); err != nil {
		return nil, err
	}
	br := n.Bridge()
	if err := run("ip", "link", "add", br, "type", "bridge"); err != nil {
		return nil, fmt.Errorf("faultnet: %w (is this process allowed to create links?)", err)
	}
	// The bridge forwards at once (no STP listening/learning delay).
	if err := runAll(
		[]string{"ip", "link", "set", br, "type", "bridge", "forward_delay", "0", "stp_state", "0"},
		[]string{"ip", "addr", "add", n.BridgeIP() + "/24", "dev", br},
		[]string{"ip", "link", "set", br, "up"},
	); err != nil {
		return nil, err
	}
	n.netem = n.probeNetem()
	for h := 1; h <= cfg.Hosts; h++ {
		if err := n.addHost(h); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// checkSubnet refuses a subnet that an interface outside this network
// already uses: its routes would collide with the bridge's.
func (n *Net) checkSubnet() error {
	out, err := output("ip", "-o", "-4", "addr", "show")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, " "+n.cfg.Subnet+".") {
			return fmt.Errorf("faultnet: subnet %s.0/24 is already in use here: %s", n.cfg.Subnet, strings.TrimSpace(line))
		}
	}
	return nil
}

// probeNetem reports whether tc can add a netem qdisc (to the bridge, then
// removes it).
func (n *Net) probeNetem() bool {
	if run("tc", "qdisc", "add", "dev", n.Bridge(), "root", "netem", "delay", "1ms") != nil {
		return false
	}
	_ = run("tc", "qdisc", "del", "dev", n.Bridge(), "root")
	return true
}

func (n *Net) addHost(h int) error {
	ns, hostLink := n.Namespace(h), n.hostLink(h)
	if err := run("ip", "netns", "add", ns); err != nil {
		return err
	}
	emulate := !n.netem && n.impairable(h)
	if emulate {
		t, err := newTap(n.cfg.Prefix+"-g"+strconv.Itoa(h), hostLink)
		if err != nil {
			return err
		}
		n.links[h] = t
		if err := run("ip", "link", "set", t.guest.name, "netns", ns); err != nil {
			return err
		}
		if err := run("ip", "-n", ns, "link", "set", t.guest.name, "name", "eth0"); err != nil {
			return err
		}
		t.start()
	} else if err := run("ip", "link", "add", hostLink, "type", "veth", "peer", "name", "eth0", "netns", ns); err != nil {
		return err
	}
	return runAll(
		[]string{"ip", "link", "set", hostLink, "master", n.Bridge(), "up"},
		[]string{"ip", "-n", ns, "addr", "add", n.IP(h) + "/24", "dev", "eth0"},
		[]string{"ip", "-n", ns, "link", "set", "eth0", "up"},
		[]string{"ip", "-n", ns, "link", "set", "lo", "up"},
	)
}

func (n *Net) impairable(h int) bool {
	for _, i := range n.cfg.Impairable {
		if i == h {
			return true
		}
	}
	return false
}

// Namespace is host h's network namespace (h from 1).
func (n *Net) Namespace(h int) string { return n.cfg.Prefix + "-n" + strconv.Itoa(h) }

// IP is host h's address.
func (n *Net) IP(h int) string { return n.cfg.Subnet + "." + strconv.Itoa(h) }

// BridgeIP is the root namespace's address on the bridge.
func (n *Net) BridgeIP() string { return n.cfg.Subnet + ".254" }

// Bridge is the bridge's name.
func (n *Net) Bridge() string { return n.cfg.Prefix + "-br" }

func (n *Net) hostLink(h int) string { return n.cfg.Prefix + "-h" + strconv.Itoa(h) }

// Emulated reports whether Impair emulates links in this process (the
// kernel has no sch_netem) rather than with tc netem.
func (n *Net) Emulated() bool { return !n.netem }

// Command returns a command that runs name in host h's namespace. Its
// process dies with this one (SIGKILL), and is in a process group of its
// own.
func (n *Net) Command(h int, name string, args ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.Namespace(h), name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	return cmd
}

// deadMAC is where a partitioned host sends the other side's packets: no
// interface has it, so they are dropped without an error.
const deadMAC = "02:00:00:00:de:ad"

// Partition cuts every link between a host of one side and a host of
// another, both ways; each host keeps its link to the root namespace.
// Hosts in no side are reachable from all. It replaces an earlier
// partition.
func (n *Net) Partition(sides ...[]int) error {
	if err := n.Heal(); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.parted = true
	// One ip -batch per host: the cut takes effect within milliseconds.
	for i, side := range sides {
		for _, h := range side {
			var batch strings.Builder
			for j, other := range sides {
				if i == j {
					continue
				}
				for _, o := range other {
					fmt.Fprintf(&batch, "neigh replace %s lladdr %s dev eth0 nud permanent\n", n.IP(o), deadMAC)
				}
			}
			cmd := exec.Command("ip", "-n", n.Namespace(h), "-batch", "-")
			cmd.Stdin = strings.NewReader(batch.String())
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("faultnet: partition %s: %v: %s", n.Namespace(h), err, out)
			}
		}
	}
	return nil
}

// Heal ends a partition: every host forgets its neighbour entries and
// resolves the others afresh.
func (n *Net) Heal() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.parted {
		return nil
	}
	for h := 1; h <= n.cfg.Hosts; h++ {
		if err := run("ip", "-n", n.Namespace(h), "neigh", "flush", "dev", "eth0", "nud", "all"); err != nil {
			return err
		}
	}
	n.parted = false
	return nil
}

// Impair delays every packet host h sends by delay and drops a fraction
// loss of them (0.05: 5 %), as tc netem on the host's interface would;
// Impair(h, 0, 0) restores the link. The host must have been configured
// Impairable.
func (n *Net) Impair(h int, delay time.Duration, loss float64) error {
	if !n.impairable(h) {
		return fmt.Errorf("faultnet: host %d was not set up impairable", h)
	}
	if t := n.links[h]; t != nil {
		t.impair(delay, loss)
		return nil
	}
	ns := n.Namespace(h)
	if delay == 0 && loss == 0 {
		return run("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "eth0", "root")
	}
	return run("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", "eth0", "root", "netem",
		"delay", fmt.Sprintf("%dus", delay.Microseconds()), "loss", fmt.Sprintf("%g%%", loss*100))
}

// LinkStats returns, for an emulated link, the frames host h sent and
// how many of them were dropped; zeros otherwise.
func (n *Net) LinkStats(h int) (sent, dropped uint64) {
	if t := n.links[h]; t != nil {
		return t.sent.Load(), t.dropped.Load()
	}
	return 0, 0
}

// Close kills the processes left in the namespaces and removes everything
// Setup made.
func (n *Net) Close() error {
	for _, t := range n.links {
		t.close()
	}
	return Cleanup(n.cfg.Prefix)
}

// Cleanup removes every namespace named prefix-n* (after killing the
// processes in it) and every link named prefix-*: what a run that died
// without Close left behind.
func Cleanup(prefix string) error {
	if prefix == "" {
		return errors.New("faultnet: empty prefix")
	}
	var errs []error
	out, err := output("ip", "netns", "list")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], prefix+"-n") {
			continue
		}
		ns := f[0]
		if pids, err := output("ip", "netns", "pids", ns); err == nil {
			for _, p := range strings.Fields(pids) {
				if pid, err := strconv.Atoi(p); err == nil && pid > 1 && pid != os.Getpid() {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		// A process just killed may still hold the namespace for a moment.
		var derr error
		for try := 0; try < 50; try++ {
			if derr = run("ip", "netns", "del", ns); derr == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if derr != nil {
			errs = append(errs, derr)
		}
	}
	links, err := output("ip", "-o", "link", "show")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(links, "\n") {
		f := strings.Fields(line) // "3: name@peer: <...>"
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if strings.HasPrefix(name, prefix+"-") {
			if err := run("ip", "link", "del", name); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func run(name string, args ...string) error {
	_, err := output(name, args...)
	return err
}

func runAll(cmds ...[]string) error {
	for _, c := range cmds {
		if err := run(c[0], c[1:]...); err != nil {
			return err
		}
	}
	return nil
}

func output(name string, args ...string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// Do runs fn on an OS thread that has entered host h's network namespace:
// sockets fn opens (net.Listen, net.Dial) belong to that namespace, and
// stay there after Do returns.
func (n *Net) Do(h int, fn func() error) error {
	target, err := os.Open("/var/run/netns/" + n.Namespace(h))
	if err != nil {
		return err
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open(fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), syscall.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer self.Close()
		if err := setns(target); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		ferr := fn()
		if err := setns(self); err != nil {
			// The thread stays locked and exits with this goroutine, so
			// that nothing else runs in the wrong namespace.
			errc <- errors.Join(ferr, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

func setns(f *os.File) error {
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("faultnet: setns: %w", err)
	}
	return nil
}
