package wire

import (
	"context"
	"errors"
	"net"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"spillway/protocol"
)

// The reads of many callers to one peer share a few connections (Read).
// The peer answers a connection's requests in order, so replies are
// matched to calls by position, as twemproxy and mcrouter do.
//
// Writes combine: a caller appends its request to the connection's queue
// and, unless another caller is writing already, writes the whole queue
// in one write, its own request and any queued meanwhile. A goroutine per
// connection reads the replies and hands each to its call, copying the
// value into the caller's buffer before it reads the next. So a caller
// never holds a shared connection back: its reply leaves the socket as
// soon as it arrives, whether or not the caller is ready, and what waits
// for a caller is its own value, at most MaxValue bytes — the byte budget
// of a call, and of the request that made it, since a request has at
// most one call under way.
//
// The peer serves a connection's requests in order, so one slow request
// would hold back every one behind it. The reads sent here are of the kind
// the peer answers at once, from what it holds (server/peerproto.go, the
// held tag): one that would need a fill (the origin, a previous owner, the
// owner of a spilled key) is answered "NS", ErrNotHeld here, and the caller
// asks again on a connection of its own (Open).
//
// Only requests that may be served twice travel here: reads, and the
// deletes of copies that invalidate them (Delete), which drop nothing a
// second time that the first did not. So a call whose connection failed
// before its reply is tried once more on a new connection: the peer
// closes idle connections, and a request may cross its close. Writes keep
// an exchange per pooled connection (Exchange), never sent twice.
//
// Each call's reply must come within the timeout of the moment it was
// queued, whatever comes after it. A value over MaxValue fails its own
// call only: the reader skips the block and reads on (nodes may run with
// different -I while it changes). A connection is dialled outside the
// slot's lock, once for all the callers that need it meanwhile, and a
// failed dial fails the slot's callers at once for a while (dialBackoff)
// rather than have each wait out its own dial timeout.

// ErrNotHeld is a Read's answer when the peer does not hold the key and
// would have to fill it: ask again with a stream (Open), where a slow fill
// holds back no other caller.
var ErrNotHeld = errors.New("wire: not held; read it on a stream")

// DefaultMuxConns is the number of connections a Client's reads share
// when Config.MuxConns is zero.
const DefaultMuxConns = 2

// mux is a Client's shared connections.
type mux struct {
	slots []muxSlot
	next  atomic.Uint32
}

type muxSlot struct {
	mu      sync.Mutex
	mc      *muxConn      // guarded by mu; replaced when it fails
	dialing chan struct{} // guarded by mu: closed when the dial under way ends
	dialErr error         // guarded by mu: the last dial's error, until retryAt
	retryAt time.Time     // guarded by mu
}

// dialBackoff is how long a failed dial fails the callers of its slot
// before one of them dials again.
const dialBackoff = 200 * time.Millisecond

// muxConn is one shared connection.
type muxConn struct {
	pc      *conn
	timeout time.Duration

	mu      sync.Mutex
	out     []byte // guarded by mu: requests not yet written
	spare   []byte // guarded by mu: the buffer the last write used
	writing bool   // guarded by mu: a caller is writing out
	// writeBy is the write deadline set last; only the caller writing
	// out (writing) reads or moves it.
	writeBy time.Time
	pending []*call // guarded by mu: calls awaiting replies, oldest first
	head    int     // guarded by mu: pending[head] is answered next
	err     error   // guarded by mu: set once the connection failed
	read    sync.WaitGroup
}

// call is one Read or Delete under way.
type call struct {
	del  bool      // a Delete: its reply is HD or NF, v.Found says which
	buf  []byte    // the caller's; the value is copied here
	sent time.Time // when it was queued: its reply is due a timeout later
	v    Value
	err  error
	lost bool // the connection failed before the reply came
	done chan struct{}
}

// Read reads key from the peer with tag as its opaque token, on a
// connection shared with other callers, within timeout per reply. The
// value is copied into buf's array if it fits (else into a new one):
// Data aliases it. A key the peer does not hold and would have to fill
// is ErrNotHeld.
func (c *Client) Read(timeout time.Duration, key, tag string, buf []byte) (Value, error) {
	return c.shared(timeout, false, key, tag, buf)
}

// Delete sends "md <key> O<tag>" on a connection shared with other
// callers, within timeout, and reports whether the peer had the key (HD)
// or not (NF). Only a delete that may be sent twice belongs here: the
// invalidation of a copy, which a second time finds nothing or a copy the
// write it announces made stale anyway.
func (c *Client) Delete(timeout time.Duration, key, tag string) (found bool, err error) {
	v, err := c.shared(timeout, true, key, tag, nil)
	return v.Found, err
}

