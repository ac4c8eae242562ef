package protocol

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// The client side: replies as a memcached server sends them, one shape per
// line. A reply is one line, except the two that carry a data block:
//
//	VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\n   (get, gets, gat, gats; END follows the last)
//	VA <bytes> <flag>*\r\n<data>\r\n                    (mg)
//	HD <flag>*\r\n | EN\r\n | NF <flag>*\r\n | ...      (meta)
//	STORED\r\n | END\r\n | STAT <name> <value>\r\n | <number>\r\n | ...

// ErrBadReply is a reply that breaks the protocol's framing: a line not
// ended by "\r\n" or longer than the bufio.Reader's buffer, a VALUE or VA
// line without a usable <bytes>, a data block over ReplyReader.MaxValue or
// not followed by "\r\n". The stream cannot be read further.
var ErrBadReply = errors.New("protocol: malformed reply")

// ErrValueTooLarge is a VALUE or VA reply whose data block is over
// ReplyReader.MaxValue (and at most maxSkippedValue). Read skips the block,
// so the stream stays in step: the next Read reads the next reply.
var ErrValueTooLarge = errors.New("protocol: value larger than accepted")

// maxSkippedValue bounds the block that ErrValueTooLarge skips; a larger
// one is ErrBadReply.
const maxSkippedValue = 1 << 30

// keepValueBuf is the largest value buffer a ReplyReader keeps between
// reads; a larger value gets a buffer of its own, so that one large reply
// does not pin its size for the connection's life.
const keepValueBuf = 64 << 10

// ReplyReader reads replies from a memcached server: what a client, or a
// node talking to its peers, reads. Its zero value accepts data blocks up
// to DefaultMaxItemSize. It reuses its buffers from one Read to the next:
// use one per connection. It is not safe for concurrent use.
type ReplyReader struct {
	// MaxValue is the largest data block accepted. A VALUE or VA reply
	// announcing more is ErrBadReply, before anything is allocated for it.
	// If zero, DefaultMaxItemSize is used.
	MaxValue int

	line  []byte
	value []byte
}

// Read reads one reply from br. line is the reply line without "\r\n".
// value is the data block of a VALUE or VA reply, without its "\r\n"
// (empty, not nil, for a zero-length one), and nil for any other reply.
// Both are the ReplyReader's own buffers, valid until the next Read: copy
// what you keep.
//
// A multi-line reply (the VALUEs of a get and their END, the STATs of
// stats) is one Read per line. At the end of the stream Read returns
// io.EOF between replies and io.ErrUnexpectedEOF inside one. Every error
// but ErrValueTooLarge leaves br at an unknown place in the stream: close
// the connection.
func (rr *ReplyReader) Read(br *bufio.Reader) (line, value []byte, err error) {
	l, err := br.ReadSlice('\n')
	switch {
	case err == bufio.ErrBufferFull:
		return nil, nil, fmt.Errorf("%w: line longer than %d bytes", ErrBadReply, br.Size())
	case err == io.EOF && len(l) > 0:
		return nil, nil, io.ErrUnexpectedEOF
	case err != nil:
		return nil, nil, err
	case len(l) < 2 || l[len(l)-2] != '\r':
		return nil, nil, fmt.Errorf("%w: line %q not ended by \\r\\n", ErrBadReply, l)
	}
	rr.line = append(rr.line[:0], l[:len(l)-2]...)
	line = rr.line
	n, isValue := valueSize(line)
	if !isValue {
		return line, nil, nil
	}
	maxValue := rr.MaxValue
	if maxValue <= 0 {
		maxValue = DefaultMaxItemSize
	}
	if n > maxValue && n <= maxSkippedValue {
		if _, err := br.Discard(n); err != nil {
			return nil, nil, unexpected(err)
		}
		if crlf, err := br.Peek(2); err != nil {
			return nil, nil, unexpected(err)
		} else if crlf[0] != '\r' || crlf[1] != '\n' {
			return nil, nil, fmt.Errorf("%w: data block after %q not ended by \\r\\n", ErrBadReply, line)
		}
		br.Discard(2)
		return line, nil, fmt.Errorf("%w: %q (at most %d bytes accepted)", ErrValueTooLarge, line, maxValue)
	}
	if n < 0 || n > maxValue {
		return nil, nil, fmt.Errorf("%w: %q (at most %d bytes accepted)", ErrBadReply, line, maxValue)
	}
	buf := rr.value
	if cap(buf) < n+2 {
		buf = make([]byte, n+2)
		if n+2 <= keepValueBuf {
			rr.value = buf
		}
	}
	buf = buf[:n+2]
	if _, err := io.ReadFull(br, buf); err != nil {
		return nil, nil, unexpected(err)
	}
	if buf[n] != '\r' || buf[n+1] != '\n' {
		return nil, nil, fmt.Errorf("%w: data block after %q not ended by \\r\\n", ErrBadReply, line)
	}
	return line, buf[:n:n], nil
}

