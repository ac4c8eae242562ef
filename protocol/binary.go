package protocol

import (
	"encoding/binary"
	"io"
)

// The binary protocol, as memcached 1.6.18 serves it (protocol_binary.h,
// proto_bin.c). A connection speaks it when its first byte is BinaryMagic.
// Every packet is a 24-byte header, then extras, key and value:
//
//	request header:  magic 0x80 | opcode | keylen (2) | extlen | datatype | vbucket (2)
//	                 | bodylen (4) | opaque (4) | cas (8)          (big-endian)
//	response header: magic 0x81 | opcode | keylen (2) | extlen | datatype 0 | status (2)
//	                 | bodylen (4) | opaque (4) | cas (8)
//
// bodylen counts extras, key and value. The shapes memcached accepts, one
// line per opcode family (Q: the quiet variant; anything else is
// "Invalid arguments" and a closed connection):
//
//	get getq getk getkq          extlen 0, keylen > 0, bodylen == keylen
//	set setq add addq            extras flags(4) exptime(4), keylen > 0, value = the rest
//	replace replaceq
//	append appendq               extlen 0, keylen > 0, value = the rest
//	prepend prependq
//	delete deleteq               extlen 0, keylen > 0, bodylen == keylen
//	increment incrementq         extras delta(8) initial(8) exptime(4), keylen > 0, no value
//	decrement decrementq         (exptime 0xffffffff: do not create a missing key)
//	touch gat gatq gatk gatkq    extras exptime(4), keylen > 0 (bodylen unchecked)
//	flush flushq                 extlen 0 or 4 (delay), keylen 0, no value
//	noop version quit quitq      nothing
//	stat                         extlen 0; the key, if any, names the group
//
// Unknown opcodes (verbosity among them: memcached 1.6.18 does not serve
// it) are answered "Unknown command" and their body is skipped.
//
// Where it differs from memcached: memcached skips bodylen bytes after an
// unknown command's extras and key, so that a verbosity with its 4-byte
// extras swallows the first 4 bytes of the next request; Reader skips the
// rest of the body only. An exptime or flush delay over 2^31-1 (an
// absolute time after January 2038) is taken as 2^31-1, the largest the
// text protocol's twin of the request can carry.

// BinaryMagic is the first byte of every binary request.
const BinaryMagic = 0x80

const (
	binaryResMagic  = 0x81
	binaryHeaderLen = 24
	binaryMaxExtras = 20 // memcached's BIN_MAX_EXTLEN: longer extras are not looked at
)

// Opcode is a binary request's command.
type Opcode uint8

// The opcodes memcached 1.6.18 serves.
const (
	OpGet        Opcode = 0x00
	OpSet        Opcode = 0x01
	OpAdd        Opcode = 0x02
	OpReplace    Opcode = 0x03
	OpDelete     Opcode = 0x04
	OpIncrement  Opcode = 0x05
	OpDecrement  Opcode = 0x06
	OpQuit       Opcode = 0x07
	OpFlush      Opcode = 0x08
	OpGetQ       Opcode = 0x09
	OpNoop       Opcode = 0x0a
	OpVersion    Opcode = 0x0b
	OpGetK       Opcode = 0x0c
	OpGetKQ      Opcode = 0x0d
	OpAppend     Opcode = 0x0e
	OpPrepend    Opcode = 0x0f
	OpStat       Opcode = 0x10
	OpSetQ       Opcode = 0x11
	OpAddQ       Opcode = 0x12
	OpReplaceQ   Opcode = 0x13
	OpDeleteQ    Opcode = 0x14
	OpIncrementQ Opcode = 0x15
	OpDecrementQ Opcode = 0x16
	OpQuitQ      Opcode = 0x17
	OpFlushQ     Opcode = 0x18
	OpAppendQ    Opcode = 0x19
	OpPrependQ   Opcode = 0x1a
	OpTouch      Opcode = 0x1c
	OpGAT        Opcode = 0x1d
	OpGATQ       Opcode = 0x1e
	OpGATK       Opcode = 0x23
	OpGATKQ      Opcode = 0x24

	opVerbosity     Opcode = 0x1b // in the protocol, not served by memcached 1.6.18
	opSASLListMechs Opcode = 0x20 // SASL: memcached without -S answers "Unknown command"
	opSASLAuth      Opcode = 0x21
	opSASLStep      Opcode = 0x22
)