// shared runs one call on a shared connection: sent, answered, and sent once
// more if its connection failed first.
func (c *Client) shared(timeout time.Duration, del bool, key, tag string, buf []byte) (Value, error) {
	cl, _ := c.calls.Get().(*call)
	if cl == nil {
		cl = &call{done: make(chan struct{}, 1)}
	}
	defer c.calls.Put(cl)
	retried := false
	for {
		mc, err := c.muxConn(timeout, del)
		if err != nil {
			return Value{}, err
		}
		cl.del, cl.buf, cl.v, cl.err, cl.lost = del, buf[:0], Value{}, nil, false
		if !mc.send(cl, key, tag) {
			continue // it failed before taking the call: nothing sent
		}
		<-cl.done
		if cl.lost && !retried && retryable(cl.err) {
			retried = true
			continue
		}
		v, err := cl.v, cl.err
		cl.buf, cl.v = nil, Value{}
		return v, err
	}
}

// retryable reports whether a read whose connection failed with err may be
// sent again: not after a timeout, which a second try would only repeat.
func retryable(err error) bool {
	var ne net.Error
	return !errors.As(err, &ne) || !ne.Timeout()
}

// muxConn returns one of the shared connections, dialing it if it is not
// open or failed. A caller that must reach the peer if it can (noBackoff:
// an invalidation, which lost leaves a stale copy served) dials even
// within the backoff of a failed dial: the peer may be back, restarted
// at the same address.
func (c *Client) muxConn(timeout time.Duration, noBackoff bool) (*muxConn, error) {
	// The modulo in uint32: converted first, the counter would turn
	// negative past 2^31 calls where int is 32 bits, and so the index.
	sl := &c.mux.slots[int(c.mux.next.Add(1)%uint32(len(c.mux.slots)))]
	sl.mu.Lock()
	for {
		if mc := sl.mc; mc != nil && !mc.failed() {
			sl.mu.Unlock()
			return mc, nil
		}
		if sl.dialing == nil {
			break
		}
		ch := sl.dialing // another caller dials: wait for its outcome
		sl.mu.Unlock()
		<-ch
		sl.mu.Lock()
		if sl.dialErr != nil {
			err := sl.dialErr
			sl.mu.Unlock()
			return nil, err
		}
	}
	if sl.dialErr != nil && !noBackoff && time.Now().Before(sl.retryAt) {
		err := sl.dialErr
		sl.mu.Unlock()
		return nil, err
	}
	ch := make(chan struct{})
	sl.dialing = ch
	sl.mu.Unlock()

	mc, err := c.dialMux(timeout)

	sl.mu.Lock()
	defer sl.mu.Unlock()
	sl.dialing = nil
	close(ch)
	sl.dialErr = err
	if err != nil {
		sl.retryAt = time.Now().Add(dialBackoff)
		return nil, err
	}
	if c.isClosed() {
		// Close sets closed before it sweeps the slots: either it finds
		// this connection in its slot, or it is closed here.
		mc.fail(errClosed)
		mc.read.Wait()
		return nil, errClosed
	}
	sl.mc = mc
	return mc, nil
}

