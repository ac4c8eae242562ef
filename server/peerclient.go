package server

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"spillway/protocol"
	"spillway/store"
)

// peerClient is a pool of connections to one peer's peer port.
//
// Peers speak memcached's text protocol to each other, but not through
// gomemcache: forwarding needs meta commands (mg returns flags, CAS and the
// remaining TTL in one reply) and must pass a client's CAS unique on, which
// gomemcache keeps unexported. It is safe for concurrent use.
type peerClient struct {
	addr    string
	timeout time.Duration // dial, writes and forwarded writes
	slow    time.Duration // reads, which the peer may fill from the origin
	maxIdle int
	// maxValue bounds a value read from the peer (this node's item size
	// limit: a larger one could not be stored here either).
	maxValue int

	mu     sync.Mutex
	idle   []*peerConn // guarded by mu
	closed bool        // guarded by mu
}

type peerConn struct {
	nc net.Conn
	r  *bufio.Reader
	w  *bufio.Writer
	rr protocol.ReplyReader
}

func newPeerClient(addr string, timeout, slow time.Duration, maxIdle, maxValue int) *peerClient {
	return &peerClient{addr: addr, timeout: timeout, slow: max(slow, timeout), maxIdle: maxIdle, maxValue: maxValue}
}

// conn returns a pooled connection (pooled is true) or a new one.
func (p *peerClient) conn() (pc *peerConn, pooled bool, err error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		pc := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return pc, true, nil
	}
	p.mu.Unlock()
	nc, err := net.DialTimeout("tcp", p.addr, p.timeout)
	if err != nil {
		return nil, false, err
	}
	pc = &peerConn{nc: nc, r: bufio.NewReaderSize(nc, 16<<10), w: bufio.NewWriterSize(nc, 16<<10)}
	pc.rr.MaxValue = p.maxValue
	return pc, false, nil
}

