package wire

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/sys/unix"

	"spillway/internal/rawio"
)

// fakePeer answers mg with "VA <n> f0 c1 t-1" and the key repeated size
// times as the value, and anything else with HD, one request at a time,
// over net.Pipe: unbuffered, so a client that writes a whole batch before
// reading any reply stalls at once rather than when socket buffers fill.
type fakePeer struct {
	size int
	// notHeld is a key answered NS (the peer would have to fill it);
	// silent makes the peer read requests and answer none; hangUp, while
	// positive, makes it close the connection on an mg instead of
	// answering, and counts down; deaf makes it stop reading after the
	// next request, until hear is closed.
	notHeld  string
	silent   atomic.Bool
	deaf     atomic.Bool
	hear     chan struct{}
	hangUp   atomic.Int64
	requests atomic.Int64
	conns    atomic.Int64
	served   sync.WaitGroup
	mu       sync.Mutex
	open     []net.Conn
}

func (p *fakePeer) dial(ctx context.Context, addr string) (net.Conn, error) {
	client, server := net.Pipe()
	p.conns.Add(1)
	p.mu.Lock()
	p.open = append(p.open, server)
	p.mu.Unlock()
	p.served.Go(func() { p.serve(server) })
	return client, nil
}

func (p *fakePeer) serve(nc net.Conn) {
	defer nc.Close()
	r, w := bufio.NewReader(nc), bufio.NewWriter(nc)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		p.requests.Add(1)
		f := strings.Fields(line)
		if f[0] == "set" { // its data block
			if _, err := r.ReadString('\n'); err != nil {
				return
			}
		}
		switch {
		case p.deaf.Load():
			<-p.hear
			return
		case p.silent.Load():
			continue
		case (f[0] == "mg" || f[0] == "md") && p.hangUp.Add(-1) >= 0:
			return
		case f[0] == "mg" && f[1] == p.notHeld:
			w.WriteString("NS\r\n")
		case f[0] == "md" && f[1] == p.notHeld:
			w.WriteString("NF\r\n")
		case f[0] == "mg":
			v := strings.Repeat(f[1], p.size)
			fmt.Fprintf(w, "VA %d f0 c1 t-1\r\n%s\r\n", len(v), v)
		default:
			w.WriteString("HD\r\n")
		}
		if r.Buffered() == 0 {
			if w.Flush() != nil {
				return
			}
		}
	}
}

// closeAll ends the peer's side of every connection, as a restart does.
func (p *fakePeer) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.open {
		c.Close()
	}
	p.open = nil
}

// A batch far larger than any buffer between the two ends is written
// while its replies are read: every key comes back (issue: a large
// multi-get returned false misses when both sides blocked writing).
func TestFetchLargeBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakePeer{size: 100}
		c := New(Config{Addr: "peer", Dial: p.dial})
		defer c.Close()
		keys := make([]string, 5000)
		for i := range keys {
			keys[i] = fmt.Sprintf("key%d", i)
		}
		vals, err := c.Fetch(time.Second, keys, "fwd.x", "")
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			if !v.Found || !bytes.Equal(v.Data, bytes.Repeat([]byte(keys[i]), 100)) {
				t.Fatalf("key %d: found %v, %d bytes", i, v.Found, len(v.Data))
			}
		}
		c.Close()
		p.closeAll()
		p.served.Wait()
	})
}

// ExchangeAppend reads a reply into the caller's buffer, reusing it when
// it is large enough, with Line and Value capped so that appending to one
// cannot overwrite the other.
func TestExchangeAppend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakePeer{size: 3}
		c := New(Config{Addr: "peer", Dial: p.dial})
		defer c.Close()
		r, buf, err := c.ExchangeAppend(time.Second, AppendGet(nil, "ab", "fwd.x", ""), nil, nil)
		if err != nil || string(r.Line) != "VA 6 f0 c1 t-1" || string(r.Value) != "ababab" {
			t.Fatalf("mg: %q %q, %v", r.Line, r.Value, err)
		}
		if cap(r.Line) != len(r.Line) || cap(r.Value) != len(r.Value) {
			t.Errorf("Line and Value not capped: cap %d and %d", cap(r.Line), cap(r.Value))
		}
		big := make([]byte, 0, 64)
		r, buf, err = c.ExchangeAppend(time.Second, []byte("set k 0 0 1"), []byte("a"), big)
		if err != nil || string(r.Line) != "HD" || r.Value != nil {
			t.Fatalf("set: %q %q, %v", r.Line, r.Value, err)
		}
		if &buf[:1][0] != &big[:1][0] {
			t.Error("a buffer large enough was not reused")
		}
		c.Close()
		p.closeAll()
		p.served.Wait()
	})
}