// dialMux opens a shared connection and starts its reader, unless the
// client is closed.
func (c *Client) dialMux(timeout time.Duration) (*muxConn, error) {
	if c.isClosed() {
		return nil, errClosed
	}
	pc, err := c.dial(timeout)
	if err != nil {
		return nil, err
	}
	mc := &muxConn{pc: pc, timeout: timeout}
	mc.read.Add(1)
	// The reader is labelled in CPU profiles (server's connLabels): it
	// would otherwise carry the labels of whichever request dialled.
	go pprof.Do(context.Background(), pprof.Labels("conn", "mux-replies"), func(context.Context) { mc.readReplies() })
	return mc, nil
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

var errClosed = errors.New("wire: client closed")

// closeMux closes the shared connections and waits for their readers.
func (c *Client) closeMux() {
	for i := range c.mux.slots {
		sl := &c.mux.slots[i]
		sl.mu.Lock()
		mc := sl.mc
		sl.mc = nil
		sl.mu.Unlock()
		if mc != nil {
			mc.fail(errClosed)
			mc.read.Wait()
		}
	}
}

func (mc *muxConn) failed() bool {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return mc.err != nil
}

// send queues cl's request and writes the queue unless another caller is
// writing it; it reports false if the connection had failed already.
func (mc *muxConn) send(cl *call, key, tag string) bool {
	mc.mu.Lock()
	if mc.err != nil {
		mc.mu.Unlock()
		return false
	}
	if cl.del {
		mc.out = append(append(appendDelete(mc.out, key), " O"...), tag...)
	} else {
		mc.out = AppendGet(mc.out, key, tag, "")
	}
	mc.out = append(mc.out, "\r\n"...)
	cl.sent = time.Now()
	mc.pending = append(mc.pending, cl)
	if mc.writing {
		mc.mu.Unlock()
		return true // the writer takes it with the rest
	}
	mc.writing = true
	for len(mc.out) > 0 && mc.err == nil {
		batch := mc.out
		mc.out = mc.spare[:0]
		mc.mu.Unlock()
		// A write deadline bounds a peer that stops reading; the
		// reader's deadline (below) one that stops answering. It moves
		// only when less than 15/16 of the timeout is left of it, as a
		// client connection's (server/conn.go): a write still fails
		// after 15/16 to all of the timeout without progress, and a busy
		// connection updates its timer once in a sixteenth of the
		// timeout rather than at every write.
		if now := time.Now(); mc.writeBy.Sub(now) < mc.timeout-mc.timeout/16 {
			mc.writeBy = now.Add(mc.timeout)
			mc.pc.nc.SetWriteDeadline(mc.writeBy)
		}
		_, err := mc.pc.raw.Write(batch)
		if err != nil {
			mc.fail(err)
		}
		mc.mu.Lock()
		mc.spare = batch
		if err == nil && mc.head < len(mc.pending) {
			mc.pc.nc.SetReadDeadline(mc.pending[mc.head].sent.Add(mc.timeout))
		}
	}
	mc.writing = false
	mc.mu.Unlock()
	return true
}

// readReplies hands each reply to the oldest call awaiting one, until the
// connection fails or closes; then every call still waiting gets the
// error.
//
// Deadlines: while calls wait, the oldest one's reply must come within the
// timeout of its queueing; with none waiting the connection may idle (the
// peer's idle timeout ends it). The deadline is set after each write and
// each reply, under mu with the queue, so the last one set matches the
// queue's state.
func (mc *muxConn) readReplies() {
	defer mc.read.Done()
	for {
		line, data, err := mc.pc.rr.Read(mc.pc.r)
		if err != nil && !errors.Is(err, protocol.ErrValueTooLarge) {
			mc.fail(err)
			return
		}
		mc.mu.Lock()
		if mc.head == len(mc.pending) {
			mc.mu.Unlock()
			mc.fail(errUnasked)
			return
		}
		cl := mc.pending[mc.head]
		mc.pending[mc.head] = nil
		mc.head++
		if mc.head == len(mc.pending) {
			mc.pending, mc.head = mc.pending[:0], 0
			mc.pc.nc.SetReadDeadline(time.Time{})
		} else {
			mc.pc.nc.SetReadDeadline(mc.pending[mc.head].sent.Add(mc.timeout))
		}
		mc.mu.Unlock()
		if err != nil { // too large: this call's failure, not the stream's
			cl.v, cl.err = Value{}, err
			cl.done <- struct{}{}
			continue
		}
		if cl.del {
			cl.v, cl.err = parseDeleted(line, data)
			cl.done <- struct{}{}
			continue
		}
		cl.v, cl.err = parseValue(line, data)
		if cl.v.Found {
			cl.buf = append(cl.buf, cl.v.Data...)
			cl.v.Data = cl.buf
		}
		cl.done <- struct{}{}
	}
}

var errUnasked = errors.New("wire: a reply nobody asked for")

// fail ends the connection with err: no call is queued on it after this,
// and every call waiting gets err.
func (mc *muxConn) fail(err error) {
	mc.mu.Lock()
	if mc.err != nil {
		mc.mu.Unlock()
		return
	}
	mc.err = err
	waiting := mc.pending[mc.head:]
	mc.pending, mc.head = nil, 0
	mc.mu.Unlock()
	abort(mc.pc.nc)
	for _, cl := range waiting {
		cl.err, cl.lost = err, true
		cl.done <- struct{}{}
	}
}

// parseDeleted reads the reply to a Delete.
func parseDeleted(line, data []byte) (Value, error) {
	switch {
	case data == nil && string(line) == "HD":
		return Value{Found: true}, nil
	case data == nil && string(line) == "NF":
		return Value{}, nil
	}
	return Value{}, replyError(line)
}
