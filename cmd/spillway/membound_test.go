package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The memory bound README states under Operations "Memory": a node's RSS
// stays within 1.1 × (-m + --copy-memory) + 64 MiB + connBudget per open
// connection, at any fill level and any value size.
const (
	boundMiB, boundCopyMiB = 64, 16
	boundSlackMiB          = 64
	// connBudget is what README states a busy connection may hold: an
	// idle one's cost, its read and write buffers (16 + 64 KiB) and one
	// request's value on its way in or out (-I, 1 MiB).
	connBudget = idleConnBudget + 80<<10 + 1<<20
)

// rssBound is the bound for a node with conns open client connections.
func rssBound(conns int) int {
	return (boundMiB+boundCopyMiB)<<20*11/10 + boundSlackMiB<<20 + conns*connBudget
}

// A node filled past its -m with unique keys, at every value size memcached
// accepts, stays within the stated bound: every byte an item costs is
// charged against -m, and the Go heap is held to its part of the budget.
func TestMemoryBoundFill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and fills them")
	}
	cases := []struct {
		name string
		size int
		ci   bool // run under SPILLWAY_CI too
	}{
		{"16B", 16, true},
		{"100B", 100, false}, // 5 s under -race; 16B covers small values in CI
		{"4KiB", 4 << 10, false},
		{"100KiB", 100 << 10, false},
		{"1MiB", 1<<20 - 512, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !c.ci && os.Getenv("SPILLWAY_CI") != "" {
				t.Skip("CI fills 16-byte and 1 MiB values only")
			}
			n := startNode(t, "fill"+c.name, "", "-m", strconv.Itoa(boundMiB), "--copy-memory", strconv.Itoa(boundCopyMiB))
			waitNodes(t, 1, n)
			const conns = 4
			f := newFiller(t, n.client, conns, c.size)
			peak := 0
			// Until the store has turned over: as many evictions as it holds
			// items, so it was filled to about twice its capacity.
			deadline := time.Now().Add(45 * time.Second)
			for round := 0; ; round++ {
				f.fill(t, max(2<<20/(c.size+40), 1)) // about 2 MiB a connection
				peak = max(peak, rss(t, n.cmd.Process.Pid))
				st := stats(t, n.client)
				if st["evictions"] >= st["curr_items"] && st["evictions"] > 0 {
					t.Logf("value %d B: %d sets, %d items held, %d evicted, peak RSS %d MiB, bound %d MiB",
						c.size, f.sent, st["curr_items"], st["evictions"], peak>>20, rssBound(conns+1)>>20)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after %d rounds (%d sets, %d items, %d evictions) the store has not turned over", round, f.sent, st["curr_items"], st["evictions"])
				}
			}
			if bound := rssBound(conns + 1); peak > bound {
				t.Errorf("value %d B: RSS reached %d MiB, over the bound of %d MiB", c.size, peak>>20, bound>>20)
			}
		})
	}
}

// filler writes unique keys over a few connections at once, each batch
// pipelined with noreply and closed by mn.
type filler struct {
	conns []*lineConn
	size  int
	value string
	sent  int
	name  string
}

func newFiller(t *testing.T, addr string, conns, size int) *filler {
	f := &filler{size: size, value: strings.Repeat("v", size), name: strconv.Itoa(size)}
	for range conns {
		c := dialLine(t, addr)
		t.Cleanup(func() { c.Close() })
		f.conns = append(f.conns, c)
	}
	return f
}

// fill sends per sets on each connection and waits until all are stored.
func (f *filler) fill(t *testing.T, per int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(f.conns))
	for i, c := range f.conns {
		base := f.sent + i*per
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := bufio.NewWriterSize(c, 64<<10)
			var line []byte
			for k := range per {
				line = append(line[:0], "set f"...)
				line = append(line, f.name...)
				line = append(line, ':')
				line = strconv.AppendInt(line, int64(base+k), 10)
				line = append(line, " 0 0 "...)
				line = strconv.AppendInt(line, int64(f.size), 10)
				line = append(line, " noreply\r\n"...)
				w.Write(line)
				w.WriteString(f.value)
				w.WriteString("\r\n")
			}
			w.WriteString("mn\r\n")
			if err := w.Flush(); err != nil {
				errs <- err
				return
			}
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			if l, err := c.r.ReadString('\n'); err != nil || l != "MN\r\n" {
				errs <- fmt.Errorf("after %d sets: %q, %v", per, l, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	f.sent += per * len(f.conns)
}

// stats reads a node's numeric stats.
func stats(t *testing.T, addr string) map[string]int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c, "stats\r\n")
	st := make(map[string]int)
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 1 && f[0] == "END" {
			return st
		}
		if len(f) == 3 && f[0] == "STAT" {
			if v, err := strconv.Atoi(f[2]); err == nil {
				st[f[1]] = v
			}
		}
	}
	t.Fatalf("stats: %v", sc.Err())
	return nil
}

