//go:build linux

package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReadWaitsOnceDrained: a read that took less than its buffer leaves
// the conn drained (on a build that finds the poll descriptor), and the
// next Read waits, then reads, with everything net.Conn's Read promises:
// the bytes that came since, the deadline, Close from another goroutine,
// the end of the stream.
func TestReadWaitsOnceDrained(t *testing.T) {
	tests := []struct {
		name string
		// then acts on the two ends once the wrapped one is drained,
		// while (or before) its next Read waits.
		then func(w, other net.Conn)
		want string // what that Read returns
		err  func(error) bool
	}{
		{"bytes that come later", func(_, other net.Conn) { other.Write([]byte("next")) }, "next", nil},
		{"deadline", func(w, _ net.Conn) { w.SetReadDeadline(time.Now().Add(20 * time.Millisecond)) }, "",
			func(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }},
		{"close", func(w, _ net.Conn) { w.Close() }, "", func(err error) bool { return errors.Is(err, net.ErrClosed) }},
		{"end of stream", func(_, other net.Conn) { other.Close() }, "", func(err error) bool { return err == io.EOF }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, other := pair(t)
			if _, err := other.Write([]byte("first")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 64)
			n, err := w.Read(buf)
			if err != nil || string(buf[:n]) != "first" {
				t.Fatalf("first read: %q %v", buf[:n], err)
			}
			if c := w.(*conn); c.pd != nil && !c.drained {
				t.Fatal("a read of less than its buffer did not leave the conn drained")
			}
			go tt.then(w, other)
			n, err = ReadIdle(w, buf)
			switch {
			case tt.err == nil && (err != nil || string(buf[:n]) != tt.want):
				t.Fatalf("read after drained: %q %v, want %q", buf[:n], err, tt.want)
			case tt.err != nil && !tt.err(err):
				t.Fatalf("read after drained: %q %v", buf[:n], err)
			}
		})
	}
}

// TestReadWaitsOnceDrainedDeadlineLifted: a wait that timed out leaves the
// conn usable: with the deadline lifted, the next Read returns what came.
func TestReadWaitsOnceDrainedDeadlineLifted(t *testing.T) {
	w, other := pair(t)
	buf := make([]byte, 64)
	for i, step := range []string{"one", "two", "three"} {
		other.Write([]byte(step))
		if n, err := w.Read(buf); err != nil || string(buf[:n]) != step {
			t.Fatalf("step %d: %q %v", i, buf[:n], err)
		}
		w.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := ReadIdle(w, buf); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("step %d: read with nothing to read: %v, want the deadline", i, err)
		}
		w.SetReadDeadline(time.Time{})
	}
}

// TestPollDescFound: on the builds that wait before reading, the poll
// descriptor is found for TCP and Unix sockets, and what is found is
// checked against the socket: a layout that changed would show here
// rather than leave every Read reading first.
func TestPollDescFound(t *testing.T) {
	if !waitsBeforeRead {
		t.Skip("this build reads first (wait_other_linux.go)")
	}
	tcp, _ := pair(t)
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	uc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	unix := Wrap(uc)
	for _, c := range []net.Conn{tcp, unix} {
		rc := c.(*conn)
		if rc.pd == nil {
			t.Errorf("%T: no poll descriptor found", rc.Conn)
		}
		rc.rc.Control(func(fd uintptr) {
			if pollDesc(rc.Conn, fd+1) != nil {
				t.Errorf("%T: a poll descriptor found for another socket's descriptor", rc.Conn)
			}
		})
	}
}

