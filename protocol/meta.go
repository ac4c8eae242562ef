package protocol

import "strconv"

// MetaFlags is the set of single-letter flags present on a meta command:
// bit i for 'a'+i, bit 26+i for 'A'+i.
type MetaFlags uint64

func flagBit(c byte) MetaFlags {
	switch {
	case c >= 'a' && c <= 'z':
		return 1 << (c - 'a')
	case c >= 'A' && c <= 'Z':
		return 1 << (26 + c - 'A')
	}
	return 0
}

// Has reports whether flag c ('a'..'z' or 'A'..'Z') was present.
func (f MetaFlags) Has(c byte) bool { return f&flagBit(c) != 0 }

// Meta carries the flags of a meta command. Tokens alias the Reader's buffer.
//
// memcached 1.6.18 accepts the same flag letters on mg, ms, md and ma
// (b c f h k l s t u v q I O P L N T R F C M J D) and ignores those a
// command does not use; any other letter is "CLIENT_ERROR invalid flag".
// A flag's first byte names it; what follows is its token (so "kfoo" is k).
type Meta struct {
	Flags       MetaFlags // which single-letter flags were present; 'b' means Key was base64 (re-encode it in replies)
	Opaque      []byte    // O<token>, without the O; at most 31 bytes
	TTL         int64     // T<token> (mg: update TTL; ms/ma: exptime); truncated to int32 as memcached does
	ClientFlags uint32    // F<token> (ms)
	CAS         uint64    // C<token> (compare CAS)
	Vivify      int64     // N<token> (mg/ma: autovivify on miss with this TTL)
	Recache     int64     // R<token> (mg: win a recache token if the TTL is below this)
	Initial     uint64    // J<token> (ma initial value, default 0)
	Delta       uint64    // D<token> (ma delta, default 1)
	Mode        byte      // M<token>: ms E A P R S (default S); ma I D (default I; + and - normalised to I and D)

	order  [maxTokens]byte
	norder uint8
}

// Order returns the flag letters in the order the client sent them.
// memcached writes return flags (k, O, c, f, s, t, ...) in this order, so a
// byte-exact reply walks Order rather than testing Flags letter by letter.
func (m *Meta) Order() []byte { return m.order[:m.norder] }

// mg <key> <flag>*
// md <key> <flag>*
// ma <key> <flag>*
// mn [<anything>]
// (ms and me below.) rest is the line after the two-letter command.
func parseMeta(c byte, rest []byte, req *Request) error {
	var cmd Command
	switch c {
	case 'n': // mn: flags, if any, are ignored
		req.Command = CmdMetaNoop
		return nil
	case 'e':
		return parseMe(rest, req)
	case 'g':
		cmd = CmdMetaGet
	case 's':
		cmd = CmdMetaSet
	case 'd':
		cmd = CmdMetaDelete
	case 'a':
		cmd = CmdMetaArith
	default:
		return errUnknown
	}
	var t tokens
	t.split(rest)
	if t.n < 1 {
		return errUnknown
	}
	req.Command = cmd
	if len(t.t[0]) > KeyMax {
		return errBadFmt
	}
	req.Key = t.t[0]
	if cmd == CmdMetaSet {
		return parseMs(&t, req)
	}
	// memcached counts the command and the key too: at most 19 words.
	if t.n+1 >= 20 {
		if cmd == CmdMetaGet {
			return errMgTooMany
		}
		return errMetaTooMany
	}
	if cmd == CmdMetaArith {
		req.Meta.Delta = 1
	}
	if err := preparse(t.t[1:t.n], req); err != nil {
		if cmd == CmdMetaGet {
			return err
		}
		return errMetaFlag // md and ma do not say which
	}
	if cmd == CmdMetaArith {
		switch req.Meta.Mode {
		case 0, 'I', '+':
			req.Meta.Mode = 'I'
		case 'D', '-':
			req.Meta.Mode = 'D'
		default:
			return errMaMode
		}
	}
	// memcached finds this only while writing the reply (for ma: after the
	// arithmetic); rejecting it up front is the one ordering difference.
	if len(req.Meta.Opaque) >= 32 {
		return errOpaqueLong
	}
	return nil
}

