package server

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"spillway/internal/rawio"
	"spillway/peers/wire"
	"spillway/protocol"
)

var syscallEMFILE = syscall.EMFILE

// conn is one client connection. Its fields are used by its own goroutine
// only, except state, which Shutdown reads.
type conn struct {
	srv *Server
	nc  net.Conn
	// r and w are the connection's buffers while it has requests to
	// answer; an idle connection gives them back (awaitInput).
	r   *protocol.Reader
	w   *protocol.Writer
	req protocol.Request
	// first holds the bytes an idle connection's wait read; input hands
	// them to r before the rest of the stream. At 1 KiB a batch of 16
	// pipelined requests of the bench's 9:1 mix arrives in this one read
	// (at 256 bytes the reader's buffer had to read again: 0.176 reads
	// per request against 0.125, about 8 % of a node's CPU at pipeline
	// 16), for 0.5 KiB more per idle connection.
	first [1024]byte
	input prefixed

	// counted wraps nc to count bytes_read and bytes_written.
	counted countingConn
	// latency holds the times of requests not yet in the node's totals
	// (latency.go), and lastEnd when the last request's reply was
	// buffered: the start of one pipelined behind it.
	latency pendingLatency
	lastEnd monotime
	// local counts this connection's commands; it is added to the server's
	// totals once per batch so that cores do not fight over shared counters.
	local counters

	// idle is true from the moment every received request is answered
	// until the next bytes arrive: the only time Shutdown may interrupt
	// the connection without losing a request it has already received.
	idle atomic.Bool
	// idleSince is the port's sweep count when the connection last went
	// idle (sweepEnded).
	idleSince atomic.Uint64
	// mu orders Shutdown's interruption against the arrival of bytes.
	mu          sync.Mutex
	interrupted bool // guarded by mu
	quit        bool
	// peer is set on the peer port: requests come from other nodes and
	// are served here, never routed on.
	peer bool
	// authed is set once a client connection authenticated (auth.go).
	authed bool
	// unauthed is set on a peer connection that has yet to authenticate.
	unauthed bool
	// gone is set when a write to the connection failed or Shutdown closed
	// it: a request under way stops working for it (awaitable).
	gone atomic.Bool
	// negotiated is set once the first byte chose the protocol; bin is
	// set if it chose the binary protocol (binary.go).
	negotiated bool
	bin        *binaryConn
	// keyLock is the ownership lock of the key the request being handled
	// writes, held from claimWrite until the write is stored.
	keyLock *sync.RWMutex
	// prevRound and endRound are the write round claimWrite opened (see
	// holders.begin): the round before it, and the round's end.
	prevRound <-chan struct{}
	endRound  writeRound
	// line is where a forwarded write's request line is built, and reply
	// where its answer is read to (sendWrite).
	line, replyBuf []byte
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{srv: s, nc: nc}
	// Its reads and writes are raw system calls (internal/rawio): fewer
	// hand-offs of a P between threads, the node's dearest cost at
	// pipeline 1.
	c.counted.Conn = rawio.Wrap(nc)
	c.counted.c = c
	c.input.r = &c.counted
	return c
}

// newReader makes a connection's request reader. memcached lets a
// multi-key get line grow without bound; Spillway allows one as long as
// the largest item, so a connection's memory stays bounded.
func (s *Server) newReader() any {
	return protocol.NewReader(nil, protocol.Limits{MaxItemSize: s.cfg.MaxItemSize, MaxGetLine: max(s.cfg.MaxItemSize, protocol.DefaultMaxGetLine)})
}