// release returns a healthy connection to the pool; a failed one is closed,
// since its stream may hold half a reply, and so is one with unread bytes,
// which the next exchange would take for its own reply.
func (p *peerClient) release(pc *peerConn, err error) {
	if err == nil && pc.r.Buffered() == 0 {
		p.mu.Lock()
		if !p.closed && len(p.idle) < p.maxIdle {
			p.idle = append(p.idle, pc)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	pc.nc.Close()
}

func (p *peerClient) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, pc := range p.idle {
		pc.nc.Close()
	}
	p.idle = nil
}

// do runs one exchange on a pooled connection within timeout. A pooled
// connection the peer has closed meanwhile (it restarted, or an idle
// timeout) fails at once with EOF or a reset: the exchange is tried once
// more on a new connection.
func (p *peerClient) do(timeout time.Duration, fn func(pc *peerConn) error) error {
	for attempt := 0; ; attempt++ {
		pc, pooled, err := p.conn()
		if err != nil {
			return err
		}
		pc.nc.SetDeadline(time.Now().Add(timeout))
		err = fn(pc)
		if err == nil {
			err = pc.w.Flush()
		}
		p.release(pc, err)
		if err == nil || !pooled || attempt > 0 || !closedByPeer(err) {
			return err
		}
	}
}

// closedByPeer reports errors of a connection the other side had closed.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// fetched is an item read from a peer, with its remaining lifetime.
type fetched struct {
	item  store.Item
	found bool
}

// fetch reads keys from the peer with one pipelined batch of mg requests.
// tag travels as the opaque token: it says what kind of read this is and
// who asks (see peerTag).
func (p *peerClient) fetch(keys []string, tag string, now time.Time) ([]fetched, error) {
	return p.fetchWith(keys, tag, "", now)
}

// fetchWith is fetch with extra mg flags (" T30" touches, for gat).
func (p *peerClient) fetchWith(keys []string, tag, extra string, now time.Time) ([]fetched, error) {
	out := make([]fetched, len(keys))
	err := p.do(p.slow, func(pc *peerConn) error {
		for _, k := range keys {
			pc.w.WriteString("mg ")
			b64 := writePeerKey(pc.w, k)
			pc.w.WriteString(" v f c t O")
			pc.w.WriteString(tag)
			pc.w.WriteString(extra)
			if b64 {
				pc.w.WriteString(" b")
			}
			pc.w.WriteString("\r\n")
		}
		if err := pc.w.Flush(); err != nil {
			return err
		}
		for i := range keys {
			f, err := readMetaValue(pc, keys[i], now)
			if err != nil {
				return err
			}
			out[i] = f
		}
		return nil
	})
	return out, err
}

// readMetaValue parses "VA <n> f<flags> c<cas> t<ttl> O<tag>\r\n<data>\r\n"
// or "EN\r\n".
func readMetaValue(pc *peerConn, key string, now time.Time) (fetched, error) {
	line, value, err := pc.readReply()
	switch {
	case err != nil:
		return fetched{}, err
	case bytes.HasPrefix(line, []byte("EN")):
		return fetched{}, nil
	case value == nil:
		return fetched{}, peerReplyError(line)
	}
	it := store.Item{Key: key, Value: value}
	if f, ok := protocol.MetaReplyFlag(line, 'f'); ok {
		v, _ := strconv.ParseUint(string(f), 10, 32)
		it.Flags = uint32(v)
	}
	if c, ok := protocol.MetaReplyFlag(line, 'c'); ok {
		it.CAS, _ = strconv.ParseUint(string(c), 10, 64)
	}
	if t, ok := protocol.MetaReplyFlag(line, 't'); ok {
		// The owner rounds the remaining lifetime to the nearest second,
		// and now is when the request was sent, before the owner looked:
		// now+ttl-0.5s is never after the item's own expiry, so a copy
		// never outlives it.
		if ttl, _ := strconv.ParseInt(string(t), 10, 64); ttl >= 0 {
			it.Expires = now.Add(time.Duration(ttl)*time.Second - time.Second/2)
		}
	}
	return fetched{item: it, found: true}, nil
}

// exchange sends one request (line, and data when it has any) and returns
// the reply line and, for a VA reply, its value: what a forwarded write
// needs to relay.
func (p *peerClient) exchange(line, data []byte) (reply, value []byte, err error) {
	err = p.do(p.timeout, func(pc *peerConn) error {
		writeRequest(pc.w, line, data)
		if err := pc.w.Flush(); err != nil {
			return err
		}
		reply, value, err = pc.readReply()
		return err
	})
	return reply, value, err
}

// control sends a membership message (see fence.go) as an ms with the
// control tag and returns the peer's answer, which comes back as a VA
// reply's value.
func (p *peerClient) control(tag, verb string, payload []byte) ([]byte, error) {
	if payload == nil {
		payload = []byte{} // an ms always has a data block, if empty
	}
	line := make([]byte, 0, 32+len(tag))
	line = append(line, "ms "...)
	line = append(line, verb...)
	line = append(line, ' ')
	line = strconv.AppendInt(line, int64(len(payload)), 10)
	line = append(line, " O"...)
	line = append(line, tag...)
	reply, value, err := p.exchange(line, payload)
	if err != nil {
		return nil, err
	}
	if value == nil {
		return nil, peerReplyError(reply)
	}
	return value, nil
}

// exchangeQuiet is exchange for a meta command with q, which may answer
// nothing: an mn follows it, and a nil reply means only MN came back.
func (p *peerClient) exchangeQuiet(line, data []byte) (reply, value []byte, err error) {
	err = p.do(p.timeout, func(pc *peerConn) error {
		writeRequest(pc.w, line, data)
		pc.w.WriteString("mn\r\n")
		if err := pc.w.Flush(); err != nil {
			return err
		}
		reply, value, err = pc.readReply()
		if err != nil || string(reply) == "MN" {
			reply, value = nil, nil
			return err
		}
		mn, _, err := pc.readReply()
		if err == nil && string(mn) != "MN" {
			err = peerReplyError(mn)
		}
		return err
	})
	return reply, value, err
}

func writeRequest(w *bufio.Writer, line, data []byte) {
	w.Write(line)
	w.WriteString("\r\n")
	if data != nil {
		w.Write(data)
		w.WriteString("\r\n")
	}
}

// readReply reads one reply line, and the value of a VA reply, as copies
// of their own: the caller keeps them after the connection is reused.
func (pc *peerConn) readReply() (reply, value []byte, err error) {
	line, value, err := pc.rr.Read(pc.r)
	if err != nil {
		return nil, nil, err
	}
	if value != nil {
		value = bytes.Clone(value)
	}
	return bytes.Clone(line), value, nil
}

// errPeerReply is a reply line that is neither a value nor a miss.
var errPeerReply = errors.New("peer: unexpected reply")

func peerReplyError(line []byte) error {
	return fmt.Errorf("%w %q", errPeerReply, line)
}
