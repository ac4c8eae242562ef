package rawio

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// listen returns the address of a loopback listener that accepts and
// keeps connections until the test ends.
func listen(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range conns {
					c.Close()
				}
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// pair is a loopback TCP connection: a wrapped end and the other end.
func pair(t *testing.T) (wrapped, other net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	other = <-accepted
	if other == nil {
		t.Fatal("accept failed")
	}
	// A small send buffer: a write of MiBs fills it again and again, so
	// that a test's large write waits for room.
	c.(*net.TCPConn).SetWriteBuffer(8 << 10)
	t.Cleanup(func() { c.Close(); other.Close() })
	return Wrap(c), other
}

func TestWrap(t *testing.T) {
	c, err := net.Dial("tcp", listen(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if raw := Wrap(c) != c; raw != (runtime.GOOS == "linux") {
		t.Fatalf("TCP on %s: wrapped %v", runtime.GOOS, raw)
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if Wrap(p1) != p1 {
		t.Fatal("a pipe was wrapped")
	}
}

// TestReadWrite holds the wrapped conn to net.Conn's contract: bytes both
// ways, a write larger than the socket takes at once (it waits for the
// reader), io.EOF at the end, and errors that say what net's would.
func TestReadWrite(t *testing.T) {
	type check func(t *testing.T, w, o net.Conn)
	cases := map[string]check{
		"bytes both ways": func(t *testing.T, w, o net.Conn) {
			if n, err := w.Write([]byte("ping")); n != 4 || err != nil {
				t.Fatalf("write: %d, %v", n, err)
			}
			buf := make([]byte, 8)
			if _, err := io.ReadFull(o, buf[:4]); err != nil || string(buf[:4]) != "ping" {
				t.Fatalf("other end read %q, %v", buf[:4], err)
			}
			o.Write([]byte("pong"))
			if n, err := io.ReadFull(w, buf[:4]); n != 4 || err != nil || string(buf[:4]) != "pong" {
				t.Fatalf("read %q, %v", buf[:n], err)
			}
			if n, err := w.Read(nil); n != 0 || err != nil {
				t.Fatalf("empty read: %d, %v", n, err)
			}
		},
		"a write larger than the socket's buffer": func(t *testing.T, w, o net.Conn) {
			big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
			got := make(chan []byte)
			go func() {
				b, _ := io.ReadAll(io.LimitReader(o, int64(len(big))))
				got <- b
			}()
			if n, err := w.Write(big); n != len(big) || err != nil {
				t.Fatalf("write: %d, %v", n, err)
			}
			if !bytes.Equal(<-got, big) {
				t.Fatal("the other end read other bytes")
			}
		},
		"end of stream": func(t *testing.T, w, o net.Conn) {
			o.Close()
			if n, err := w.Read(make([]byte, 8)); n != 0 || err != io.EOF {
				t.Fatalf("read: %d, %v; want io.EOF", n, err)
			}
		},
		"read deadline": func(t *testing.T, w, o net.Conn) {
			w.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
			_, err := w.Read(make([]byte, 8))
			var ne net.Error
			if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("read: %v; want a timeout", err)
			}
		},
		"write deadline": func(t *testing.T, w, o net.Conn) {
			big := make([]byte, 16<<20) // made before the deadline starts
			w.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
			n, err := w.Write(big) // the other end reads none
			if !errors.Is(err, os.ErrDeadlineExceeded) || n == 0 || n == len(big) {
				t.Fatalf("write: %d, %v; want part written, then a timeout", n, err)
			}
		},
		"closed": func(t *testing.T, w, o net.Conn) {
			w.Close()
			if _, err := w.Read(nil); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("empty read: %v; want net.ErrClosed", err)
			}
			if _, err := w.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("read: %v; want net.ErrClosed", err)
			}
			if _, err := w.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("write: %v; want net.ErrClosed", err)
			}
		},
		"Close unblocks a read": func(t *testing.T, w, o net.Conn) {
			done := make(chan error)
			go func() {
				_, err := w.Read(make([]byte, 8))
				done <- err
			}()
			// The read is parked or about to be: either way Close
			// ends it.
			time.AfterFunc(10*time.Millisecond, func() { w.Close() })
			if err := <-done; !errors.Is(err, net.ErrClosed) {
				t.Fatalf("read: %v; want net.ErrClosed", err)
			}
		},
		"a read reset by the other end": func(t *testing.T, w, o net.Conn) {
			o.(*net.TCPConn).SetLinger(0)
			o.Close() // an RST
			_, err := w.Read(make([]byte, 8))
			var oe *net.OpError
			if !errors.As(err, &oe) || oe.Op != "read" || !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("read: %v; want a *net.OpError with ECONNRESET", err)
			}
		},
		"a deadline's error is net's, not wrapped twice": func(t *testing.T, w, o net.Conn) {
			w.SetReadDeadline(time.Now().Add(-time.Second))
			_, err := w.Read(make([]byte, 8))
			oe, ok := err.(*net.OpError)
			if !ok || oe.Op != "read" || oe.Err != os.ErrDeadlineExceeded {
				t.Fatalf("read: %#v; want *net.OpError{Op: read, Err: os.ErrDeadlineExceeded}", err)
			}
		},
		"a write reset by the other end": func(t *testing.T, w, o net.Conn) {
			o.(*net.TCPConn).SetLinger(0)
			o.Close() // an RST
			deadline := time.Now().Add(5 * time.Second)
			var err error
			for err == nil && time.Now().Before(deadline) {
				_, err = w.Write([]byte("x"))
			}
			var oe *net.OpError
			if !errors.As(err, &oe) || oe.Op != "write" ||
				!(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
				t.Fatalf("write: %v; want a *net.OpError with ECONNRESET or EPIPE", err)
			}
		},
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			w, o := pair(t)
			f(t, w, o)
		})
	}
}