// A pooled connection the peer closed is not used: the request goes on a
// new connection, once (a forwarded write is never sent twice).
func TestExchangeSkipsClosedPooledConn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakePeer{}
		c := New(Config{Addr: "peer", Dial: p.dial, MaxIdle: 2})
		defer c.Close()
		if _, err := c.Exchange(time.Second, []byte("set k 0 0 1"), []byte("a")); err != nil {
			t.Fatal(err)
		}
		p.closeAll() // the peer restarts
		synctest.Wait()
		r, err := c.Exchange(time.Second, []byte("set k 0 0 1"), []byte("b"))
		if err != nil || string(r.Line) != "HD" {
			t.Fatalf("exchange after the peer closed the pooled connection: %q, %v", r.Line, err)
		}
		if got := p.conns.Load(); got != 2 {
			t.Errorf("connections dialled: %d, want 2", got)
		}
		if got := p.requests.Load(); got != 2 {
			t.Errorf("requests the peer read: %d, want 2 (none sent twice)", got)
		}
		c.Close()
		p.closeAll()
		p.served.Wait()
	})
}

// A stream closed before its replies were read does not go back to the
// pool, and Close does not wait on a peer blocked writing those replies.
func TestStreamCloseUnread(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakePeer{size: 1000}
		c := New(Config{Addr: "peer", Dial: p.dial})
		defer c.Close()
		st, err := c.Open(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 100 {
			st.Send(fmt.Sprintf("k%d", i), "fwd.x", "")
		}
		if _, err := st.Next(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		st.Close()
		if took := time.Since(start); took != 0 {
			t.Errorf("Close waited %v", took)
		}
		if _, err := c.Fetch(time.Second, []string{"z"}, "fwd.x", ""); err != nil {
			t.Fatal(err)
		}
		if got := p.conns.Load(); got != 2 {
			t.Errorf("connections dialled: %d, want 2 (the unread one is not reused)", got)
		}
		c.Close()
		p.closeAll()
		p.served.Wait()
	})
}

// Peer authentication: a node with a secret the port accepts gets in, in
// either place of the port's list; one without, or with another, does not,
// and the port never takes a line of it for a request.
func TestSecrets(t *testing.T) {
	old, next := []byte("old-secret"), []byte("new-secret")
	for _, tc := range []struct {
		name         string
		port, dialer Secrets
		addr         string // the address the dialler dials, "" for the port's
		ok           bool
	}{
		{"same", Secrets{old}, Secrets{old}, "", true},
		{"rotating: the dialler presents the new one", Secrets{old, next}, Secrets{next, old}, "", true},
		{"rotating: the dialler still presents the old one", Secrets{next, old}, Secrets{old}, "", true},
		{"wrong", Secrets{old}, Secrets{next}, "", false},
		{"none presented", Secrets{old}, nil, "", false},
		{"the port asks for none", nil, Secrets{old}, "", false},
		{"a proof for another port's address (a relayed challenge)", Secrets{old}, Secrets{old}, "peer:impostor", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				client, server := net.Pipe()
				defer client.Close()
				portErr := make(chan error, 1)
				go func() {
					defer server.Close()
					if tc.port == nil {
						// A port without secrets: it waits for a request.
						buf := make([]byte, 64)
						n, _ := server.Read(buf)
						portErr <- fmt.Errorf("read %q", buf[:n])
						return
					}
					portErr <- tc.port.Challenge(server, "peer:a", time.Second)
				}()
				var dialErr error
				if tc.addr == "" {
					tc.addr = "peer:a"
				}
				if tc.dialer == nil {
					fmt.Fprint(client, "get k\r\n") // a node that does not know the exchange
					buf := make([]byte, 128)
					client.Read(buf) // the challenge
					client.Close()
				} else {
					dialErr = tc.dialer.Answer(client, tc.addr, time.Second)
					client.Close()
				}
				pErr := <-portErr
				if tc.ok && (dialErr != nil || pErr != nil) {
					t.Fatalf("dialler: %v, port: %v; want both in", dialErr, pErr)
				}
				if !tc.ok && pErr == nil {
					t.Fatalf("the port let it in (dialler: %v)", dialErr)
				}
			})
		})
	}
}

