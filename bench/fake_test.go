package bench

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeServer is a tiny memcached (get, set, stats) on a loopback listener,
// enough to drive the bench end to end and to misbehave on purpose.
type fakeServer struct {
	t  testing.TB
	ln net.Listener

	// corrupt, if set, rewrites a value on its way out.
	corrupt func(key string, val []byte) []byte
	// silent servers read requests and never answer.
	silent bool
	// cluster adds Spillway's cluster counters to stats.
	cluster bool

	mu     sync.Mutex
	items  map[string][]byte
	keys   map[string]int // requests per key, any command
	cmdGet int
	cmdSet int
	hits   int
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func newFakeServer(t testing.TB, setup func(*fakeServer)) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{t: t, ln: ln, items: map[string][]byte{}, keys: map[string]int{}, conns: map[net.Conn]struct{}{}}
	if setup != nil {
		setup(f)
	}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f
}

func (f *fakeServer) addr() string { return f.ln.Addr().String() }

func (f *fakeServer) close() {
	f.ln.Close()
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *fakeServer) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			c.Close()
			return
		}
		f.conns[c] = struct{}{}
		f.mu.Unlock()
		f.wg.Add(1)
		go f.serve(c)
	}
}

func (f *fakeServer) serve(c net.Conn) {
	defer f.wg.Done()
	defer c.Close()
	r := bufio.NewReader(c)
	w := bufio.NewWriter(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if f.silent {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			fmt.Fprint(w, "ERROR\r\n")
			continue
		}
		switch fields[0] {
		case "get":
			f.mu.Lock()
			for _, k := range fields[1:] {
				f.cmdGet++
				f.keys[k]++
				if v, ok := f.items[k]; ok {
					f.hits++
					if f.corrupt != nil {
						v = f.corrupt(k, append([]byte(nil), v...))
					}
					fmt.Fprintf(w, "VALUE %s 0 %d\r\n%s\r\n", k, len(v), v)
				}
			}
			f.mu.Unlock()
			fmt.Fprint(w, "END\r\n")
		case "set":
			n, _ := strconv.Atoi(fields[4])
			data := make([]byte, n+2)
			if _, err := io.ReadFull(r, data); err != nil {
				return
			}
			f.mu.Lock()
			f.cmdSet++
			f.keys[fields[1]]++
			f.items[fields[1]] = data[:n]
			f.mu.Unlock()
			fmt.Fprint(w, "STORED\r\n")
		case "stats":
			f.mu.Lock()
			fmt.Fprintf(w, "STAT pid 1\r\nSTAT cmd_get %d\r\nSTAT cmd_set %d\r\nSTAT get_hits %d\r\nSTAT get_misses %d\r\n",
				f.cmdGet, f.cmdSet, f.hits, f.cmdGet-f.hits)
			fmt.Fprintf(w, "STAT rusage_user %d.000000\r\nSTAT rusage_system 0.500000\r\n", f.cmdGet+f.cmdSet)
			if f.cluster {
				fmt.Fprintf(w, "STAT served %d\r\nSTAT spilled_served %d\r\nSTAT origin_fetches 7\r\n", f.cmdGet, f.cmdGet/4)
			}
			f.mu.Unlock()
			fmt.Fprint(w, "END\r\n")
		default:
			fmt.Fprint(w, "ERROR\r\n")
		}
		if r.Buffered() == 0 {
			if w.Flush() != nil {
				return
			}
		}
	}
}

// keysSeen returns the keys requested from f.
func (f *fakeServer) keysSeen() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.keys))
	for k, v := range f.keys {
		out[k] = v
	}
	return out
}