// vmRSS is a process's resident set, in bytes (rss, for goroutines other
// than the test's).
func vmRSS(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.Atoi(f[1])
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// In a two-node cluster whose owned stores are full, reads through one
// node of keys the other owns spill (bounded loads) and fill the reader's
// copies and the owner's registry of copy holders; both nodes stay within
// the bound.
func TestMemoryBoundCopies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and fills them")
	}
	for _, size := range []int{1000, 64 << 10} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			args := []string{"-m", strconv.Itoa(boundMiB), "--copy-memory", strconv.Itoa(boundCopyMiB)}
			a := startNode(t, "a", "", args...)
			b := startNode(t, "b", "", append(args, "--join", a.gossip)...)
			waitNodes(t, 2, a, b)
			const conns = 4
			f := newFiller(t, a.client, conns, size)
			// One and a half times what the two owned stores hold.
			f.fill(t, 3*boundMiB<<20/(size+40)/conns)
			// The latest keys, which are still held: about three times
			// the copies b holds in 12 MiB, half of them owned by a.
			keys := make([]string, min(f.sent, 6*(boundCopyMiB<<20)/(size+250)))
			for i := range keys {
				keys[i] = fmt.Sprintf("f%d:%d", size, f.sent-len(keys)+i)
			}
			peak := map[*node]int{}
			for round := range 2 {
				readAll(t, b.client, conns, keys)
				for _, n := range []*node{a, b} {
					peak[n] = max(peak[n], rss(t, n.cmd.Process.Pid))
				}
				st := stats(t, b.client)
				t.Logf("value %d B, round %d: b holds %d copies (%d reads served spilled); RSS a %d MiB, b %d MiB",
					size, round, st["copies"], st["spilled_served"], peak[a]>>20, peak[b]>>20)
			}
			for _, n := range []*node{a, b} {
				if bound := rssBound(conns + 2); peak[n] > bound {
					t.Errorf("%s: RSS reached %d MiB, over the bound of %d MiB", n.client, peak[n]>>20, bound>>20)
				}
			}
		})
	}
}

// readAll gets keys over conns connections at once, 100 to a get.
func readAll(t *testing.T, addr string, conns int, keys []string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		c := dialLine(t, addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			for lo := i * 100; lo < len(keys); lo += conns * 100 {
				fmt.Fprintf(c, "get %s\r\n", strings.Join(keys[lo:min(lo+100, len(keys))], " "))
				c.SetReadDeadline(time.Now().Add(30 * time.Second))
				for {
					l, err := c.r.ReadString('\n')
					if err != nil {
						errs <- err
						return
					}
					if l == "END\r\n" {
						break
					}
					// VALUE <key> <flags> <bytes>
					f := strings.Fields(l)
					n, err := strconv.Atoi(f[len(f)-1])
					if len(f) != 4 || f[0] != "VALUE" || err != nil {
						errs <- fmt.Errorf("get: %q", l)
						return
					}
					if _, err := c.r.Discard(n + 2); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A flood of unique 1 MiB sets over many connections at once stays within
// the bound for that many connections.
func TestMemoryBoundFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process and floods it")
	}
	n := startNode(t, "flood", "", "-m", strconv.Itoa(boundMiB), "--copy-memory", strconv.Itoa(boundCopyMiB))
	waitNodes(t, 1, n)
	const conns, rounds = 32, 3
	f := newFiller(t, n.client, conns, 1<<20-512)
	done := make(chan struct{})
	peak := make(chan int)
	go func() {
		p := 0
		for {
			if r, err := vmRSS(n.cmd.Process.Pid); err == nil {
				p = max(p, r)
			}
			select {
			case <-done:
				peak <- p
				return
			case <-time.After(10 * time.Millisecond): // polls a process's memory
			}
		}
	}()
	for range rounds {
		f.fill(t, 4)
	}
	close(done)
	p := <-peak
	bound := rssBound(conns + 1)
	t.Logf("%d connections, %d sets of 1 MiB: peak RSS %d MiB, bound %d MiB", conns, f.sent, p>>20, bound>>20)
	if p > bound {
		t.Errorf("RSS reached %d MiB, over the bound of %d MiB", p>>20, bound>>20)
	}
}
