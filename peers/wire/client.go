// Package wire is the client side of the protocol Spillway nodes speak to
// each other on their peer ports: memcached's text protocol, meta
// commands mostly, with an opaque tag that says what a peer asks for and
// who asks (the table is in server/peerproto.go, next to the handler).
//
// It is not gomemcache: forwarding needs meta commands (mg returns flags,
// CAS and the remaining TTL in one reply) and must pass a client's CAS
// unique on, which gomemcache keeps unexported.
//
// One Client talks to one peer. The server keeps one per member of its
// view (server/view.go) and hands them over, unchanged, to the next view
// while the member's peer address stays the same.
package wire

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"spillway/internal/rawio"
	"spillway/protocol"
)

// Config configures a Client.
type Config struct {
	// Addr is the peer port's address.
	Addr string
	// Dial opens a connection to Addr. If nil, TCP with the exchange's
	// timeout. Tests put an in-memory network here; it is also where a
	// connection is authenticated before its first request.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// MaxIdle is the number of idle connections kept (at least 1).
	MaxIdle int
	// MaxValue bounds a value read from the peer: the asking node's item
	// size limit, since a larger item could not be kept there either.
	MaxValue int
	// TLS, if set, makes each connection a TLS client of the peer port
	// (with a client certificate, for mutual TLS).
	TLS *tls.Config
	// Secrets, if set, authenticate each new connection (Secrets.Answer),
	// inside TLS if there is TLS.
	Secrets Secrets
	// MuxConns is the number of connections Read's callers share; if
	// zero, DefaultMuxConns.
	MuxConns int
}

// Client talks to one peer: a pool of connections, each carrying one
// exchange or stream at a time, and a few connections that the reads of
// every caller share (Read, mux.go). It is safe for concurrent use.
type Client struct {
	cfg Config

	mu     sync.Mutex
	idle   []*conn // guarded by mu
	closed bool    // guarded by mu

	mux   mux
	calls sync.Pool // of *call, Read's
}

type conn struct {
	nc net.Conn
	// raw is nc with its reads and writes made raw system calls
	// (internal/rawio): r, w and the shared connections' writes use it.
	raw net.Conn
	r   *bufio.Reader
	w   *bufio.Writer
	rr  protocol.ReplyReader
}

// New returns a client of the peer at cfg.Addr. It dials lazily.
func New(cfg Config) *Client {
	cfg.MaxIdle = max(cfg.MaxIdle, 1)
	if cfg.MuxConns <= 0 {
		cfg.MuxConns = DefaultMuxConns
	}
	return &Client{cfg: cfg, mux: mux{slots: make([]muxSlot, cfg.MuxConns)}}
}

// Addr is the peer port's address.
func (c *Client) Addr() string { return c.cfg.Addr }

// Close closes the idle connections and the shared ones (failing the
// reads waiting on them), and the busy ones as their exchanges end.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	for _, pc := range c.idle {
		pc.nc.Close()
	}
	c.idle = nil
	c.mu.Unlock()
	c.closeMux()
}

// get returns a pooled connection the peer has not closed, or a new one.
func (c *Client) get(timeout time.Duration) (*conn, error) {
	for {
		c.mu.Lock()
		n := len(c.idle)
		if n == 0 {
			c.mu.Unlock()
			break
		}
		pc := c.idle[n-1]
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		if pc.alive() {
			return pc, nil
		}
		pc.nc.Close()
	}
	return c.dial(timeout)
}