// valueSize reports whether line is a reply with a data block (VALUE or
// VA) and the block's length, -1 if the line gives none that is usable.
func valueSize(line []byte) (n int, ok bool) {
	code, rest := nextToken(line)
	switch string(code) {
	case "VALUE":
		v, ok := ParseValueLine(line)
		if !ok {
			return -1, true
		}
		return v.Size, true
	case "VA":
		tok, _ := nextToken(rest)
		size, ok := atou(tok, maxInt)
		if !ok {
			return -1, true
		}
		return int(size), true
	}
	return 0, false
}

// ValueLine is a parsed "VALUE <key> <flags> <bytes> [<cas>]" line.
type ValueLine struct {
	Key    []byte // aliases the line
	Flags  uint32
	Size   int // <bytes>
	CAS    uint64
	HasCAS bool // the line carried a <cas> (a gets or gats reply)
}

// ParseValueLine parses a VALUE reply line (without "\r\n"). ok is false
// for any other line, and for one whose numbers are not plain decimal
// digits within their field's range. It does not allocate.
func ParseValueLine(line []byte) (v ValueLine, ok bool) {
	code, rest := nextToken(line)
	if string(code) != "VALUE" {
		return ValueLine{}, false
	}
	var flags, size, cas []byte
	v.Key, rest = nextToken(rest)
	flags, rest = nextToken(rest)
	size, rest = nextToken(rest)
	cas, rest = nextToken(rest)
	if extra, _ := nextToken(rest); len(v.Key) == 0 || len(extra) > 0 {
		return ValueLine{}, false
	}
	f, ok1 := atou(flags, 1<<32-1)
	n, ok2 := atou(size, maxInt)
	if !ok1 || !ok2 {
		return ValueLine{}, false
	}
	v.Flags, v.Size = uint32(f), int(n)
	if len(cas) > 0 {
		if v.CAS, ok = atou(cas, 1<<64-1); !ok {
			return ValueLine{}, false
		}
		v.HasCAS = true
	}
	return v, true
}

// MetaReplyFlag returns the token of the return flag f in a meta reply
// line ("VA <bytes> <flag>*", "HD <flag>*", "EN", "NF <flag>*" ...): for
// f 'c' and the line "VA 2 f5 c123", it returns "123". ok is false when
// the line does not carry f. token aliases line.
func MetaReplyFlag(line []byte, f byte) (token []byte, ok bool) {
	code, rest := nextToken(line)
	if string(code) == "VA" {
		_, rest = nextToken(rest) // <bytes>
	}
	for {
		var tok []byte
		if tok, rest = nextToken(rest); len(tok) == 0 {
			return nil, false
		}
		if tok[0] == f {
			return tok[1:], true
		}
	}
}

const maxInt = uint64(^uint(0) >> 1)

// atou parses b as plain decimal digits, at most limit. Unlike the request
// parser's scan (memcached's strtoul quirks), a reply is what a server
// wrote, so anything else is refused.
func atou(b []byte, limit uint64) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (limit-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}