// A request that fails is cut off where it stands: what the kernel had
// not sent yet never reaches the peer. Closed the usual way, the
// connection still delivers it, then ends cleanly: across a partition, at
// the heal (an incr whose client had been told SERVER_ERROR was applied
// 27 s later, the whole small request having sat in the send queue). The
// peer here reads nothing until a large request has timed out; it then
// reads what reached it, and must find the connection reset rather than
// ended after the rest of what the kernel held.
func TestFailedRequestNeverArrivesLater(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := acceptOne(ln, nil)
	c := New(Config{Addr: ln.Addr().String()})
	defer c.Close()
	// Far more than loopback's send and receive buffers hold together.
	data := bytes.Repeat([]byte("v"), 32<<20)
	line := []byte(fmt.Sprintf("set k 0 0 %d", len(data)))
	if _, err := c.Exchange(200*time.Millisecond, line, data); err == nil {
		t.Fatal("a request to a peer that reads nothing succeeded")
	}
	peer := <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	defer peer.Close()
	peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, peer)
	if err == nil {
		t.Errorf("the peer's read ended cleanly after %d bytes, want a reset", n)
	}
}

// tcpAlive tells a pooled TCP connection that can carry a request from
// one that cannot, by a peek that neither waits nor takes a byte.
func TestTCPAlive(t *testing.T) {
	for _, tc := range []struct {
		name string
		peer func(t *testing.T, nc net.Conn) // what the peer did while the connection idled
		want bool
	}{
		{"idle", func(*testing.T, net.Conn) {}, true},
		{"closed by the peer", func(t *testing.T, nc net.Conn) { nc.Close() }, false},
		{"reset by the peer", func(t *testing.T, nc net.Conn) { abort(nc) }, false},
		{"bytes nobody asked for", func(t *testing.T, nc net.Conn) {
			if _, err := nc.Write([]byte("HD\r\n")); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			accepted := acceptOne(ln, nil)
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			peer := <-accepted
			if peer == nil {
				t.Fatal("accept failed")
			}
			defer peer.Close()
			tc.peer(t, peer)
			if !tc.want {
				// What the peer did reaches this end on loopback soon,
				// not within the peer's call: wait until the socket
				// shows it, then look once (a reset is seen by the first
				// look only).
				waitSocketReadable(t, nc.(*net.TCPConn))
			}
			if got := tcpAlive(nc.(*net.TCPConn)); got != tc.want {
				t.Fatalf("alive: %v, want %v", got, tc.want)
			}
			if tc.want {
				return
			}
			// The peek took nothing: what the peer sent is still there.
			if tc.name == "bytes nobody asked for" {
				b := make([]byte, 4)
				nc.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.ReadFull(nc, b); err != nil || string(b) != "HD\r\n" {
					t.Fatalf("read after the peek: %q, %v", b, err)
				}
			}
		})
	}
}