// quietOf maps each quiet opcode to its loud twin.
var quietOf = map[Opcode]Opcode{
	OpGetQ: OpGet, OpGetKQ: OpGetK, OpSetQ: OpSet, OpAddQ: OpAdd, OpReplaceQ: OpReplace,
	OpDeleteQ: OpDelete, OpIncrementQ: OpIncrement, OpDecrementQ: OpDecrement,
	OpQuitQ: OpQuit, OpFlushQ: OpFlush, OpAppendQ: OpAppend, OpPrependQ: OpPrepend,
	OpGATQ: OpGAT, OpGATKQ: OpGATK,
}

// opBase is quietOf as an array, so that the request path does no map lookup.
var opBase = func() (t [256]Opcode) {
	for i := range t {
		t[i] = Opcode(i)
	}
	for q, loud := range quietOf {
		t[q] = loud
	}
	return t
}()

// Base returns the opcode without its quiet variant: OpGet for OpGetQ.
func (op Opcode) Base() Opcode { return opBase[op] }

// Quiet reports whether op is a quiet variant (getq, setq, ...): memcached
// sends its reply only when it is an error, or a hit of a get or gat.
func (op Opcode) Quiet() bool { return opBase[op] != op }

// BinaryStatus is a binary response's status.
type BinaryStatus uint16

// The statuses memcached 1.6.18 sends.
const (
	StatusOK             BinaryStatus = 0x00
	StatusKeyNotFound    BinaryStatus = 0x01
	StatusKeyExists      BinaryStatus = 0x02
	StatusTooLarge       BinaryStatus = 0x03
	StatusInvalid        BinaryStatus = 0x04
	StatusNotStored      BinaryStatus = 0x05
	StatusNonNumeric     BinaryStatus = 0x06
	StatusUnknownCommand BinaryStatus = 0x81
	StatusOutOfMemory    BinaryStatus = 0x82
)

// statusText is the body memcached sends with an error status.
func statusText(s BinaryStatus) string {
	switch s {
	case StatusKeyNotFound:
		return "Not found"
	case StatusKeyExists:
		return "Data exists for key."
	case StatusTooLarge:
		return "Too large."
	case StatusInvalid:
		return "Invalid arguments"
	case StatusNotStored:
		return "Not stored."
	case StatusNonNumeric:
		return "Non-numeric server-side value for incr or decr"
	case StatusUnknownCommand:
		return "Unknown command"
	case StatusOutOfMemory:
		return "Out of memory"
	}
	return ""
}

// binaryError is a binary request that is answered with an error status
// (none for a bad magic byte) before it reaches a command.
type binaryError struct {
	status BinaryStatus
	fatal  bool // close the connection after the reply
	reply  bool
}

func (e *binaryError) Error() string {
	if !e.reply {
		return "protocol: not a binary request"
	}
	return "protocol: binary " + statusText(e.status)
}

var (
	errBinMagic      = &binaryError{fatal: true}
	errBinInvalid    = &binaryError{status: StatusInvalid, fatal: true, reply: true}
	errBinUnknown    = &binaryError{status: StatusUnknownCommand, reply: true}
	errBinBadLengths = &binaryError{status: StatusUnknownCommand, fatal: true, reply: true}
)

// BinaryRequest is one binary request. A Reader fills the same
// BinaryRequest on every ReadBinary; Key points into the request itself
// and stays valid until the next ReadBinary; Value is freshly allocated
// and owned by the caller.
type BinaryRequest struct {
	Opcode  Opcode
	Key     []byte // at most KeyMax bytes
	Opaque  uint32 // echoed in every response
	CAS     uint64
	Flags   uint32 // set, add, replace
	Exptime uint32 // set, add, replace, touch, gat; flush's delay; incr/decr: 0xffffffff = do not create
	Delta   uint64 // incr/decr
	Initial uint64 // incr/decr: the value a missing key is created with
	Value   []byte // set, add, replace, append, prepend

	keyBuf [KeyMax]byte
}

// IsBinary reports whether the stream starts with a binary request, by
// peeking at its first byte; it blocks until that byte arrives. It is
// false, with the error, when the stream ends or fails first.
func (r *Reader) IsBinary() (bool, error) {
	b, err := r.br.Peek(1)
	if err != nil {
		return false, err
	}
	return b[0] == BinaryMagic, nil
}