// ms <key> <datalen> <flag>*\r\n<data>\r\n
// Errors before <datalen> is known leave the data block unread (memcached
// reads it as a command); later ones have it discarded (DataLen() >= 0).
func parseMs(t *tokens, req *Request) error {
	if t.n == 1 {
		return errBadFmt
	}
	if t.n+1 >= 20 {
		return errMetaTooMany
	}
	n, ok := strtol(t.t[1])
	if !ok || n < 0 || n > 1<<31-3 {
		return errBadFmt
	}
	req.dataLen = int(n)
	if err := preparse(t.t[2:t.n], req); err != nil {
		return err
	}
	switch req.Meta.Mode {
	case 0:
		req.Meta.Mode = 'S'
	case 'E', 'A', 'P', 'R', 'S':
	default:
		return errMsMode
	}
	if len(req.Meta.Opaque) >= 32 {
		return errOpaqueLong
	}
	return nil
}

// me <key> [b]
// Only a literal "b" as the first flag is understood; the rest is ignored.
func parseMe(rest []byte, req *Request) error {
	req.Command = CmdMetaDebug
	key, rest := nextToken(rest)
	if len(key) == 0 || len(key) > KeyMax {
		return errBadFmt
	}
	req.Key = key
	if b, _ := nextToken(rest); string(b) == "b" {
		n := decodeKey(req.keyBuf[:], key)
		if n == 0 {
			return errBadFmt
		}
		req.Key = req.keyBuf[:n]
		req.Meta.Flags |= flagBit('b')
	}
	return nil
}

// preparse is memcached's _meta_flag_preparse: it records every flag and
// fills the token fields. A repeated flag (or a byte >= 127) and an unknown
// letter stop at once; bad tokens are remembered and the last one reported.
func preparse(toks [][]byte, req *Request) *protoError {
	var seen [2]uint64
	m := &req.Meta
	errstr, failed := errBadFmt, false
	fail := func(e *protoError) { errstr, failed = e, true }
	for _, tok := range toks {
		o := tok[0]
		if o >= 127 || seen[o>>6]&(1<<(o&63)) != 0 {
			return errDupFlag
		}
		seen[o>>6] |= 1 << (o & 63)
		m.Flags |= flagBit(o)
		m.order[m.norder] = o
		m.norder++
		var ok bool
		switch o {
		case 'b':
			n := decodeKey(req.keyBuf[:], req.Key)
			if n == 0 {
				fail(errDecodeKey)
			}
			req.Key = req.keyBuf[:n]
		case 'N':
			if m.Vivify, ok = strtol(tok[1:]); !ok {
				fail(errBadToken)
			}
		case 'T':
			if m.TTL, ok = strtol(tok[1:]); !ok {
				fail(errBadToken)
			}
		case 'R':
			if m.Recache, ok = strtol(tok[1:]); !ok {
				fail(errBadToken)
			}
		case 'O':
			m.Opaque = tok[1:]
		case 'P', 'L', 'l', 'k', 's', 't', 'c', 'f', 'v', 'h', 'u', 'q', 'I':
		case 'F':
			if m.ClientFlags, ok = strtoul(tok[1:]); !ok {
				failed = true // memcached sets no message for F
			}
		case 'C':
			if m.CAS, ok = strtoull(tok[1:]); !ok {
				fail(errBadToken)
			}
		case 'M':
			if len(tok) != 2 {
				fail(errMLength)
			} else {
				m.Mode = tok[1]
			}
		case 'J':
			if m.Initial, ok = strtoull(tok[1:]); !ok {
				fail(errBadInitial)
			}
		case 'D':
			if m.Delta, ok = strtoull(tok[1:]); !ok {
				fail(errBadDeltaMeta)
			}
		default:
			return errInvalidFlag
		}
	}
	if failed {
		return errstr
	}
	return nil
}

