package server

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"sync"

	"spillway/protocol"
)

// The binary protocol. A client connection whose first byte is 0x80
// speaks it for its whole life, as in memcached. Each binary request runs
// as its twin, the meta (or text) request that does the same thing
// (protocol.BinaryRequest.Twin), through handle, exactly as a text
// client's would: the same routing, forwarding, copies, invalidation,
// stats and metrics. handle writes the twin's text reply into a buffer of
// the connection's own, and that reply becomes the binary response
// (protocol.Writer.BinaryReply). The binary opaque is never part of the
// twin, so it cannot pass for a peer tag; the binary side echoes it.

// binaryConn is what a connection keeps to speak the binary protocol: its
// request. The buffers a twin's reply passes through are taken for the
// request and given back after it (twinReplies, s.writers), so that an
// idle binary connection holds no more than a text one.
type binaryConn struct {
	req protocol.BinaryRequest
}

// twinReply is the buffer of a twin's text reply, and a reader of it.
type twinReply struct {
	text bytes.Buffer
	br   *bufio.Reader
	rr   protocol.ReplyReader
}

// twinReplies pools the twinReplies of the requests under way.
var twinReplies = sync.Pool{New: func() any {
	t := &twinReply{br: bufio.NewReaderSize(nil, 4096)}
	t.rr.MaxValue = math.MaxInt32 // replies are this node's own: a value is as large as the store allows
	return t
}}

// keepTwinReply is the largest twin reply buffer kept for the next
// request; a larger one (a big value) is dropped.
const keepTwinReply = 64 << 10

// binary reports whether the connection speaks the binary protocol. The
// first time, on a client connection, it looks at the first byte to
// decide. The peer port speaks text only, and so does a node whose
// clients authenticate (as memcached with -Y, which refuses the binary
// protocol: its authentication is SASL's, which Spillway does not have).
func (c *conn) binary() bool {
	if c.negotiated {
		return c.bin != nil
	}
	c.negotiated = true
	if c.peer || c.srv.cfg.Users != nil {
		return false
	}
	if ok, _ := c.r.IsBinary(); !ok {
		return false // a read error is found again, and answered, by the text reader
	}
	c.bin = &binaryConn{}
	return true
}

// serveBinary reads and answers one binary request, and reports whether
// the connection goes on.
func (c *conn) serveBinary() bool {
	s, req := c.srv, &c.bin.req
	if err := c.r.ReadBinary(req); err != nil {
		if errors.Is(err, protocol.ErrTooLarge) {
			c.binaryTooLarge()
			return true
		}
		c.w.BinaryError(req, err) // nothing for a stream that failed
		if protocol.Fatal(err) {
			c.w.Flush()
			return false
		}
		return true
	}
	if s.verbose(2) {
		s.cfg.Logger.Debug("request", "cmd", req.Opcode.String(), "key", string(req.Key))
	}
	start := s.monoNow()
	req.Twin(&c.req)
	switch op := req.Opcode.Base(); {
	case op == protocol.OpSet || op == protocol.OpAdd || op == protocol.OpReplace:
		if s.tooLarge(req.Key, req.Flags, req.Value) {
			c.binaryTooLarge()
			return true
		}
	case op == protocol.OpAppend || op == protocol.OpPrepend:
		if s.tooLarge(req.Key, 0, req.Value) {
			c.binaryTooLarge()
			return true
		}
	}
	c.runTwin()
	if c.quit && !req.Opcode.Quiet() {
		c.w.BinaryOK(req)
	}
	c.observe(c.req.Command, start)
	if req.Opcode == protocol.OpNoop {
		// memcached sends everything up to a noop at once. The counts go
		// first, as in serve: a client that has its replies sees them.
		c.flushStats()
		if err := c.w.Flush(); err != nil {
			return false
		}
	}
	return true
}

// runTwin runs c.req, the twin of the binary request, through handle, and
// writes the binary response for its reply.
func (c *conn) runTwin() {
	s, req := c.srv, &c.bin.req
	t := twinReplies.Get().(*twinReply)
	tw := s.writers.Get().(*protocol.Writer)
	tw.Reset(&t.text)
	out := c.w
	c.w = tw
	c.handle(&c.req)
	c.w = out
	tw.Flush() // into t.text; cannot fail
	tw.Reset(nil)
	s.writers.Put(tw)
	if c.req.Command >= protocol.CmdMetaNoop {
		// The twin is an implementation detail: a binary client's
		// requests are not meta commands in "stats".
		c.local[statCmdMeta]--
	}
	t.br.Reset(&t.text)
	for {
		line, value, err := t.rr.Read(t.br)
		if err == io.EOF {
			break
		}
		if err != nil { // a reply this node wrote itself: cannot happen
			c.w.BinaryReply(req, []byte("SERVER_ERROR "+err.Error()), nil)
			break
		}
		c.w.BinaryReply(req, line, value)
	}
	t.br.Reset(nil)
	t.text.Reset()
	if t.text.Cap() > keepTwinReply {
		t.text = bytes.Buffer{}
	}
	twinReplies.Put(t)
}

// binaryTooLarge answers a set, add, replace, append or prepend whose
// item would exceed the item size limit. Like memcached, a set removes the
// key's old value, so that readers do not keep seeing data the client
// meant to replace.
func (c *conn) binaryTooLarge() {
	req := &c.bin.req
	if req.Opcode.Base() == protocol.OpSet {
		c.srv.rt.drop(c, req.Key)
	}
	c.w.BinaryError(req, protocol.ErrTooLarge)
}