// awaitInput waits for the next bytes from the other end with the
// connection's buffers back in the server's pools, so that an idle
// connection holds its goroutine and a few hundred bytes rather than
// 80 KiB of buffers; then it takes buffers again. It reports false if the
// connection ended instead (closed, timed out, interrupted).
func (c *conn) awaitInput() bool {
	c.releaseBuffers()
	// Between requests, the wait comes before the read rather than after
	// a read that finds nothing (a third of a node's system calls at
	// pipeline 1); the end of a stream that came with the last request is
	// then found by the port's sweep (sweepEnded). Reads within a request
	// read first, and see an end at once.
	n, _ := c.counted.readIdle(c.first[:])
	if n == 0 {
		return false
	}
	c.input.pre = c.first[:n]
	c.r = c.srv.readers.Get().(*protocol.Reader)
	c.r.Reset(&c.input)
	c.w = c.srv.writers.Get().(*protocol.Writer)
	c.w.Reset(&c.counted)
	return true
}

// releaseBuffers gives the connection's buffers back, if it holds them.
func (c *conn) releaseBuffers() {
	if c.r != nil {
		c.r.Reset(nil)
		c.srv.readers.Put(c.r)
		c.r = nil
	}
	if c.w != nil {
		c.w.Reset(nil)
		c.srv.writers.Put(c.w)
		c.w = nil
	}
}

// prefixed reads pre, then r.
type prefixed struct {
	pre []byte
	r   io.Reader
}

func (p *prefixed) Read(b []byte) (int, error) {
	if len(p.pre) > 0 {
		n := copy(b, p.pre)
		p.pre = p.pre[n:]
		return n, nil
	}
	return p.r.Read(b)
}

// reject answers a connection over the limit, as memcached does, and closes it.
func (c *conn) reject(line string) {
	c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	io.WriteString(c.nc, line+"\r\n")
	c.nc.Close()
}

// interruptIdle wakes a connection blocked waiting for a new request so it
// notices the shutdown; a connection in the middle of a request is left to
// finish it and notices at its next flush.
func (c *conn) interruptIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.idle.Load() {
		c.interrupted = true
		c.nc.SetReadDeadline(time.Now())
	}
}

// busy records that request bytes arrived. If Shutdown interrupted the
// wait a moment too late, the bytes win: the deadline is lifted so the
// request is read whole and answered.
//
// Shutdown sets closing before it interrupts anyone, so while closing is
// false no interruption can be under way and the lock is not needed: the
// common case costs one compare-and-swap.
func (c *conn) busy() {
	if !c.idle.CompareAndSwap(true, false) || !c.srv.stopping(c.peer) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.interrupted {
		c.interrupted = false
		c.nc.SetReadDeadline(time.Time{})
	}
}

func (c *conn) serve() {
	s := c.srv
	defer func() {
		if v := recover(); v != nil {
			// The stack is what makes a panic in the field fixable: the
			// fault harness logged "index out of range [0] with length
			// 0" on peer connections for days without one.
			s.cfg.Logger.Error("connection panic", "remote", c.nc.RemoteAddr().String(), "panic", v, "stack", string(debug.Stack()))
		}
		c.flushStats()
		c.nc.Close()
		c.releaseBuffers()
		s.trackConn(c, false)
		if s.verbose(1) {
			s.cfg.Logger.Info("connection closed", "remote", c.nc.RemoteAddr().String())
		}
	}()
	if s.verbose(1) {
		s.cfg.Logger.Info("connection opened", "remote", c.nc.RemoteAddr().String())
	}
	if c.peer && len(s.cl.cfg.PeerSecrets) > 0 {
		if err := wire.Secrets(s.cl.cfg.PeerSecrets).Challenge(c.nc, s.cl.cfg.Peers.Meta.Peer, peerAuthTimeout); err != nil {
			s.refusedPeer(c, err)
			return
		}
		s.authed(c)
	}
	for !c.quit {
		// A request read without waiting for the client starts when the
		// one before it ended (its parse is all that lies between): one
		// clock read a request while pipelined requests are buffered.
		waited := false
		if c.r == nil || c.r.Buffered() == 0 {
			waited = true
			// The input is drained: everything the client pipelined has
			// been answered, so send the batch in one write.
			c.flushStats()
			if c.w != nil {
				if err := c.w.Flush(); err != nil {
					return
				}
			}
			// Peers keep pooled connections idle on purpose: they have
			// an idle timeout of their own, longer than clients'.
			if d := c.idleTimeout(); d > 0 {
				c.nc.SetReadDeadline(time.Now().Add(d))
			}
			// Set idle before looking at closing: either Shutdown sees
			// the flag and interrupts the read, or we see closing here.
			c.idleSince.Store(s.sweeps[portIndex(c.peer)].Load())
			c.idle.Store(true)
			if s.stopping(c.peer) || !c.awaitInput() {
				return
			}
		}
		if c.binary() {
			if !c.serveBinary() {
				return
			}
			continue
		}
		read := c.counted.read
		err := c.r.Read(&c.req)
		if !c.authed && !c.peer && s.cfg.Users != nil && !protocol.Fatal(err) {
			c.authenticate(err)
			continue
		}
		if err != nil {
			if !c.readFailed(err) {
				return
			}
			continue
		}
		if s.verbose(2) {
			s.cfg.Logger.Debug("request", "cmd", c.req.Command.String(), "key", string(c.req.Key))
		}
		start := c.lastEnd
		if waited || c.counted.read != read || start == 0 {
			start = s.monoNow()
		}
		c.handle(&c.req)
		c.lastEnd = c.observe(c.req.Command, start)
	}
	if c.w != nil {
		c.w.Flush()
	}
}

