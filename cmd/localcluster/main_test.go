package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"spillway/internal/buildtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	buildtest.Cleanup()
	os.Exit(code)
}

func buildSpillway(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds spillway and starts processes")
	}
	bin, err := buildtest.Binary("../spillway")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// freeBase returns a -port for three nodes all of whose ports are free now,
// below the kernel's ephemeral range (32768 up), where a port could be
// handed to an outgoing connection of a test running alongside.
func freeBase(t *testing.T) int {
	t.Helper()
	for range 100 {
		base := 12000 + rand.IntN(10000)
		ok := true
		for i := range 3 {
			nd := node{client: base + i, gossip: base + gossipOffset + i, metrics: base + metricsOffset + i, peer: base + peerOffset + i}
			for _, p := range nd.ports() {
				for _, proto := range p.protos {
					ok = ok && free(proto, p.port)
				}
			}
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free ports")
	return 0
}

// output is a file for the nodes' and localcluster's output: the children
// write to it directly, so it needs no lock.
func output(t *testing.T) (*os.File, func() string) {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, func() string {
		b, _ := os.ReadFile(f.Name())
		return string(b)
	}
}

// start runs localcluster on base; its exit code arrives on the channel.
func start(t *testing.T, bin string, base int, out *os.File, sig chan os.Signal) <-chan int {
	done := make(chan int, 1)
	go func() { done <- run([]string{"-bin", bin, "-port", strconv.Itoa(base)}, sig, out, out) }()
	return done
}

// TestPortTaken: a node that cannot bind its port makes localcluster (and
// so `make run`) say which port is taken and by what, stop the other nodes
// and exit 1 (issue 15: make run reported success when every node had
// failed).
func TestPortTaken(t *testing.T) {
	bin := buildSpillway(t)
	base := freeBase(t)
	taken, err := net.Listen("tcp", addr(base+1)) // node2's client port
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	out, read := output(t)
	select {
	case code := <-start(t, bin, base, out, make(chan os.Signal, 1)):
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
	case <-time.After(time.Minute):
		t.Fatalf("still running after a minute:\n%s", read())
	}
	log := read()
	want := fmt.Sprintf("localcluster: node2 exited (exit status 1): its client port %s (--listen, TCP) is taken by ", addr(base+1))
	if runtime.GOOS == "linux" {
		want += fmt.Sprintf("localcluster.te (pid %d); stopping the other nodes\n", os.Getpid())
	}
	if !strings.Contains(log, want) {
		t.Errorf("output lacks %q:\n%s", want, log)
	}
	// The others were stopped: their ports are free again.
	for _, p := range []int{base, base + 2, base + gossipOffset, base + gossipOffset + 2} {
		if !free("tcp", p) {
			t.Errorf("port %d still taken after localcluster returned", p)
		}
	}
}

// TestStopsInTurn: Ctrl-C stops every node within a second or two, not the
// ~5s nodes that all leave at once wait for each other (issue 15), and
// localcluster then exits 0.
func TestStopsInTurn(t *testing.T) {
	bin := buildSpillway(t)
	base := freeBase(t)
	out, read := output(t)
	sig := make(chan os.Signal, 1)
	done := start(t, bin, base, out, sig)
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(read(), "localcluster: 3 nodes up") {
		select {
		case code := <-done:
			t.Fatalf("exit %d before the nodes were up:\n%s", code, read())
		default:
		}
		if time.Now().After(deadline) {
			sig <- os.Interrupt
			<-done
			t.Fatalf("not up within a minute:\n%s", read())
		}
		time.Sleep(20 * time.Millisecond) // polls a file the children write
	}
	stopped := time.Now()
	sig <- os.Interrupt
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d, want 0:\n%s", code, read())
		}
	case <-time.After(time.Minute):
		t.Fatalf("still running a minute after the interrupt:\n%s", read())
	}
	if d := time.Since(stopped); d > 3*time.Second {
		t.Errorf("took %v to stop", d)
	}
	if n := strings.Count(read(), "msg=stopped"); n != 3 {
		t.Errorf("%d nodes logged stopped, want 3:\n%s", n, read())
	}
	// The three nodes share this machine's cores (spillway serve -t).
	threads := fmt.Sprintf(" threads=%d ", max(1, runtime.GOMAXPROCS(0)/3))
	serving := 0
	for _, line := range strings.Split(read(), "\n") {
		if strings.Contains(line, "msg=serving") && strings.Contains(line, threads) {
			serving++
		}
	}
	if serving != 3 {
		t.Errorf("%d nodes logged serving with%s, want 3:\n%s", serving, threads, read())
	}
}

// TestMakeRun: `make run` with a port taken fails and says why, and its
// ports avoid memcached's 11211.
func TestMakeRun(t *testing.T) {
	spillway := buildSpillway(t)
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	base := freeBase(t)
	taken, err := net.Listen("tcp", addr(base)) // node1's client port
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "-s", "-C", "../..", "run", "RUN_PORT="+strconv.Itoa(base),
		"BIN="+spillway, "LOCALCLUSTER="+filepath.Join(filepath.Dir(spillway), "localcluster"))
	out, err := cmd.CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("make run: %v (want a failure, at once)\n%s", err, out)
	}
	if want := "localcluster: node1 exited (exit status 1): its client port " + addr(base); !strings.Contains(string(out), want) {
		t.Errorf("make run's output lacks %q:\n%s", want, out)
	}

	// The default ports, from the Makefile.
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var def int
	for _, line := range strings.Split(string(mk), "\n") {
		if v, ok := strings.CutPrefix(line, "RUN_PORT ?= "); ok {
			def, _ = strconv.Atoi(v)
		}
	}
	if def == 0 {
		t.Fatal("no RUN_PORT ?= in the Makefile")
	}
	for i := range 3 {
		nd := node{client: def + i, gossip: def + gossipOffset + i, metrics: def + metricsOffset + i, peer: def + peerOffset + i}
		for _, p := range nd.ports() {
			if p.port == 11211 {
				t.Errorf("make run puts node%d's %s on memcached's port 11211", i+1, p.what)
			}
		}
	}
}
