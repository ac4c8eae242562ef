package wire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"spillway/protocol"
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

// A peer that stops reading fails the write stuck on it within the
// timeout: 15/16 of it to all of it after the write began, since the
// write deadline moves only when less than 15/16 of the timeout is left
// (send). Writes soon after another keep the deadline the first set;
// later than a sixteenth of the timeout, they move it.
func TestWriteTimeoutOnPeerThatStopsReading(t *testing.T) {
	for _, tc := range []struct {
		after time.Duration // from the first write to the next two
		want  time.Duration // from the stuck write to its failure
	}{
		{50 * time.Millisecond, 950 * time.Millisecond},
		{2 * time.Second, time.Second},
	} {
		t.Run(tc.after.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := &fakePeer{size: 1, hear: make(chan struct{})}
				c := New(Config{Addr: "peer", Dial: p.dial, MuxConns: 1})
				if _, err := c.Read(time.Second, "k", "hld.x", nil); err != nil {
					t.Fatal(err)
				}
				p.deaf.Store(true)
				time.Sleep(tc.after)
				var wg sync.WaitGroup
				// The last request the peer reads: its reply is due a
				// timeout from now, after the stuck write's deadline if
				// that did not move.
				wg.Go(func() { c.Read(time.Second, "swallowed", "hld.x", nil) })
				synctest.Wait()
				start := time.Now()
				_, err := c.Read(time.Second, "stuck", "hld.x", nil)
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					t.Errorf("read whose write the peer never reads: %v, want a timeout", err)
				}
				if d := time.Since(start); d != tc.want {
					t.Errorf("the stuck write failed after %v, want %v", d, tc.want)
				}
				wg.Wait()
				close(p.hear)
				c.Close()
				p.served.Wait()
			})
		})
	}
}

// A read's reply is due a timeout after it was queued, however many
// callers write after it: a peer that takes requests and answers none
// fails the first read after its timeout, not after the last caller's.
func TestReadTimeoutNotExtendedByLaterWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakePeer{size: 1}
		p.silent.Store(true)
		c := New(Config{Addr: "peer", Dial: p.dial, MuxConns: 1})
		start := time.Now()
		var firstDone atomic.Int64
		var wg sync.WaitGroup
		wg.Go(func() {
			_, err := c.Read(time.Second, "first", "hld.x", nil)
			firstDone.Store(int64(time.Since(start)))
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Errorf("first read: %v, want a timeout", err)
			}
		})
		// Other callers keep reading every 200 ms for 5 s.
		for range 25 {
			time.Sleep(200 * time.Millisecond)
			wg.Go(func() { c.Read(time.Second, "other", "hld.x", nil) })
		}
		wg.Wait()
		if d := time.Duration(firstDone.Load()); d > 1100*time.Millisecond {
			t.Errorf("a read with a 1s timeout from a silent peer failed after %v (later callers' writes moved its deadline)", d)
		}
		c.Close()
		p.closeAll()
		p.served.Wait()
	})
}

// A Client closed before its first Read (a view change closes the client
// of a member that left while a request still holds the old view) fails
// the Read.
func TestReadAfterCloseWithoutPriorRead(t *testing.T) {
	p := &fakePeer{size: 1}
	c := New(Config{Addr: "peer", Dial: p.dial})
	c.Close()
	defer func() {
		if v := recover(); v != nil {
			t.Errorf("Read on a client closed before any Read panicked: %v", v)
		}
	}()
	if _, err := c.Read(time.Second, "k", "hld.x", nil); err == nil {
		t.Error("read after Close succeeded")
	}
}

// While a peer does not answer connects (a partition, a host down), the
// callers of a slot share one dial and then fail at once for a while:
// none waits much more than one dial timeout.
func TestBlackholedDialsAreShared(t *testing.T) {
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		<-ctx.Done() // no SYN-ACK ever comes
		return nil, ctx.Err()
	}
	c := New(Config{Addr: "peer", Dial: dial, MuxConns: 2})
	defer c.Close()
	const timeout = 100 * time.Millisecond
	start := time.Now()
	var worst atomic.Int64
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			c.Read(timeout, "k", "hld.x", nil)
			if d := int64(time.Since(start)); d > worst.Load() {
				worst.Store(d)
			}
		})
	}
	wg.Wait()
	if d := time.Duration(worst.Load()); d > 2*timeout {
		t.Errorf("10 reads with a %v timeout to a peer that drops connects: the last failed after %v", timeout, d.Round(time.Millisecond))
	}
}

// A value over MaxValue (nodes run with different -I while it changes)
// fails its own read, and only once: the other callers on the connection
// get their values, and the connection stays up.
func TestReadValueOverMaxValue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakePeer{size: 40}
		c := New(Config{Addr: "peer", Dial: p.dial, MuxConns: 1, MaxValue: 100})
		if _, err := c.Read(time.Second, "big", "hld.x", nil); !errors.Is(err, protocol.ErrValueTooLarge) {
			t.Errorf("a 120-byte value with MaxValue 100: %v, want ErrValueTooLarge", err)
		}
		if v, err := c.Read(time.Second, "k", "hld.x", nil); err != nil || len(v.Data) != 40 {
			t.Errorf("the next read: %d bytes, %v", len(v.Data), err)
		}
		if got := p.conns.Load(); got != 1 {
			t.Errorf("connections dialled: %d, want 1", got)
		}
		if got := p.requests.Load(); got != 2 {
			t.Errorf("requests: %d, want 2 (the large one not sent again)", got)
		}
		c.Close()
		p.served.Wait()
	})
}

// Deletes (the invalidations of copies) share the reads' connections:
// each gets its own answer, HD or NF, in among reads, and one whose
// connection was lost before its answer is sent once more.
func TestDeleteSharesConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakePeer{size: 2, notHeld: "gone"}
		c := New(Config{Addr: "peer", Dial: p.dial, MuxConns: 1})
		var wg sync.WaitGroup
		for i := range 100 {
			wg.Go(func() {
				key := fmt.Sprintf("key%d", i)
				switch i % 3 {
				case 0:
					if found, err := c.Delete(time.Second, key, "inv.x"); err != nil || !found {
						t.Errorf("delete %s: %v, %v; want found", key, found, err)
					}
				case 1:
					if found, err := c.Delete(time.Second, "gone", "inv.x"); err != nil || found {
						t.Errorf("delete of a key the peer lacks: %v, %v; want not found", found, err)
					}
				default:
					if v, err := c.Read(time.Second, key, "hld.x", nil); err != nil || string(v.Data) != key+key {
						t.Errorf("read %s among deletes: %q, %v", key, v.Data, err)
					}
				}
			})
		}
		wg.Wait()
		p.hangUp.Store(1)
		if found, err := c.Delete(time.Second, "k", "inv.x"); err != nil || !found {
			t.Errorf("delete after a lost connection: %v, %v; want it sent again and found", found, err)
		}
		if got := p.conns.Load(); got != 2 {
			t.Errorf("connections dialled: %d, want 2", got)
		}
		c.Close()
		p.served.Wait()
	})
}