// peerAuthTimeout bounds the authentication of a peer connection.
const peerAuthTimeout = 5 * time.Second

func (c *conn) idleTimeout() time.Duration {
	if c.peer {
		return c.srv.cl.cfg.PeerIdleTimeout
	}
	return c.srv.cfg.IdleTimeout
}

// readFailed answers a failed read and reports whether the connection can
// go on.
func (c *conn) readFailed(err error) bool {
	// A stream that ends inside a request is closed without a reply, as
	// memcached closes it: the client is gone, or has said it sends no
	// more.
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return false
	}
	if errors.Is(err, protocol.ErrTooLarge) && (c.req.Command == protocol.CmdSet || c.req.Command == protocol.CmdMetaSet) {
		// The value was discarded unread; the old one goes too, as in
		// memcached.
		c.srv.rt.drop(c, c.req.Key)
	}
	c.w.Error(err)
	if protocol.Fatal(err) {
		c.w.Flush()
		return false
	}
	return true
}

// countingConn counts the bytes that cross the connection for stats, and
// tells the conn when a request starts to arrive.
type countingConn struct {
	net.Conn
	c             *conn
	read, written uint64
	// writeBy is the write deadline last set (Write).
	writeBy monotime
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.counted(n)
	return n, err
}

// readIdle is Read for the wait between requests (rawio.ReadIdle).
func (c *countingConn) readIdle(p []byte) (int, error) {
	n, err := rawio.ReadIdle(c.Conn, p)
	c.counted(n)
	return n, err
}

// counted counts n bytes read, and tells the conn a request is arriving.
func (c *countingConn) counted(n int) {
	c.read += uint64(n)
	if n > 0 && c.c.idle.Load() {
		c.c.busy()
	}
}

// Write writes p within the write timeout. The deadline moves only when
// less than 15/16 of the timeout is left of it: a write still fails after
// 15/16 to all of the timeout without progress, and a busy connection
// moves its deadline (a timer update) once in a sixteenth of the timeout
// rather than at every reply.
func (c *countingConn) Write(p []byte) (int, error) {
	if d := c.c.srv.cfg.WriteTimeout; d > 0 {
		if now := c.c.srv.monoNow(); time.Duration(c.writeBy-now) < d-d/16 {
			c.writeBy = now + monotime(d)
			c.Conn.SetWriteDeadline(c.c.srv.deadline(c.writeBy))
		}
	}
	n, err := c.Conn.Write(p)
	c.written += uint64(n)
	return n, err
}

// transient returns b as a string without copying it. The string aliases the
// request's buffer, which the next request overwrites: pass it only to
// calls that keep nothing of it — the owned store (which copies keys into
// its segments), hashes, map lookups, fill generations — never to anything
// that outlives the request (singleflight calls, holders, copies, logs).
// It spares the request path one allocation per key.
func transient(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
