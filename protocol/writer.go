package protocol

import (
	"bufio"
	"encoding/base64"
	"errors"
	"io"
	"strconv"
)

// Status is a fixed reply line.
type Status uint8

// Replies without arguments.
const (
	Stored    Status = iota + 1 // STORED
	NotStored                   // NOT_STORED
	Exists                      // EXISTS
	NotFound                    // NOT_FOUND
	Deleted                     // DELETED
	Touched                     // TOUCHED
	End                         // END
	OK                          // OK
	MetaNoop                    // MN
)

var statusLines = [...]string{
	"", "STORED\r\n", "NOT_STORED\r\n", "EXISTS\r\n", "NOT_FOUND\r\n",
	"DELETED\r\n", "TOUCHED\r\n", "END\r\n", "OK\r\n", "MN\r\n",
}

// String returns the reply word.
func (s Status) String() string {
	if s == 0 || int(s) >= len(statusLines) {
		return "unknown"
	}
	l := statusLines[s]
	return l[:len(l)-2]
}

// writeBufSize is the reply buffer. Values larger than what is free are
// written through without copying.
const writeBufSize = 64 << 10

// Writer writes replies into a buffer; nothing reaches the underlying
// writer before Flush (or before the buffer fills). Write errors are sticky
// and reported by Flush. It is not safe for concurrent use.
type Writer struct {
	bw *bufio.Writer
	va bool // MetaValueStart opened a VA line: MetaEnd writes the block
}

// NewWriter returns a Writer with a 64 KiB buffer.
func NewWriter(w io.Writer) *Writer { return &Writer{bw: bufio.NewWriterSize(w, writeBufSize)} }

// Reset discards any unflushed replies and makes w write to wr, keeping
// its buffer.
func (w *Writer) Reset(wr io.Writer) {
	w.bw.Reset(wr)
	w.va = false
}

// Buffered returns the number of bytes written and not yet flushed.
func (w *Writer) Buffered() int { return w.bw.Buffered() }

// Available returns how many bytes can be written before the buffer is
// flushed to the underlying writer.
func (w *Writer) Available() int { return w.bw.Available() }

// Flush writes the buffered replies and returns the first write error.
func (w *Writer) Flush() error { return w.bw.Flush() }

// buf returns the free part of the buffer, emptied to hold at least n
// bytes, to be appended to and handed to w.bw.Write right away. Appending
// in place keeps the hot paths free of allocations and of fmt.
func (w *Writer) buf(n int) []byte {
	if w.bw.Available() < n {
		w.bw.Flush() // an error sticks in w.bw; Flush reports it
	}
	return w.bw.AvailableBuffer()
}

// Value writes a get hit: "VALUE <key> <flags> <bytes>\r\n<data>\r\n".
func (w *Writer) Value(key []byte, flags uint32, data []byte) {
	w.value(key, flags, data, 0, false)
}

// ValueCAS writes a gets hit: "VALUE <key> <flags> <bytes> <cas>\r\n<data>\r\n".
func (w *Writer) ValueCAS(key []byte, flags uint32, data []byte, cas uint64) {
	w.value(key, flags, data, cas, true)
}

func (w *Writer) value(key []byte, flags uint32, data []byte, cas uint64, withCAS bool) {
	b := w.buf(len(key) + 56)
	b = append(b, "VALUE "...)
	b = append(b, key...)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(flags), 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(len(data)), 10)
	if withCAS {
		b = append(b, ' ')
		b = strconv.AppendUint(b, cas, 10)
	}
	b = append(b, "\r\n"...)
	w.block(b, data)
}

// block writes line, then data and "\r\n", in one copy when it all fits.
func (w *Writer) block(line, data []byte) {
	if len(line)+len(data)+2 <= cap(line) {
		line = append(line, data...)
		w.bw.Write(append(line, "\r\n"...))
		return
	}
	w.bw.Write(line)
	w.bw.Write(data)
	w.bw.WriteString("\r\n")
}

// Status writes a fixed reply line such as "STORED\r\n".
func (w *Writer) Status(s Status) {
	if s == 0 || int(s) >= len(statusLines) {
		w.Error(ServerError("unknown status"))
		return
	}
	w.bw.WriteString(statusLines[s])
}

// Uint writes "<n>\r\n", the reply to incr and decr.
func (w *Writer) Uint(n uint64) {
	b := strconv.AppendUint(w.buf(22), n, 10)
	w.bw.Write(append(b, "\r\n"...))
}