// dial opens a connection to the peer and authenticates it.
func (c *Client) dial(timeout time.Duration) (*conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var nc net.Conn
	var err error
	if c.cfg.Dial != nil {
		nc, err = c.cfg.Dial(ctx, c.cfg.Addr)
	} else {
		var d net.Dialer
		nc, err = d.DialContext(ctx, "tcp", c.cfg.Addr)
	}
	if err != nil {
		return nil, err
	}
	if c.cfg.TLS != nil {
		// TLS over the raw socket: its reads and writes are raw calls
		// too (internal/rawio).
		tc := tls.Client(rawio.Wrap(nc), c.cfg.TLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, err
		}
		nc = tc
	}
	if len(c.cfg.Secrets) > 0 {
		if err := c.cfg.Secrets.Answer(nc, c.cfg.Addr, timeout); err != nil {
			nc.Close()
			return nil, err
		}
	}
	raw := rawio.Wrap(nc)
	pc := &conn{nc: nc, raw: raw, r: bufio.NewReaderSize(raw, 16<<10), w: bufio.NewWriterSize(raw, 16<<10)}
	pc.rr.MaxValue = c.cfg.MaxValue
	return pc, nil
}

// alive reports whether an idle connection can carry a request: the peer
// has not closed it (it restarted, or timed it out) and sent nothing on
// it. A request is never sent twice: a write the peer may have applied
// must not be applied again, so a connection is checked before use rather
// than a failed exchange retried.
func (pc *conn) alive() bool {
	if pc.r.Buffered() > 0 {
		return false
	}
	if tc, ok := pc.nc.(*net.TCPConn); ok {
		return tcpAlive(tc)
	}
	// Under TLS (or another wrapping): a read that the expired deadline
	// stops finds what TLS holds decrypted or read ahead, but it stops
	// before the socket, so a peer's close or reset is looked for there.
	// Bytes there count against the connection too, though they may be
	// TLS's own (TLS 1.3 session tickets, sent after the handshake and
	// read by the first exchange, are still there on a connection that
	// was pooled before its first read): it is then closed and dialled
	// again, which costs a dial and sends nothing twice.
	pc.nc.SetReadDeadline(time.Now())
	_, err := pc.r.Peek(1)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return false
	}
	if tc, ok := rawio.Unwrap(pc.nc).(*net.TCPConn); ok {
		return tcpAlive(tc)
	}
	return true
}

// tcpAlive is alive for a TCP connection: one non-blocking peek at the
// socket, where the generic check (an expired deadline, a read, its
// timeout error) sets two deadlines and allocates an error at every
// exchange.
func tcpAlive(tc *net.TCPConn) bool {
	rc, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	var b [1]byte
	alive := false
	err = rc.Control(func(fd uintptr) {
		_, errno := rawio.PeekFD(fd, b[:])
		// EAGAIN: nothing to read, and not closed. ENOSYS: a system
		// without the peek cannot tell, and takes it as open, as the
		// check through an expired deadline (alive) does.
		alive = errno == syscall.EAGAIN || errno == syscall.ENOSYS
	})
	return err == nil && alive
}

