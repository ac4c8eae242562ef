package protocol

import (
	"bufio"
	"bytes"
	"io"
)

const (
	// MaxLineLen is how many bytes of a request line may arrive without a
	// newline before memcached gives up on it (closing the connection,
	// with no reply) unless it is a multi-key get. A line whose newline is
	// already buffered is parsed whatever its length, as in memcached.
	MaxLineLen = 2048

	// DefaultMaxItemSize is the default Limits.MaxItemSize (memcached -I 1m).
	DefaultMaxItemSize = 1 << 20

	// DefaultMaxGetLine is the default Limits.MaxGetLine.
	DefaultMaxGetLine = 64 << 10

	// readBufSize matches memcached's READ_BUFFER_SIZE.
	readBufSize = 16 << 10
)

// Limits bounds what a Reader accepts. The zero value gives memcached's
// defaults.
type Limits struct {
	// MaxItemSize is the largest storage payload accepted; larger ones are
	// read, discarded and answered with ErrTooLarge. 0 means 1 MiB.
	// (memcached's real limit is 1 MiB minus its ~50-byte item header and
	// the key; this one counts the payload alone.)
	MaxItemSize int

	// MaxGetLine is the longest get/gets/gat/gats line accepted, in bytes
	// without the newline; longer ones are ErrLineTooLong. memcached has no
	// limit there; this one bounds memory. 0 means 64 KiB; values below
	// MaxLineLen mean MaxLineLen.
	MaxGetLine int
}

// Reader reads requests from a memcached text-protocol stream. It is not
// safe for concurrent use.
type Reader struct {
	br         *bufio.Reader
	maxItem    int
	maxGetLine int
	long       []byte // a get line longer than br's buffer, reused
	data       []byte // a data block that was not wholly buffered, reused
}

// keepLongLine is the largest long-line buffer a Reader keeps from one
// request to the next.
const keepLongLine = 64 << 10

// NewReader returns a Reader reading from r with a 16 KiB buffer.
func NewReader(r io.Reader, lim Limits) *Reader {
	rd := &Reader{br: bufio.NewReaderSize(r, readBufSize), maxItem: lim.MaxItemSize, maxGetLine: lim.MaxGetLine}
	if rd.maxItem <= 0 {
		rd.maxItem = DefaultMaxItemSize
	}
	if rd.maxGetLine <= 0 {
		rd.maxGetLine = DefaultMaxGetLine
	}
	rd.maxGetLine = max(rd.maxGetLine, MaxLineLen)
	return rd
}

// Reset discards any buffered data and makes r read from rd, keeping its
// buffers, so that a server can pool Readers across connections.
func (r *Reader) Reset(rd io.Reader) {
	r.br.Reset(rd)
	r.long = r.long[:0]
}

// Buffered returns the number of bytes already read from the stream and
// not yet consumed. A server flushes its replies when it reaches 0: every
// pipelined request already received has then been answered.
func (r *Reader) Buffered() int { return r.br.Buffered() }

// Read reads the next request into req: the line and, for storage
// commands, the data block. It returns io.EOF when the stream ends between
// requests and io.ErrUnexpectedEOF when it ends inside one. Protocol errors
// leave the stream positioned where memcached would continue, so the caller
// writes the reply (Writer.Error) and reads on unless Fatal(err).
func (r *Reader) Read(req *Request) error {
	if cap(r.long) > keepLongLine {
		r.long = nil // the last request is answered: do not pin its size
	}
	if cap(r.data) > keepLongLine {
		r.data = nil
	}
	line, err := r.readLine()
	if err != nil {
		req.reset()
		return err
	}
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	err = Parse(line, req)
	if req.dataLen < 0 {
		return err
	}
	n := req.dataLen
	if r.br.Buffered() < n+2 {
		req.pin()
	}
	if err != nil { // ms after <datalen>: memcached swallows the block unchecked
		if _, derr := r.br.Discard(n + 2); derr != nil {
			return unexpected(derr)
		}
		return err
	}
	// Classic commands hide these errors under noreply; ms never does (its
	// q flag does not set Noreply).
	hush := req.Noreply
	if n > r.maxItem {
		if _, err := r.br.Discard(n + 2); err != nil {
			return unexpected(err)
		}
		return quiet(errTooLarge, hush)
	}
	var buf []byte
	if r.br.Buffered() >= n+2 {
		// The whole block is in the read buffer (a small set's usual
		// case): alias it, as the line does.
		buf, _ = r.br.Peek(n + 2)
		r.br.Discard(n + 2)
	} else {
		if cap(r.data) < n+2 {
			r.data = make([]byte, n+2)
		}
		buf = r.data[:n+2]
		if _, err := io.ReadFull(r.br, buf); err != nil {
			return unexpected(err)
		}
	}
	if buf[n] != '\r' || buf[n+1] != '\n' {
		return quiet(errBadChunk, hush)
	}
	req.Data = buf[:n:n]
	return nil
}

// readLine returns the next line without its '\n'. It aliases the buffer.
//
// Like memcached's try_read_command_ascii, it gives up on a line once more
// than MaxLineLen bytes are buffered without a newline, unless the line
// starts with a multi-key get; those may grow to maxGetLine.
func (r *Reader) readLine() ([]byte, error) {
	for seen := 0; ; { // bytes known to hold no newline: trickled input is scanned once
		buf, _ := r.br.Peek(r.br.Buffered())
		if i := bytes.IndexByte(buf[seen:], '\n'); i >= 0 {
			i += seen
			if i > r.maxGetLine {
				return nil, errLineLong
			}
			r.br.Discard(i + 1) // cannot fail: the bytes are buffered
			return buf[:i], nil
		}
		seen = len(buf)
		if len(buf) > MaxLineLen {
			if !isGetPrefix(buf) || len(buf) > r.maxGetLine {
				return nil, errLineLong
			}
			if len(buf) == r.br.Size() {
				return r.readLongLine(buf)
			}
		}
		if _, err := r.br.Peek(len(buf) + 1); err != nil {
			if err == io.EOF && len(buf) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// readLongLine copies a get line that does not fit the read buffer into
// r.long, up to maxGetLine bytes.
func (r *Reader) readLongLine(head []byte) ([]byte, error) {
	r.long = append(r.long[:0], head...)
	r.br.Discard(len(head))
	for {
		chunk, err := r.br.ReadSlice('\n')
		if len(r.long)+len(chunk) > r.maxGetLine+1 {
			return nil, errLineLong
		}
		r.long = append(r.long, chunk...)
		switch err {
		case nil:
			return r.long[:len(r.long)-1], nil
		case bufio.ErrBufferFull:
		default:
			return nil, unexpected(err)
		}
	}
}

// isGetPrefix reports whether an unterminated line may keep growing:
// memcached allows it for "get " and "gets " after at most 100 spaces; the
// touch variants "gat " and "gats " are allowed here too.
func isGetPrefix(b []byte) bool {
	i := 0
	for i < len(b) && b[i] == ' ' {
		i++
	}
	if i > 100 {
		return false
	}
	b = b[i:]
	for _, p := range [...]string{"get ", "gets ", "gat ", "gats "} {
		if len(b) >= len(p) && string(b[:len(p)]) == p {
			return true
		}
	}
	return false
}