// Line writes s followed by "\r\n" ("VERSION 1.6.18", "RESET", ...).
func (w *Writer) Line(s string) {
	w.bw.WriteString(s)
	w.bw.WriteString("\r\n")
}

// Stat writes "STAT <name> <value>\r\n".
func (w *Writer) Stat(name, value string) {
	b := w.buf(len(name) + len(value) + 8)
	b = append(b, "STAT "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = append(b, value...)
	w.bw.Write(append(b, "\r\n"...))
}

// StatUint writes "STAT <name> <v>\r\n" without allocating. Every
// numeric field of memcached's stats is unsigned.
func (w *Writer) StatUint(name string, v uint64) {
	b := w.buf(len(name) + 30)
	b = append(b, "STAT "...)
	b = append(b, name...)
	b = append(b, ' ')
	w.bw.Write(append(strconv.AppendUint(b, v, 10), "\r\n"...))
}

// Error writes the reply for err: the exact memcached line for protocol
// errors, nothing for errors hidden by noreply (see Quiet) or for
// ErrLineTooLong (memcached just closes), and "SERVER_ERROR <text>" for any
// other error. Nothing is written for nil.
func (w *Writer) Error(err error) {
	switch e := err.(type) { // the common cases, without reflection
	case nil, quietError:
		return
	case *protoError:
		if e.reply != "" {
			w.Line(e.reply)
		}
		return
	}
	if Quiet(err) {
		return
	}
	var pe *protoError
	if errors.As(err, &pe) {
		if pe.reply != "" {
			w.Line(pe.reply)
		}
		return
	}
	// Keep the reply on one line whatever the error text holds.
	b := append(w.buf(64), "SERVER_ERROR "...)
	for _, c := range []byte(err.Error()) {
		if c < ' ' || c == 0x7f {
			c = ' '
		}
		b = append(b, c)
	}
	w.bw.Write(append(b, "\r\n"...))
}

// MetaStart begins a meta reply line with its code: "HD", "EN", "NF",
// "NS", "EX", "MN" (for "VA" use MetaValueStart). Follow it with the
// Meta* flag methods and end it with MetaEnd.
func (w *Writer) MetaStart(code string) {
	w.va = false
	w.bw.WriteString(code)
}

// MetaValueStart begins "VA <size>"; MetaEnd then writes the data block.
func (w *Writer) MetaValueStart(size int) {
	w.va = true
	b := append(w.buf(24), "VA "...)
	w.bw.Write(strconv.AppendInt(b, int64(size), 10))
}

// MetaFlag writes " <f>" (a flag without a token, e.g. W, X, Z).
func (w *Writer) MetaFlag(f byte) {
	w.bw.WriteByte(' ')
	w.bw.WriteByte(f)
}

// MetaInt writes " <f><v>" (e.g. t-1).
func (w *Writer) MetaInt(f byte, v int64) {
	b := append(w.buf(24), ' ', f)
	w.bw.Write(strconv.AppendInt(b, v, 10))
}

// MetaUint writes " <f><v>" (e.g. c, f, s).
func (w *Writer) MetaUint(f byte, v uint64) {
	b := append(w.buf(24), ' ', f)
	w.bw.Write(strconv.AppendUint(b, v, 10))
}

// MetaBytes writes " <f><v>" (e.g. k with the key, O with the opaque).
func (w *Writer) MetaBytes(f byte, v []byte) {
	b := append(w.buf(len(v)+2), ' ', f)
	w.bw.Write(append(b, v...))
}

// MetaKey writes the k return flag as memcached does: " k<key>", or for a
// key that arrived base64-encoded (Meta.Flags.Has('b')) " k<base64> b".
func (w *Writer) MetaKey(key []byte, b64 bool) {
	if !b64 {
		w.MetaBytes('k', key)
		return
	}
	b := append(w.buf(base64.StdEncoding.EncodedLen(len(key))+6), ' ', 'k')
	b = base64.StdEncoding.AppendEncode(b, key)
	w.bw.Write(append(b, ' ', 'b'))
}

// MetaEnd ends the meta reply line with "\r\n" and, after MetaValueStart
// (or whenever data is not nil), writes data and "\r\n".
func (w *Writer) MetaEnd(data []byte) {
	if !w.va && data == nil {
		w.bw.WriteString("\r\n")
		return
	}
	w.va = false
	w.block(append(w.buf(2), "\r\n"...), data)
}