// put returns a healthy connection to the pool; a failed one is closed,
// since its stream may hold half a reply, and so is one with unread bytes,
// which the next exchange would take for its own reply.
func (c *Client) put(pc *conn, err error) {
	if err == nil && pc.r.Buffered() == 0 {
		c.mu.Lock()
		if !c.closed && len(c.idle) < c.cfg.MaxIdle {
			c.idle = append(c.idle, pc)
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
	if err != nil {
		abort(pc.nc)
		return
	}
	pc.nc.Close()
}

// abort closes nc after a failed request, discarding what the kernel has
// not sent yet. A request that timed out must not reach the peer later:
// closed the usual way, a connection still delivers its unsent bytes, and
// across a partition TCP retransmits them until the heal, when the peer
// applies them. The fault harness saw an incr forwarded during a
// partition, whose client had been told SERVER_ERROR, applied 27 s later.
// A request the peer has already received may still run: its outcome
// stays unknown, as it must.
func abort(nc net.Conn) {
	// The socket itself, under TLS (no close_notify: it would wait on the
	// same stuck connection) and raw calls.
	raw := rawio.Unwrap(nc)
	if l, ok := raw.(interface{ SetLinger(sec int) error }); ok {
		l.SetLinger(0) // close with a reset: unsent data is dropped
	}
	raw.Close()
}

// do runs one exchange on a connection within timeout.
func (c *Client) do(timeout time.Duration, fn func(pc *conn) error) error {
	pc, err := c.get(timeout)
	if err != nil {
		return err
	}
	pc.nc.SetDeadline(time.Now().Add(timeout))
	err = fn(pc)
	if err == nil {
		err = pc.w.Flush()
	}
	c.put(pc, err)
	return err
}

// Value is one key's answer to Fetch.
type Value struct {
	Found bool
	Data  []byte
	Flags uint32
	CAS   uint64
	// TTL is the item's remaining lifetime in whole seconds as the peer
	// rounded it, or -1 if it never expires.
	TTL int64
}

// Fetch reads keys from the peer with one pipelined batch of mg requests,
// within timeout per reply. tag travels as the opaque token
// (server/peerproto.go); extra is more mg flags (" T30" touches, for gat).
// The values are copies of their own.
func (c *Client) Fetch(timeout time.Duration, keys []string, tag, extra string) ([]Value, error) {
	st, err := c.Open(timeout)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	for _, k := range keys {
		st.Send(k, tag, extra)
	}
	out := make([]Value, len(keys))
	for i := range out {
		v, err := st.Next()
		if err != nil {
			return nil, err
		}
		v.Data = bytes.Clone(v.Data)
		out[i] = v
	}
	return out, nil
}

// readValue parses "VA <n> f<flags> c<cas> t<ttl> ...\r\n<data>\r\n" or
// "EN\r\n". Data is the connection's buffer, valid until its next read.
func (pc *conn) readValue() (Value, error) {
	line, data, err := pc.rr.Read(pc.r)
	if err != nil {
		return Value{}, err
	}
	return parseValue(line, data)
}

// parseValue parses an mg reply (readValue); "NS", a peer's refusal of a
// read it would have to fill (mux.go), is ErrNotHeld.
func parseValue(line, data []byte) (Value, error) {
	switch {
	case bytes.HasPrefix(line, []byte("EN")):
		return Value{}, nil
	case data == nil && string(line) == "NS":
		return Value{}, ErrNotHeld
	case data == nil:
		return Value{}, replyError(line)
	}
	v := Value{Found: true, Data: data, TTL: -1}
	if f, ok := protocol.MetaReplyFlag(line, 'f'); ok {
		n, _ := strconv.ParseUint(string(f), 10, 32)
		v.Flags = uint32(n)
	}
	if c, ok := protocol.MetaReplyFlag(line, 'c'); ok {
		v.CAS, _ = strconv.ParseUint(string(c), 10, 64)
	}
	if t, ok := protocol.MetaReplyFlag(line, 't'); ok {
		if ttl, err := strconv.ParseInt(string(t), 10, 64); err == nil && ttl >= 0 {
			v.TTL = ttl
		}
	}
	return v, nil
}

// Reply is the answer to one request: its line and, for a VA reply, the
// value.
type Reply struct {
	Line  []byte
	Value []byte
}

// Exchange sends one request (line, and a data block when data is not
// nil) within timeout and returns the peer's reply.
func (c *Client) Exchange(timeout time.Duration, line, data []byte) (Reply, error) {
	r, _, err := c.ExchangeAppend(timeout, line, data, nil)
	return r, err
}

// ExchangeAppend is Exchange with the reply appended to buf[:0] rather
// than copied to memory of its own: a caller that keeps the returned
// buffer for its next exchange allocates nothing. The reply's Line and
// Value point into it.
func (c *Client) ExchangeAppend(timeout time.Duration, line, data, buf []byte) (Reply, []byte, error) {
	var r Reply
	err := c.do(timeout, func(pc *conn) error {
		writeRequest(pc.w, line, data)
		if err := pc.w.Flush(); err != nil {
			return err
		}
		var err error
		r.Line, r.Value, buf, err = pc.readAppend(buf)
		return err
	})
	return r, buf, err
}

// ExchangeQuiet is Exchange for a meta command with q, which may answer
// nothing: an mn follows it, and a nil Line means only MN came back.
func (c *Client) ExchangeQuiet(timeout time.Duration, line, data []byte) (Reply, error) {
	var r Reply
	err := c.do(timeout, func(pc *conn) error {
		writeRequest(pc.w, line, data)
		pc.w.WriteString("mn\r\n")
		if err := pc.w.Flush(); err != nil {
			return err
		}
		var err error
		r.Line, r.Value, err = pc.read()
		if err != nil || string(r.Line) == "MN" {
			r = Reply{}
			return err
		}
		mn, _, err := pc.read()
		if err == nil && string(mn) != "MN" {
			err = replyError(mn)
		}
		return err
	})
	return r, err
}

// Control sends a membership message as an ms of key verb with the
// control tag, and returns the peer's answer, which comes back as a VA
// reply's value.
func (c *Client) Control(timeout time.Duration, tag, verb string, payload []byte) ([]byte, error) {
	if payload == nil {
		payload = []byte{} // an ms always has a data block, if empty
	}
	r, err := c.Exchange(timeout, ControlLine(verb, tag, len(payload)), payload)
	if err != nil {
		return nil, err
	}
	if r.Value == nil {
		return nil, replyError(r.Line)
	}
	return r.Value, nil
}

// The request lines peers send, without "\r\n". A key that cannot stand
// in a line goes base64-encoded with the b flag (protocol.AppendKey).
// FuzzRequestLines parses what they build with protocol.Parse.

// AppendGet appends an mg of key asking for the value, flags, CAS and
// remaining TTL, with tag as its opaque token and extra flags.
func AppendGet(line []byte, key, tag, extra string) []byte {
	line = append(line, "mg "...)
	line, b64 := protocol.AppendKey(line, key)
	line = append(line, " v f c t O"...)
	line = append(line, tag...)
	line = append(line, extra...)
	if b64 {
		line = append(line, " b"...)
	}
	return line
}

// DeleteLine builds a meta delete of key with flags (" O<tag>") appended.
func DeleteLine(key, flags string) []byte {
	b := make([]byte, 0, 8+len(key)*4/3+len(flags))
	return append(appendDelete(b, key), flags...)
}

// appendDelete appends a meta delete of key, without flags or the line's
// end.
func appendDelete(line []byte, key string) []byte {
	line = append(line, "md "...)
	line, b64 := protocol.AppendKey(line, key)
	if b64 {
		line = append(line, " b"...)
	}
	return line
}

// ControlLine builds the ms that carries a membership message of n bytes:
// its verb is the key, tag the opaque token.
func ControlLine(verb, tag string, n int) []byte {
	line := make([]byte, 0, 32+len(verb)+len(tag))
	line = append(line, "ms "...)
	line = append(line, verb...)
	line = append(line, ' ')
	line = strconv.AppendInt(line, int64(n), 10)
	line = append(line, " O"...)
	return append(line, tag...)
}

func writeRequest(w *bufio.Writer, line, data []byte) {
	w.Write(line)
	w.WriteString("\r\n")
	if data != nil {
		w.Write(data)
		w.WriteString("\r\n")
	}
}

// read reads one reply line, and the value of a VA reply, as copies of
// their own: the caller keeps them after the connection is reused.
func (pc *conn) read() (line, value []byte, err error) {
	line, value, _, err = pc.readAppend(nil)
	return line, value, err
}

// readAppend is read, copying the reply to buf[:0] (one allocation if buf
// is nil or too small) and returning that buffer.
func (pc *conn) readAppend(buf []byte) (line, value, _ []byte, err error) {
	l, v, err := pc.rr.Read(pc.r)
	if err != nil {
		return nil, nil, buf, err
	}
	if buf == nil || cap(buf) < len(l)+len(v) {
		buf = make([]byte, 0, len(l)+len(v))
	}
	buf = append(append(buf[:0], l...), v...)
	line = buf[:len(l):len(l)]
	if v != nil {
		value = buf[len(l) : len(l)+len(v) : len(l)+len(v)]
	}
	return line, value, buf, nil
}

// ErrReply is a reply line that is neither a value nor a miss.
var ErrReply = errors.New("peer: unexpected reply")

func replyError(line []byte) error {
	return fmt.Errorf("%w %q", ErrReply, line)
}
