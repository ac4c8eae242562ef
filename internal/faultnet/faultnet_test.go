package faultnet

import (
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestNet builds three hosts, the third impairable, and checks that they
// reach each other and the root namespace, that a partition cuts hosts
// apart (and not the root namespace), that Heal mends it, and that Impair
// slows the third host's round trips. It needs root: it runs when
// SPILLWAY_FAULTS is set (make test-faults), and skips otherwise.
func TestNet(t *testing.T) {
	if os.Getenv("SPILLWAY_FAULTS") == "" {
		t.Skip("SPILLWAY_FAULTS not set: the network fault tests need root (make test-faults)")
	}
	n, err := Setup(Config{Prefix: "spwft", Hosts: 3, Subnet: "10.77.9", Impairable: []int{3}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	}()
	t.Logf("links emulated in this process (no sch_netem): %v", n.Emulated())

	// An echo server in each namespace and in the root one.
	var lns []net.Listener
	for h := 0; h <= 3; h++ {
		listen := func() error {
			ip := n.BridgeIP()
			if h > 0 {
				ip = n.IP(h)
			}
			ln, err := net.Listen("tcp", ip+":7000")
			if err == nil {
				lns = append(lns, ln)
				go echo(ln)
			}
			return err
		}
		if h == 0 {
			err = listen()
		} else {
			err = n.Do(h, listen)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	rtt := func(from, to int) (time.Duration, error) {
		var d time.Duration
		addr := n.BridgeIP() + ":7000"
		if to > 0 {
			addr = n.IP(to) + ":7000"
		}
		dial := func() error {
			start := time.Now()
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.Write([]byte("x")); err != nil {
				return err
			}
			if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
				return err
			}
			d = time.Since(start)
			return nil
		}
		if from == 0 {
			return d, dial()
		}
		return d, n.Do(from, dial)
	}
	for from := 0; from <= 3; from++ {
		for to := 0; to <= 3; to++ {
			if from != to {
				if _, err := rtt(from, to); err != nil {
					t.Errorf("%d -> %d: %v", from, to, err)
				}
			}
		}
	}

	if err := n.Partition([]int{1}, []int{2, 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := rtt(1, 2); err == nil {
		t.Error("1 -> 2 connected across the partition")
	}
	if _, err := rtt(3, 1); err == nil {
		t.Error("3 -> 1 connected across the partition")
	}
	for _, p := range [][2]int{{2, 3}, {0, 1}, {1, 0}, {0, 3}} {
		if _, err := rtt(p[0], p[1]); err != nil {
			t.Errorf("%d -> %d inside a side or to the root namespace: %v", p[0], p[1], err)
		}
	}
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	if _, err := rtt(1, 2); err != nil {
		t.Errorf("1 -> 2 after Heal: %v", err)
	}

	if err := n.Impair(3, 100*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	// Connect and one exchange: the SYN-ACK and the echo leave host 3.
	if d, err := rtt(0, 3); err != nil || d < 200*time.Millisecond {
		t.Errorf("0 -> 3 with 100ms on 3's link: %v, %v; want >= 200ms", d, err)
	}
	if err := n.Impair(3, 0, 0); err != nil {
		t.Fatal(err)
	}
	if d, err := rtt(0, 3); err != nil || d > 100*time.Millisecond {
		t.Errorf("0 -> 3 restored: %v, %v", d, err)
	}
}

func echo(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}
