package wire

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Many callers' reads share the client's few connections, and each gets
// its own value.
func TestReadSharesConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakePeer{size: 3}
		c := New(Config{Addr: "peer", Dial: p.dial, MuxConns: 2})
		var wg sync.WaitGroup
		for i := range 200 {
			wg.Go(func() {
				key := fmt.Sprintf("key%d", i)
				v, err := c.Read(time.Second, key, "hld.x", make([]byte, 0, 16))
				if err != nil || !v.Found || !bytes.Equal(v.Data, bytes.Repeat([]byte(key), 3)) || v.CAS != 1 {
					t.Errorf("%s: %+v, %v", key, v, err)
				}
			})
		}
		wg.Wait()
		if got := p.conns.Load(); got != 2 {
			t.Errorf("connections dialled: %d, want 2", got)
		}
		c.Close()
		p.served.Wait()
	})
}

func TestReadAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakePeer{size: 1, notHeld: "cold"}
		c := New(Config{Addr: "peer", Dial: p.dial, MuxConns: 1})
		if _, err := c.Read(time.Second, "cold", "hld.x", nil); !errors.Is(err, ErrNotHeld) {
			t.Errorf("a key the peer would fill: %v, want ErrNotHeld", err)
		}
		// The value goes to the caller's buffer when it fits.
		buf := make([]byte, 0, 64)
		v, err := c.Read(time.Second, "warm", "hld.x", buf)
		if err != nil || string(v.Data) != "warm" || &v.Data[0] != &buf[:1][0] {
			t.Errorf("read into the caller's buffer: %q, %v", v.Data, err)
		}
		c.Close()
		if _, err := c.Read(time.Second, "warm", "hld.x", nil); err == nil {
			t.Error("read after Close succeeded")
		}
		p.served.Wait()
	})
}

// A read whose connection the peer closed before answering (an idle
// connection it timed out, a restart) is sent once more, on a new
// connection; a second loss is the caller's error.
func TestReadRetriesOnceOnLostConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakePeer{size: 1}
		c := New(Config{Addr: "peer", Dial: p.dial, MuxConns: 1})
		p.hangUp.Store(1)
		if v, err := c.Read(time.Second, "k", "hld.x", nil); err != nil || string(v.Data) != "k" {
			t.Errorf("read after one lost connection: %q, %v", v.Data, err)
		}
		p.hangUp.Store(2)
		if _, err := c.Read(time.Second, "k", "hld.x", nil); err == nil {
			t.Error("read after two lost connections succeeded")
		}
		if got := p.requests.Load(); got != 4 {
			t.Errorf("requests the peer read: %d, want 4", got)
		}
		c.Close()
		p.served.Wait()
	})
}

// A peer that stops answering fails the reads waiting on it after the
// timeout, once each (a timeout is not tried again), and the next read
// gets a new connection.
func TestReadTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakePeer{size: 1}
		p.silent.Store(true)
		c := New(Config{Addr: "peer", Dial: p.dial, MuxConns: 1})
		start := time.Now()
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				_, err := c.Read(time.Second, "k", "hld.x", nil)
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					t.Errorf("read from a silent peer: %v, want a timeout", err)
				}
			})
		}
		wg.Wait()
		if d := time.Since(start); d != time.Second {
			t.Errorf("reads failed after %v, want 1s", d)
		}
		if got := p.requests.Load(); got != 3 {
			t.Errorf("requests the peer read: %d, want 3 (none tried again)", got)
		}
		p.silent.Store(false)
		synctest.Wait()
		if v, err := c.Read(time.Second, "k", "hld.x", nil); err != nil || string(v.Data) != "k" {
			t.Errorf("read after the timeout: %q, %v", v.Data, err)
		}
		c.Close()
		p.served.Wait()
	})
}