// TestNoAllocations: a Read and a Write that succeed allocate nothing, as
// net.Conn's do; the server's hot paths count on it.
func TestNoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	w, o := pair(t)
	msg, buf := []byte("0123456789"), make([]byte, 10)
	if n := testing.AllocsPerRun(200, func() {
		if _, err := w.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(o, buf); err != nil {
			t.Fatal(err)
		}
		o.Write(msg)
		if _, err := io.ReadFull(w, buf); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%.1f allocations per write and read, want 0", n)
	}
}

// TestDatagramNotWrapped: a datagram socket's empty read is not the end
// of a stream, so only stream sockets are made raw.
func TestDatagramNotWrapped(t *testing.T) {
	dir := t.TempDir()
	addr := &net.UnixAddr{Name: dir + "/s", Net: "unixgram"}
	c, err := net.ListenUnixgram("unixgram", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if Wrap(c) != net.Conn(c) {
		t.Fatal("a unixgram socket was wrapped")
	}
}

// TestPeekFD: a peek shows what there is to read and leaves it there,
// says EAGAIN rather than wait when there is nothing, and 0 at the end.
func TestPeekFD(t *testing.T) {
	w, o := pair(t)
	rc, err := o.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	peek := func() (string, syscall.Errno) {
		b := make([]byte, 8)
		var n int
		var errno syscall.Errno
		if err := rc.Control(func(fd uintptr) { n, errno = PeekFD(fd, b) }); err != nil {
			t.Fatal(err)
		}
		return string(b[:n]), errno
	}
	// peekUntil polls, boundedly, until the peek's answer is want's: what
	// one end does reaches the other on loopback soon, not at once.
	peekUntil := func(want string, wantErr syscall.Errno) {
		t.Helper()
		got, errno := peek()
		for deadline := time.Now().Add(5 * time.Second); (got != want || errno != wantErr) && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
			got, errno = peek()
		}
		if got != want || errno != wantErr {
			t.Fatalf("peek: %q, %v; want %q, %v", got, errno, want, wantErr)
		}
	}
	peekUntil("", syscall.EAGAIN)
	var errno syscall.Errno
	rc.Control(func(fd uintptr) { _, errno = PeekFD(fd, nil) })
	if errno != syscall.EINVAL {
		t.Fatalf("an empty peek: %v, want EINVAL (its 0 would read as the end)", errno)
	}
	if _, err := w.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	peekUntil("abc", 0)
	peekUntil("abc", 0) // a second peek finds it still there
	b := make([]byte, 3)
	if _, err := io.ReadFull(o, b); err != nil || string(b) != "abc" {
		t.Fatalf("read after the peeks: %q, %v", b, err)
	}
	w.Close()
	peekUntil("", 0)
}

// TestListener: a listener's connections come wrapped, and Unwrap finds
// the socket under Wrap's wrapping and TLS's (what abort's SetLinger
// needs).
func TestListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Listener(ln)
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	defer s.Close()
	if _, isTCP := s.(*net.TCPConn); isTCP == (runtime.GOOS == "linux") {
		t.Fatalf("accepted on %s: %T", runtime.GOOS, s)
	}
	if _, ok := Unwrap(s).(*net.TCPConn); !ok {
		t.Fatalf("Unwrap of the accepted conn: %T", Unwrap(s))
	}
	if _, ok := Unwrap(tls.Server(s, &tls.Config{})).(*net.TCPConn); !ok {
		t.Fatal("Unwrap did not reach the socket under TLS")
	}
	// What one end writes, the other reads, through the wrapping.
	if _, err := s.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 2)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "hi" {
		t.Fatalf("read %q, %v", b, err)
	}
	l.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
}