// A connection under TLS, whose socket's calls are raw, is still cut off
// with a reset when it fails (abort): the peer sees no clean end after
// what it was sent, as on a plain connection.
func TestAbortResetsUnderTLS(t *testing.T) {
	cert := selfSigned(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := acceptOne(ln, func(nc net.Conn) {
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		nc.(*tls.Conn).Handshake() // the client's dial waits for it
	})
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	c := New(Config{Addr: ln.Addr().String(), TLS: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}})
	defer c.Close()
	pc, err := c.dial(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := pc.nc.(*tls.Conn).NetConn().(*net.TCPConn); ok && runtime.GOOS == "linux" {
		t.Fatal("the socket under TLS is not wrapped (rawio)")
	}
	peer := <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	defer peer.Close()
	// Both ends finish the handshake, then the client's connection fails.
	done := make(chan error, 1)
	go func() {
		_, err := pc.nc.Write([]byte("mn\r\n"))
		done <- err
	}()
	peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 4)
	if _, err := io.ReadFull(peer, b); err != nil || string(b) != "mn\r\n" {
		t.Fatalf("peer read %q, %v", b, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	abort(pc.nc)
	_, err = peer.Read(b)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the peer's read after abort: %v, want a reset", err)
	}
}

// selfSigned is a certificate for 127.0.0.1 that signs itself.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// A pooled connection under TLS whose peer has since closed it (an idle
// timeout, a restart) or reset it (a crash) is not used again: the next
// exchange dials anew and succeeds. A close that TLS read ahead with the
// last reply (its close_notify) shows through TLS; a reset, with nothing
// sent before it, only at the socket, since an expired read deadline stops
// TLS's read before the socket.
func TestExchangeSkipsClosedPooledConnTLS(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(nc *tls.Conn)
	}{
		{"closed", func(nc *tls.Conn) { nc.Close() }},
		{"reset", func(nc *tls.Conn) { abort(nc) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cert := selfSigned(t)
			ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
			if err != nil {
				t.Fatal(err)
			}
			// The peer answers one set per connection, then ends it.
			var accepted atomic.Int64
			ended := make(chan struct{}, 2)
			served := make(chan struct{})
			go func() {
				defer close(served)
				for {
					nc, err := ln.Accept()
					if err != nil {
						return
					}
					accepted.Add(1)
					nc.SetDeadline(time.Now().Add(10 * time.Second))
					r := bufio.NewReader(nc)
					if _, err := r.ReadString('\n'); err == nil { // set k 0 0 1
						if _, err := r.ReadString('\n'); err == nil { // its data
							io.WriteString(nc, "HD\r\n")
						}
					}
					tc.end(nc.(*tls.Conn))
					ended <- struct{}{}
				}
			}()
			defer func() { ln.Close(); <-served }()
			pool := x509.NewCertPool()
			pool.AddCert(cert.Leaf)
			c := New(Config{Addr: ln.Addr().String(), MaxIdle: 2, TLS: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}})
			defer c.Close()
			for i := range 2 {
				r, err := c.Exchange(5*time.Second, []byte("set k 0 0 1"), []byte("a"))
				if err != nil || string(r.Line) != "HD" {
					t.Fatalf("exchange %d: %q, %v", i+1, r.Line, err)
				}
				<-ended
				// What the peer did reaches this end at once on loopback,
				// but not within its call: wait, boundedly, for the socket
				// to show it.
				waitReadable(t, c)
			}
			if got := accepted.Load(); got != 2 {
				t.Errorf("connections the peer accepted: %d, want 2", got)
			}
		})
	}
}

// waitReadable waits until the socket of c's pooled connection has
// something to read (bytes, its end, or a reset), at most 5 s.
func waitReadable(t *testing.T, c *Client) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, pc := range c.idle {
		tc, ok := rawio.Unwrap(pc.nc).(*net.TCPConn)
		if !ok {
			t.Fatalf("pooled connection over %T", rawio.Unwrap(pc.nc))
		}
		waitSocketReadable(t, tc)
	}
}

// waitSocketReadable waits until tc's socket has something to read
// (bytes, its end, or a reset), at most 5 s, taking nothing.
func waitSocketReadable(t *testing.T, tc *net.TCPConn) {
	t.Helper()
	rc, err := tc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 5000); n != 1 || err != nil {
			t.Errorf("the socket did not become readable: %d, %v", n, err)
		}
	})
}

// acceptOne accepts one connection on ln in the background and, if then
// is not nil, runs then on it; the channel gives the connection, or nil
// if the accept failed.
func acceptOne(ln net.Listener, then func(net.Conn)) <-chan net.Conn {
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		if then != nil {
			then(nc)
		}
		accepted <- nc
	}()
	return accepted
}
