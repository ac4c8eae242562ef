package protocol

import (
	"encoding/binary"
	"math"
)

// A server serves a binary request as its twin: the text or meta request
// that does the same thing (Twin), which it runs as it runs a text
// client's; the twin's reply then becomes the binary response
// (Writer.BinaryReply). So a binary request is routed, counted and
// answered exactly as its text twin is. The twins:
//
//	get getq getk getkq       mg <key> [b] v f c
//	touch                     mg <key> [b] T<exptime> f c
//	gat gatq gatk gatkq       mg <key> [b] T<exptime> v f c
//	set setq                  ms <key> <len> [b] F<flags> T<exptime> [C<cas>] c
//	add addq                  ms <key> <len> [b] F<flags> T<exptime> ME c   (with a CAS: as set)
//	replace replaceq          ms <key> <len> [b] F<flags> T<exptime> MR c   (with a CAS: as set)
//	append(q) prepend(q)      ms <key> <len> [b] MA|MP [C<cas>] c
//	delete deleteq            md <key> [b] [C<cas>]
//	increment(q) decrement(q) ma <key> [b] D<delta> MI|MD [N<exptime> J<initial>] [C<cas>] v c
//	flush flushq              flush_all [<delay>]
//	noop                      mn
//	version                   version
//	quit quitq                quit
//	stat [<group>]            stats [<group>]
//
// As in memcached, a set, add or replace that carries a CAS is a
// compare-and-swap whatever its opcode, and an increment whose exptime is
// 0xffffffff does not create a missing key (no N). The b flag (send the
// key base64-encoded when the request is passed to another node) is set
// for a key that cannot stand in a text line (see ValidKey). The binary
// opaque never becomes an O flag: the binary side echoes it itself.

// Twin fills t with the twin of req (see above); t's slices point into
// req. An opcode without one (ReadBinary returns none) leaves t without a
// command, which a server answers "ERROR": "Unknown command".
func (req *BinaryRequest) Twin(t *Request) {
	t.reset()
	m := &t.Meta
	op := req.Opcode.Base()
	switch op {
	case OpGet, OpGetK, OpTouch, OpGAT, OpGATK:
		t.Command = CmdMetaGet
		t.twinKey(req.Key)
		if op != OpGet && op != OpGetK {
			m.add('T')
			m.TTL = twinExptime(req.Exptime)
		}
		if op != OpTouch {
			m.add('v')
		}
		m.add('f')
		m.add('c')
	case OpSet, OpAdd, OpReplace, OpAppend, OpPrepend:
		t.Command = CmdMetaSet
		t.twinKey(req.Key)
		t.Data, t.dataLen = req.Value, len(req.Value)
		if op != OpAppend && op != OpPrepend {
			m.add('F')
			m.ClientFlags = req.Flags
			m.add('T')
			m.TTL = twinExptime(req.Exptime)
		}
		m.Mode = 'S'
		switch {
		case op == OpAppend:
			m.Mode = 'A'
		case op == OpPrepend:
			m.Mode = 'P'
		case req.CAS != 0: // memcached: a compare-and-swap, whatever the opcode
		case op == OpAdd:
			m.Mode = 'E'
		case op == OpReplace:
			m.Mode = 'R'
		}
		if m.Mode != 'S' {
			m.add('M')
		}
		t.twinCAS(req.CAS)
		m.add('c')
	case OpDelete:
		t.Command = CmdMetaDelete
		t.twinKey(req.Key)
		t.twinCAS(req.CAS)
	case OpIncrement, OpDecrement:
		t.Command = CmdMetaArith
		t.twinKey(req.Key)
		m.add('D')
		m.Delta = req.Delta
		m.add('M')
		m.Mode = 'I'
		if op == OpDecrement {
			m.Mode = 'D'
		}
		if req.Exptime != math.MaxUint32 {
			m.add('N')
			m.Vivify = twinExptime(req.Exptime)
			m.add('J')
			m.Initial = req.Initial
		}
		t.twinCAS(req.CAS)
		m.add('v')
		m.add('c')
	case OpFlush:
		t.Command = CmdFlushAll
		t.Exptime = twinExptime(req.Exptime)
	case OpNoop:
		t.Command = CmdMetaNoop
	case OpVersion:
		t.Command = CmdVersion
	case OpQuit:
		t.Command = CmdQuit
	case OpStat:
		t.Command = CmdStats
		if group := twinStatGroup(req.Key); len(group) > 0 {
			t.Args = append(t.Args, group)
		}
	}
}

// add records meta flag f as present, in order.
func (m *Meta) add(f byte) {
	m.Flags |= flagBit(f)
	m.order[m.norder] = f
	m.norder++
}

// twinKey sets a meta twin's key, with b when it cannot stand in a line.
func (t *Request) twinKey(key []byte) {
	t.Key = key
	if !ValidKey(key) {
		t.Meta.add('b')
	}
}

