package server

import "spillway/protocol"

// Writes go to the key's owner: an entry node that does not own the key
// rebuilds the request as a line of its own (never the client's bytes, so
// nothing a client sends can pose as a peer's request), sends it to the
// owner's peer port without noreply (protocol.AppendRequest), and relays
// the answer. A meta command keeps the client's flags in the client's
// order, q included, so the owner's reply is exactly what the client
// expects; forwardQuiet follows a quiet command with mn to know it is
// done. An opaque that looks like a peer tag does not travel: the owner
// would take the client's request for a peer's.

// sendWrite sends a client's write, rebuilt, to the key's owner, and
// returns the owner's reply line and, for a VA reply, its value. A meta
// command with q may have no reply at all, so it is followed by mn, and a
// nil reply means q hid it.
func (c *conn) sendWrite(owner string, req *protocol.Request) (reply, value []byte, err error) {
	key := transient(req.Key) // forwardQuiet keeps nothing of it
	c.line = protocol.AppendRequest(c.line[:0], req, isTag)
	line := c.line
	if req.Command >= protocol.CmdMetaNoop {
		var data []byte
		if req.Command == protocol.CmdMetaSet {
			data = req.Data
		}
		return c.srv.forwardQuiet(owner, key, line, data, req.Meta.Flags.Has('q'), c.replyBuffer())
	}
	var data []byte
	if req.DataLen() >= 0 {
		data = req.Data
	}
	return c.srv.forwardQuiet(owner, key, line, data, false, c.replyBuffer())
}

// maxReplyBuffer bounds the reply buffer a connection keeps between
// forwarded writes; a write's reply is a line, and a larger one (a value,
// from ma with v) is read into a buffer used once.
const maxReplyBuffer = 1 << 10

// replyBuffer returns where a forwarded write's reply is read to: the
// connection's buffer, reused, unless the last reply outgrew it.
func (c *conn) replyBuffer() *[]byte {
	if cap(c.replyBuf) > maxReplyBuffer {
		c.replyBuf = nil
	}
	return &c.replyBuf
}

// relayWrite writes the owner's answer to a forwarded write (see
// sendWrite) as the client's reply.
func (c *conn) relayWrite(req *protocol.Request, reply, value []byte, err error) {
	if req.Command < protocol.CmdMetaNoop {
		c.relay(reply, err, req.Noreply)
		return
	}
	if err != nil {
		c.relay(nil, err, false)
		return
	}
	if reply == nil {
		return // q hid it
	}
	c.w.Line(transient(reply))
	if value != nil {
		c.w.Line(transient(value))
	}
}