// ReadBinary reads the next binary request into req. It returns io.EOF
// when the stream ends between requests and io.ErrUnexpectedEOF inside
// one. Other errors are answered with Writer.BinaryError, and then the
// connection is closed if Fatal(err). ErrTooLarge is a storage value over
// Limits.MaxItemSize, read and discarded; req is filled but for Value.
//
// Like memcached, ReadBinary waits for a request's extras and key before
// it judges the request, and consumes a value only for the commands that
// have one: bytes beyond the extras and key of a touch or a stat whose
// bodylen announces more are read as the next request.
func (r *Reader) ReadBinary(req *BinaryRequest) error {
	*req = BinaryRequest{Key: req.keyBuf[:0]}
	h, err := r.br.Peek(binaryHeaderLen)
	if err != nil {
		if len(h) > 0 {
			return unexpected(err)
		}
		return err
	}
	if h[0] != BinaryMagic {
		return errBinMagic
	}
	req.Opcode = Opcode(h[1])
	keylen := int(binary.BigEndian.Uint16(h[2:]))
	extlen := int(h[4])
	bodylen := int64(binary.BigEndian.Uint32(h[8:]))
	req.Opaque = binary.BigEndian.Uint32(h[12:])
	req.CAS = binary.BigEndian.Uint64(h[16:])
	r.br.Discard(binaryHeaderLen) // cannot fail: the bytes are buffered

	var ext [binaryMaxExtras]byte
	if keylen > KeyMax {
		if _, err := r.br.Discard(extlen + keylen); err != nil {
			return unexpected(err)
		}
	} else {
		b, err := r.br.Peek(extlen + keylen) // at most 505 bytes: they fit the buffer
		if err != nil {
			return unexpected(err)
		}
		copy(ext[:], b[:extlen])
		req.Key = req.keyBuf[:copy(req.keyBuf[:], b[extlen:])]
		r.br.Discard(extlen + keylen)
	}
	if int64(keylen) > bodylen || int64(keylen+extlen) > bodylen {
		return errBinBadLengths
	}
	if keylen > KeyMax {
		return errBinInvalid
	}
	rest := bodylen - int64(extlen+keylen)
	if !binaryShapeOK(req.Opcode, extlen, keylen, rest) {
		return errBinInvalid
	}
	switch req.Opcode.Base() {
	case OpSet, OpAdd, OpReplace:
		req.Flags = binary.BigEndian.Uint32(ext[0:])
		req.Exptime = binary.BigEndian.Uint32(ext[4:])
		return r.readBinaryValue(req, rest)
	case OpAppend, OpPrepend:
		return r.readBinaryValue(req, rest)
	case OpIncrement, OpDecrement:
		req.Delta = binary.BigEndian.Uint64(ext[0:])
		req.Initial = binary.BigEndian.Uint64(ext[8:])
		req.Exptime = binary.BigEndian.Uint32(ext[16:])
	case OpTouch, OpGAT, OpGATK, OpFlush:
		if extlen == 4 {
			req.Exptime = binary.BigEndian.Uint32(ext[0:])
		}
	case OpGet, OpGetK, OpDelete, OpNoop, OpVersion, OpQuit, OpStat:
	default: // unknown, or SASL, which memcached serves only with -S
		if _, err := r.br.Discard(int(rest)); err != nil {
			return unexpected(err)
		}
		return errBinUnknown
	}
	return nil
}

// binaryShapeOK is memcached's check of a request's lengths
// (dispatch_bin_command); rest is bodylen less extras and key.
func binaryShapeOK(op Opcode, extlen, keylen int, rest int64) bool {
	switch op.Base() {
	case OpGet, OpGetK, OpDelete:
		return extlen == 0 && keylen > 0 && rest == 0
	case OpSet, OpAdd, OpReplace:
		return extlen == 8 && keylen > 0
	case OpAppend, OpPrepend:
		return extlen == 0 && keylen > 0
	case OpIncrement, OpDecrement:
		return extlen == 20 && keylen > 0 && rest == 0
	case OpTouch, OpGAT, OpGATK:
		return extlen == 4 && keylen > 0
	case OpFlush:
		return keylen == 0 && rest == 0 && (extlen == 0 || extlen == 4)
	case OpNoop, OpVersion, OpQuit, opSASLListMechs:
		return extlen == 0 && keylen == 0 && rest == 0
	case OpStat:
		return extlen == 0
	case opSASLAuth, opSASLStep:
		return extlen == 0 && keylen > 0
	}
	return true
}

// readBinaryValue reads a storage command's value of n bytes, or discards
// it when it is over the item size limit.
func (r *Reader) readBinaryValue(req *BinaryRequest, n int64) error {
	if n > int64(r.maxItem) {
		if _, err := r.br.Discard(int(n)); err != nil {
			return unexpected(err)
		}
		return ErrTooLarge
	}
	req.Value = make([]byte, n)
	if _, err := io.ReadFull(r.br, req.Value); err != nil {
		return unexpected(err)
	}
	return nil
}

