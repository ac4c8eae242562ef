package peers

import (
	"bufio"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestEncryptedGossip runs real UDP+TCP gossip on 127.0.0.1 (port 0) with a
// SecretKey: two nodes with the same key form a cluster; a node with another
// key, or with none, cannot join it.
func TestEncryptedGossip(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	start := func(name string, key []byte, seeds ...string) (*Peers, error) {
		p, err := Join(Config{
			Name:      name,
			BindAddr:  "127.0.0.1",
			Join:      seeds,
			SecretKey: key,
			Meta:      Meta{Peer: "127.0.0.1:1", Weight: 1},
			Logger:    quietLogger(t),
			Profile:   Local,
			Tune:      fastTimings,
		}, nil)
		if err == nil {
			t.Cleanup(func() { _ = p.Shutdown() })
		}
		return p, err
	}
	a, err := start("a", key)
	if err != nil {
		t.Fatal(err)
	}
	seed := a.GossipAddr()
	if !strings.HasPrefix(seed, "127.0.0.1:") || strings.HasSuffix(seed, ":0") {
		t.Fatalf("GossipAddr = %q, want 127.0.0.1 and the port picked", seed)
	}
	b, err := start("b", key, seed)
	if err != nil {
		t.Fatalf("same key: %v", err)
	}
	eventually(t, "encrypted pair converges", func() string {
		for _, p := range []*Peers{a, b} {
			if got := ringString(p.Ring()); got != "a/1 b/1" {
				return p.Self() + " has ring " + got
			}
		}
		return ""
	})

	for _, tt := range []struct {
		name string
		key  []byte
	}{
		{"other key", []byte("fedcba9876543210")},
		{"no key", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if p, err := start("intruder", tt.key, seed); err == nil {
				t.Fatalf("joined with %s; ring %s", tt.name, ringString(p.Ring()))
			}
			if got := a.Ring().Len(); got != 2 {
				t.Errorf("a's ring has %d nodes after the failed join", got)
			}
		})
	}
}

// TestClientDialsPeer: the client for a member talks to the Peer address in
// its meta, keeps the connection idle for reuse, and closes it once the
// member has gone.
func TestClientDialsPeer(t *testing.T) {
	srv := newVersionServer(t)
	mn := &memNet{}
	a := startNode(t, mn, "a", 1)
	rec := &recorder{}
	b, err := Join(Config{
		Name:      "b",
		Join:      []string{a.p.GossipAddr()},
		Transport: mn.NewTransport("b"),
		Meta:      Meta{Peer: srv.addr()},
		Logger:    quietLogger(t),
		Profile:   Local,
		Tune:      fastTimings,
	}, rec.onChange)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown() })

	eventually(t, "a sees b", func() string {
		if _, ok := a.p.Client("b"); !ok {
			return "no client for b"
		}
		return ""
	})
	c, _ := a.p.Client("b")
	for range 3 {
		if err := c.Ping(); err != nil {
			t.Fatalf("Ping through the pool: %v", err)
		}
	}
	if n := srv.accepted(); n != 1 {
		t.Errorf("%d connections for 3 sequential pings, want 1 reused", n)
	}

	if err := b.Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, "idle connection closed after b left", func() string {
		if _, ok := a.p.Client("b"); ok {
			return "a still has a client for b"
		}
		if n := srv.open(); n != 0 {
			return "peer still has open connections"
		}
		return ""
	})
}

// versionServer answers memcached's "version" on 127.0.0.1 and counts
// connections.
type versionServer struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]bool
	total int
}

func newVersionServer(t *testing.T) *versionServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &versionServer{ln: ln, conns: make(map[net.Conn]bool)}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *versionServer) addr() string { return s.ln.Addr().String() }

func (s *versionServer) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = true
		s.total++
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			r := bufio.NewReader(c)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if strings.TrimSpace(line) == "version" {
					c.Write([]byte("VERSION 1.6.0\r\n"))
				}
			}
		}()
	}
}

func (s *versionServer) accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

func (s *versionServer) open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}
