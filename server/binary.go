package server

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"time"

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

// binaryConn is what a connection keeps to speak the binary protocol.
// Its buffers live as long as the connection: the twin's reply (scratch,
// through twin), and a reader of it.
type binaryConn struct {
	req     protocol.BinaryRequest
	scratch bytes.Buffer     // the twin's reply, in text
	twin    *protocol.Writer // writes into scratch; c.w while a twin runs
	br      *bufio.Reader    // reads scratch
	rr      protocol.ReplyReader
}

// keepScratch is the largest twin reply buffer a connection keeps between
// requests; a larger one (a big value) is dropped after its request.
const keepScratch = 64 << 10

// binary reports whether the connection speaks the binary protocol. The
// first time, on a client connection, it waits for the first byte to
// decide; the peer port speaks text only.
func (c *conn) binary() bool {
	if c.negotiated {
		return c.bin != nil
	}
	c.negotiated = true
	if c.peer {
		return false
	}
	if ok, _ := c.r.IsBinary(); !ok {
		return false // a read error is found again, and answered, by the text reader
	}
	b := &binaryConn{br: bufio.NewReaderSize(nil, 4096)}
	b.twin = protocol.NewWriter(&b.scratch)
	b.rr.MaxValue = math.MaxInt32 // replies are this node's own: a value is as large as the store allows
	c.bin = b
	return true
}

// serveBinary reads and answers one binary request, and reports whether
// the connection goes on.
func (c *conn) serveBinary() bool {
	s, b := c.srv, c.bin
	req := &b.req
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
	start := time.Now()
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
	if cmd := int(c.req.Command); cmd < len(s.metrics.byCommand) && s.metrics.byCommand[cmd] != nil {
		s.metrics.byCommand[cmd].Observe(time.Since(start).Seconds())
	}
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
	b := c.bin
	out := c.w
	c.w = b.twin
	c.handle(&c.req)
	c.w = out
	if c.req.Command >= protocol.CmdMetaNoop {
		// The twin is an implementation detail: a binary client's
		// requests are not meta commands in "stats".
		c.local[statCmdMeta]--
	}
	b.twin.Flush() // into scratch; cannot fail
	b.br.Reset(&b.scratch)
	for {
		line, value, err := b.rr.Read(b.br)
		if err == io.EOF {
			break
		}
		if err != nil { // a reply this node wrote itself: cannot happen
			c.w.BinaryReply(&b.req, []byte("SERVER_ERROR "+err.Error()), nil)
			break
		}
		c.w.BinaryReply(&b.req, line, value)
	}
	b.scratch.Reset()
	if b.scratch.Cap() > keepScratch {
		b.scratch = bytes.Buffer{}
	}
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
