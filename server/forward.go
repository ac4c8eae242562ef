package server

import (
	"encoding/base64"
	"strconv"

	"spillway/protocol"
)

// Writes go to the key's owner: an entry node that does not own the key
// rebuilds the request as a line of its own (never the client's bytes, so
// nothing a client sends can pose as a peer's request), sends it to the
// owner's peer port without noreply or q, and relays the answer.

// classicLine rebuilds a classic write without its noreply.
func classicLine(req *protocol.Request) []byte {
	b := make([]byte, 0, 64+len(req.Key))
	b = append(b, req.Command.String()...)
	b = append(b, ' ')
	b = append(b, req.Key...)
	switch req.Command {
	case protocol.CmdSet, protocol.CmdAdd, protocol.CmdReplace,
		protocol.CmdAppend, protocol.CmdPrepend, protocol.CmdCas:
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(req.Flags), 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, req.Exptime, 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(len(req.Data)), 10)
		if req.Command == protocol.CmdCas {
			b = append(b, ' ')
			b = strconv.AppendUint(b, req.CAS, 10)
		}
	case protocol.CmdIncr, protocol.CmdDecr:
		b = append(b, ' ')
		b = strconv.AppendUint(b, req.Delta, 10)
	case protocol.CmdTouch:
		b = append(b, ' ')
		b = strconv.AppendInt(b, req.Exptime, 10)
	}
	return b
}

// metaLine rebuilds a meta command with the client's flags in the client's
// order, q included, so the owner's reply is exactly what the client
// expects; forwardMeta follows a quiet command with mn to know it is done.
func metaLine(req *protocol.Request) []byte {
	m := &req.Meta
	b := make([]byte, 0, 96+len(req.Key))
	b = append(b, req.Command.String()...)
	b = append(b, ' ')
	if m.Flags.Has('b') {
		b = base64.StdEncoding.AppendEncode(b, req.Key)
	} else {
		b = append(b, req.Key...)
	}
	if req.Command == protocol.CmdMetaSet {
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(len(req.Data)), 10)
	}
	for _, f := range m.Order() {
		switch f {
		case 'O':
			if _, _, isTag := parseTag(m.Opaque); isTag {
				continue
			}
		}
		b = append(b, ' ', f)
		switch f {
		case 'O':
			b = append(b, m.Opaque...)
		case 'T':
			b = strconv.AppendInt(b, m.TTL, 10)
		case 'F':
			b = strconv.AppendUint(b, uint64(m.ClientFlags), 10)
		case 'C':
			b = strconv.AppendUint(b, m.CAS, 10)
		case 'N':
			b = strconv.AppendInt(b, m.Vivify, 10)
		case 'R':
			b = strconv.AppendInt(b, m.Recache, 10)
		case 'J':
			b = strconv.AppendUint(b, m.Initial, 10)
		case 'D':
			b = strconv.AppendUint(b, m.Delta, 10)
		case 'M':
			b = append(b, m.Mode)
		}
	}
	return b
}

// sendWrite sends a client's write, rebuilt, to the key's owner, and
// returns the owner's reply line and, for a VA reply, its value. A meta
// command with q may have no reply at all, so it is followed by mn, and a
// nil reply means q hid it.
func (c *conn) sendWrite(owner string, req *protocol.Request) (reply, value []byte, err error) {
	key := string(req.Key)
	if req.Command >= protocol.CmdMetaNoop {
		var data []byte
		if req.Command == protocol.CmdMetaSet {
			data = req.Data
		}
		return c.srv.forwardQuiet(owner, key, metaLine(req), data, req.Meta.Flags.Has('q'))
	}
	var data []byte
	if req.DataLen() >= 0 {
		data = req.Data
	}
	return c.srv.forward(owner, key, classicLine(req), data)
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
	c.w.Line(string(reply))
	if value != nil {
		c.w.Line(string(value))
	}
}