// TestReadWaitsOnceDrainedPingPong: request and reply, as a node and its
// clients speak, with requests split across writes and some sent before
// the reply to the last: no byte is waited for after it came (a read
// that waited for bytes already there would hang until the deadline).
func TestReadWaitsOnceDrainedPingPong(t *testing.T) {
	w, other := pair(t)
	deadline := time.Now().Add(20 * time.Second)
	w.SetDeadline(deadline)
	other.SetDeadline(deadline)
	const rounds = 2000
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 16)
		for i := range rounds {
			msg := []byte{'a' + byte(i%26), 'b', 'c', '\n'}
			switch i % 3 {
			case 0:
				other.Write(msg)
			case 1: // split: the wrapped end may read "ab" alone, drained
				other.Write(msg[:2])
				other.Write(msg[2:])
			case 2: // two at once, the second before the first's reply
				other.Write(append(msg, msg...))
			}
			want := 1 + i%3/2
			for got := 0; got < want; {
				n, err := other.Read(buf)
				if err != nil {
					done <- err
					return
				}
				got += n
			}
		}
		done <- nil
	}()
	buf := make([]byte, 64)
	var pending []byte
	for replies := 0; replies < rounds+rounds/3; {
		n, err := ReadIdle(w, buf)
		if err != nil {
			t.Fatalf("after %d replies: %v", replies, err)
		}
		pending = append(pending, buf[:n]...)
		for {
			i := bytes.IndexByte(pending, '\n')
			if i < 0 {
				break
			}
			pending = pending[i+1:]
			if _, err := w.Write([]byte{'!'}); err != nil {
				t.Fatal(err)
			}
			replies++
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestEndPending: the end of a stream, or a reset, that came with the
// last bytes read is not a wakeup for the wait after them (the cost of
// WrapWaiting); EndPending finds it, and nothing else.
func TestEndPending(t *testing.T) {
	tests := []struct {
		name string
		end  func(other net.Conn) // after "abc", sent at once with it
		want bool
	}{
		{"open, nothing to read", func(net.Conn) {}, false},
		{"more bytes", func(other net.Conn) { other.Write([]byte("def")) }, false},
		{"end of stream", func(other net.Conn) { other.(*net.TCPConn).CloseWrite() }, true},
		{"reset", func(other net.Conn) { other.(*net.TCPConn).SetLinger(0); other.Close() }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, other := pair(t)
			if !waitsBeforeRead {
				if EndPending(w) {
					t.Error("EndPending on a build that does not wait")
				}
				return
			}
			other.Write([]byte("abc"))
			tt.end(other)
			// The bytes and what follows them are in w's socket before it
			// reads: poll for them rather than sleep.
			deadline := time.Now().Add(5 * time.Second)
			for w.(*conn).pending() < 3 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			buf := make([]byte, 2)
			if n, err := w.Read(buf); err != nil || n != 2 {
				t.Fatalf("read: %d %v", n, err)
			}
			if got := EndPending(w); got {
				t.Errorf("EndPending with a byte still to read = true")
			}
			buf = make([]byte, 64)
			if n, err := w.Read(buf); err != nil || !strings.HasPrefix(string(buf[:n]), "c") {
				t.Fatalf("read: %q %v", buf[:n], err)
			}
			if got := EndPending(w); got != tt.want {
				t.Errorf("EndPending = %v, want %v", got, tt.want)
			}
			if !tt.want {
				return
			}
			// A wait that follows is not woken for it: a deadline ends it.
			w.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			if _, err := ReadIdle(w, buf); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Logf("the read after the end returned %v at once (its event came after the last read)", err)
			}
		})
	}
	a, b := net.Pipe()
	defer a.Close()
	b.Close()
	if EndPending(a) {
		t.Error("EndPending on a conn Wrap did not wrap")
	}
}

// TestReadSeesEndAfterShortRead: a Read, unlike ReadIdle, reads first, so
// an end of stream or a reset that came with the bytes of a short read is
// seen at once (found by review: a request cut short by the client's
// close left a node's connection open for good when every read waited
// first). The deadline is only there to fail rather than hang.
func TestReadSeesEndAfterShortRead(t *testing.T) {
	tests := []struct {
		name string
		end  func(other net.Conn)
		ok   func(error) bool
	}{
		{"end of stream", func(o net.Conn) { o.(*net.TCPConn).CloseWrite() }, func(err error) bool { return err == io.EOF }},
		{"reset", func(o net.Conn) { o.(*net.TCPConn).SetLinger(0); o.Close() }, func(err error) bool {
			return err == io.EOF || errors.Is(err, syscall.ECONNRESET)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, other := pair(t)
			buf := make([]byte, 64)
			other.Write([]byte("abc"))
			tt.end(other)
			deadline := time.Now().Add(5 * time.Second)
			for w.(*conn).pending() < 3 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond) // polls the socket: no event to wait for
			}
			n, err := ReadIdle(w, buf) // short: the conn is drained
			if err != nil || n == 0 {
				t.Fatalf("first read: %d %v", n, err)
			}
			w.SetReadDeadline(time.Now().Add(5 * time.Second))
			for n < 3 && err == nil {
				var k int
				k, err = w.Read(buf[n:])
				n += k
			}
			if err == nil {
				_, err = w.Read(buf)
			}
			if !tt.ok(err) {
				t.Fatalf("read after the last bytes: %v, want the end at once", err)
			}
		})
	}
}

// pending returns how many bytes c's socket holds unread (SIOCINQ).
func (c *conn) pending() int {
	n := 0
	c.rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n
}