// binaryHeader starts a response to req in the Writer's free buffer: the
// header, extras and key, with room reserved for n more bytes; the caller
// appends the value and writes the result, or writes the value after it.
func (w *Writer) binaryHeader(req *BinaryRequest, status BinaryStatus, cas uint64, extras, key []byte, valueLen, n int) []byte {
	b := w.buf(binaryHeaderLen + len(extras) + len(key) + n)
	b = append(b, binaryResMagic, byte(req.Opcode))
	b = binary.BigEndian.AppendUint16(b, uint16(len(key)))
	b = append(b, byte(len(extras)), 0)
	b = binary.BigEndian.AppendUint16(b, uint16(status))
	b = binary.BigEndian.AppendUint32(b, uint32(len(extras)+len(key)+valueLen))
	b = binary.BigEndian.AppendUint32(b, req.Opaque)
	b = binary.BigEndian.AppendUint64(b, cas)
	return append(append(b, extras...), key...)
}

// binaryPacket writes one response to req: header, extras, key, value.
func (w *Writer) binaryPacket(req *BinaryRequest, status BinaryStatus, cas uint64, extras, key, value []byte) {
	b := w.binaryHeader(req, status, cas, extras, key, len(value), 0)
	if len(b)+len(value) <= cap(b) {
		w.bw.Write(append(b, value...))
		return
	}
	w.bw.Write(b)
	w.bw.Write(value)
}

// binaryStatus writes a response with status s and no extras or key: an
// empty success, or an error with msg as its body (memcached's text of
// the status if msg is empty).
func (w *Writer) binaryStatus(req *BinaryRequest, s BinaryStatus, msg []byte) {
	if s != StatusOK && len(msg) == 0 {
		text := statusText(s)
		b := w.binaryHeader(req, s, 0, nil, nil, len(text), len(text))
		w.bw.Write(append(b, text...))
		return
	}
	w.binaryPacket(req, s, 0, nil, nil, msg)
}

// BinaryOK writes an empty success response to req (noop, quit).
func (w *Writer) BinaryOK(req *BinaryRequest) { w.binaryStatus(req, StatusOK, nil) }

// BinaryError writes the response to a request that ReadBinary could not
// return: the error status memcached sends, or ErrTooLarge's "Too large."
// (ReadBinary's, or the caller's for an item over its own limit). It
// writes nothing for a request whose first byte is not BinaryMagic
// (memcached just closes) or for an I/O error.
func (w *Writer) BinaryError(req *BinaryRequest, err error) {
	switch e := err.(type) {
	case *binaryError:
		if e.reply {
			w.binaryStatus(req, e.status, nil)
		}
	case *protoError:
		if e == errTooLarge {
			w.binaryStatus(req, StatusTooLarge, nil)
		}
	}
}

var opNames = map[Opcode]string{
	OpGet: "get", OpSet: "set", OpAdd: "add", OpReplace: "replace", OpDelete: "delete",
	OpIncrement: "increment", OpDecrement: "decrement", OpQuit: "quit", OpFlush: "flush",
	OpGetQ: "getq", OpNoop: "noop", OpVersion: "version", OpGetK: "getk", OpGetKQ: "getkq",
	OpAppend: "append", OpPrepend: "prepend", OpStat: "stat", OpSetQ: "setq", OpAddQ: "addq",
	OpReplaceQ: "replaceq", OpDeleteQ: "deleteq", OpIncrementQ: "incrementq",
	OpDecrementQ: "decrementq", OpQuitQ: "quitq", OpFlushQ: "flushq", OpAppendQ: "appendq",
	OpPrependQ: "prependq", opVerbosity: "verbosity", OpTouch: "touch", OpGAT: "gat",
	OpGATQ: "gatq", opSASLListMechs: "sasl_list_mechs", opSASLAuth: "sasl_auth",
	opSASLStep: "sasl_step", OpGATK: "gatk", OpGATKQ: "gatkq",
}

// String returns the opcode's name in protocol_binary.h, lower case
// ("getkq"), or its number for an unknown one ("0x42").
func (op Opcode) String() string {
	if s, ok := opNames[op]; ok {
		return s
	}
	const hex = "0123456789abcdef"
	return "0x" + string([]byte{hex[op>>4], hex[op&15]})
}