// twinCAS adds C<cas> to a meta twin when the request carries a CAS.
func (t *Request) twinCAS(cas uint64) {
	if cas != 0 {
		t.Meta.add('C')
		t.Meta.CAS = cas
	}
}

// twinExptime is a binary exptime (unsigned 32 bits) as the text
// protocol's signed 32 bits can carry it.
func twinExptime(exp uint32) int64 { return int64(min(exp, math.MaxInt32)) }

// twinStatGroup is the stats argument of a stat request's key: memcached
// compares "reset" and "settings" as prefixes, and any other group whole.
func twinStatGroup(key []byte) []byte {
	for _, p := range [...]string{"reset", "settings"} {
		if len(key) >= len(p) && string(key[:len(p)]) == p {
			return key[:len(p)]
		}
	}
	return key
}

// BinaryReply writes the binary response to req for one reply line of its
// twin (with value, the data block of a VA reply): nothing when req is
// quiet and the reply is a success other than a hit (or is a miss), one
// packet otherwise. The replies of stats are one packet per STAT line and
// an empty one for END. Every error has memcached's binary status: a
// SERVER_ERROR is "Out of memory" with its text (what memcached sends for
// its own), save "object too large for cache", which is "Too large.".
func (w *Writer) BinaryReply(req *BinaryRequest, line, value []byte) {
	op, quiet := req.Opcode.Base(), req.Opcode.Quiet()
	code, rest := nextToken(line)
	switch string(code) {
	case "VA", "HD":
		w.binarySuccess(req, line, value)
	case "EN":
		switch {
		case quiet:
		case op == OpGetK || op == OpGATK:
			w.binaryPacket(req, StatusKeyNotFound, 0, nil, req.Key, nil)
		default:
			w.binaryStatus(req, StatusKeyNotFound, nil)
		}
	case "NS":
		switch {
		case op == OpAdd && req.CAS == 0:
			w.binaryStatus(req, StatusKeyExists, nil)
		case op == OpReplace && req.CAS == 0:
			w.binaryStatus(req, StatusKeyNotFound, nil)
		default:
			w.binaryStatus(req, StatusNotStored, nil)
		}
	case "EX":
		w.binaryStatus(req, StatusKeyExists, nil)
	case "NF":
		w.binaryStatus(req, StatusKeyNotFound, nil)
	case "OK", "MN":
		if !quiet {
			w.BinaryOK(req)
		}
	case "VERSION":
		w.binaryPacket(req, StatusOK, 0, nil, nil, rest)
	case "STAT":
		name, val := nextToken(rest)
		w.binaryPacket(req, StatusOK, 0, nil, name, val)
	case "END", "RESET":
		w.BinaryOK(req)
	case "ERROR":
		if op == OpStat {
			w.binaryStatus(req, StatusKeyNotFound, nil)
		} else {
			w.binaryStatus(req, StatusUnknownCommand, nil)
		}
	case "CLIENT_ERROR":
		switch op {
		case OpStat:
			w.binaryStatus(req, StatusKeyNotFound, nil)
		case OpIncrement, OpDecrement:
			w.binaryStatus(req, StatusNonNumeric, nil)
		default:
			w.binaryStatus(req, StatusInvalid, rest)
		}
	case "SERVER_ERROR":
		if string(rest) == "object too large for cache" {
			w.binaryStatus(req, StatusTooLarge, nil)
		} else {
			w.binaryStatus(req, StatusOutOfMemory, rest)
		}
	default:
		w.binaryStatus(req, StatusOutOfMemory, line)
	}
}

// binarySuccess writes the response to a VA or HD reply of req's twin.
func (w *Writer) binarySuccess(req *BinaryRequest, line, value []byte) {
	op, quiet := req.Opcode.Base(), req.Opcode.Quiet()
	cas := replyUint(line, 'c', math.MaxUint64)
	switch op {
	case OpGet, OpGetK, OpTouch, OpGAT, OpGATK: // a hit: sent even when quiet
		var extras [4]byte
		binary.BigEndian.PutUint32(extras[:], uint32(replyUint(line, 'f', math.MaxUint32)))
		var key []byte
		if op == OpGetK || op == OpGATK {
			key = req.Key
		}
		if op == OpTouch {
			value = nil
		}
		w.binaryPacket(req, StatusOK, cas, extras[:], key, value)
	case OpIncrement, OpDecrement:
		if !quiet {
			n, _ := atou(value, math.MaxUint64)
			var v [8]byte
			binary.BigEndian.PutUint64(v[:], n)
			w.binaryPacket(req, StatusOK, cas, nil, nil, v[:])
		}
	default: // a store or a delete (memcached's delete answers CAS 0)
		if !quiet {
			w.binaryPacket(req, StatusOK, cas, nil, nil, nil)
		}
	}
}

// replyUint is the number of return flag f in a meta reply line, 0 if absent.
func replyUint(line []byte, f byte, limit uint64) uint64 {
	tok, _ := MetaReplyFlag(line, f)
	n, _ := atou(tok, limit)
	return n
}