// appendMeta is AppendRequest's meta half:
//
//	mg|md|ma <key> <flag>*
//	ms <key> <datalen> <flag>*
func appendMeta(dst []byte, req *Request, dropOpaque func([]byte) bool) []byte {
	m := &req.Meta
	dst = append(append(dst, req.Command.String()...), ' ')
	if m.Flags.Has('b') {
		dst = appendBase64(dst, req.Key)
	} else {
		dst = append(dst, req.Key...)
	}
	if req.Command == CmdMetaSet {
		dst = strconv.AppendInt(append(dst, ' '), int64(len(req.Data)), 10)
	}
	for _, f := range m.Order() {
		if f == 'O' && dropOpaque != nil && dropOpaque(m.Opaque) {
			continue
		}
		dst = append(dst, ' ', f)
		switch f {
		case 'O':
			dst = append(dst, m.Opaque...)
		case 'T':
			dst = strconv.AppendInt(dst, m.TTL, 10)
		case 'F':
			dst = strconv.AppendUint(dst, uint64(m.ClientFlags), 10)
		case 'C':
			dst = strconv.AppendUint(dst, m.CAS, 10)
		case 'N':
			dst = strconv.AppendInt(dst, m.Vivify, 10)
		case 'R':
			dst = strconv.AppendInt(dst, m.Recache, 10)
		case 'J':
			dst = strconv.AppendUint(dst, m.Initial, 10)
		case 'D':
			dst = strconv.AppendUint(dst, m.Delta, 10)
		case 'M':
			dst = append(dst, m.Mode)
		}
	}
	return dst
}

// AppendKey appends key to dst as the key of a meta request line of the
// sender's own: as it is if ValidKey(key), else base64-encoded, and then
// b64 reports that the line needs the b flag. A key that a client sent in
// base64 may hold any byte, spaces and newlines included, and must not
// split the line or become a second request.
func AppendKey[K ~string | ~[]byte](dst []byte, key K) (line []byte, b64 bool) {
	if ValidKey(key) {
		return append(dst, key...), false
	}
	return appendBase64(dst, key), true
}

const b64Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// appendBase64 appends src in standard base64 with padding, which every
// base64 decoder reads, memcached's (and decodeKey) included.
func appendBase64[K ~string | ~[]byte](dst []byte, src K) []byte {
	for len(src) >= 3 {
		v := uint(src[0])<<16 | uint(src[1])<<8 | uint(src[2])
		dst = append(dst, b64Alphabet[v>>18], b64Alphabet[v>>12&63], b64Alphabet[v>>6&63], b64Alphabet[v&63])
		src = src[3:]
	}
	switch len(src) {
	case 1:
		v := uint(src[0]) << 16
		dst = append(dst, b64Alphabet[v>>18], b64Alphabet[v>>12&63], '=', '=')
	case 2:
		v := uint(src[0])<<16 | uint(src[1])<<8
		dst = append(dst, b64Alphabet[v>>18], b64Alphabet[v>>12&63], b64Alphabet[v>>6&63], '=')
	}
	return dst
}

// b64 is memcached's base64 decode table (base64.c): 0x80 marks bytes that
// are skipped; '=' decodes as 0 and counts as padding.
var b64 = func() (t [256]byte) {
	for i := range t {
		t[i] = 0x80
	}
	for i, c := range []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") {
		t[c] = byte(i)
	}
	t['='] = 0
	return t
}()

// decodeKey is memcached's lenient base64_decode: it skips bytes outside
// the alphabet, needs a multiple of four that remain, and stops after the
// first padded block. It returns the decoded length, 0 on failure.
func decodeKey(dst, src []byte) int {
	count := 0
	for _, c := range src {
		if b64[c] != 0x80 {
			count++
		}
	}
	if count == 0 || count%4 != 0 || count/4*3 > len(dst) {
		return 0
	}
	var block [4]byte
	n, k, pad := 0, 0, 0
	for _, c := range src {
		v := b64[c]
		if v == 0x80 {
			continue
		}
		if c == '=' {
			pad++
		}
		block[k] = v
		k++
		if k < 4 {
			continue
		}
		dst[n] = block[0]<<2 | block[1]>>4
		dst[n+1] = block[1]<<4 | block[2]>>2
		dst[n+2] = block[2]<<6 | block[3]
		n, k = n+3, 0
		if pad > 0 {
			if pad > 2 {
				return 0
			}
			return n - pad
		}
	}
	return n
}
