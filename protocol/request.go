package protocol

import (
	"bytes"
	"strconv"
)

// Command identifies a request.
type Command uint8

// Commands. The zero Command means "none" (the line did not parse).
const (
	CmdGet Command = iota + 1
	CmdGets
	CmdGat
	CmdGats
	CmdSet
	CmdAdd
	CmdReplace
	CmdAppend
	CmdPrepend
	CmdCas
	CmdDelete
	CmdIncr
	CmdDecr
	CmdTouch
	CmdFlushAll
	CmdVersion
	CmdVerbosity
	CmdQuit
	CmdStats
	CmdMetaNoop   // mn: reply MN and flush at once, as memcached does
	CmdMetaGet    // mg
	CmdMetaSet    // ms
	CmdMetaDelete // md
	CmdMetaArith  // ma
	CmdMetaDebug  // me
)

var commandNames = [...]string{
	"", "get", "gets", "gat", "gats",
	"set", "add", "replace", "append", "prepend", "cas",
	"delete", "incr", "decr", "touch",
	"flush_all", "version", "verbosity", "quit", "stats",
	"mn", "mg", "ms", "md", "ma", "me",
}

// String returns the command word as sent on the wire ("get", "mg", ...).
func (c Command) String() string {
	if int(c) < len(commandNames) && c != 0 {
		return commandNames[c]
	}
	return "unknown"
}

// KeyMax is the longest key memcached accepts, in bytes as sent (for meta
// commands with the b flag: the base64 text, before decoding).
const KeyMax = 250

// maxTokens bounds the words kept of a non-get line. memcached's tokenizer
// sees at most 23; every fixed-shape command has fewer, so 24 words are
// enough to tell that a line has too many.
const maxTokens = 24

// Request is one parsed request. A Reader fills the same Request on every
// Read; its byte slices alias the Reader's buffer (or the Request itself)
// and are valid until the next Read; so does Data, which aliases the
// Reader's buffer or a block the Reader reuses. A caller that keeps a
// value past the request copies it.
//
// Noreply is set only by the classic commands' trailing "noreply"; under it
// memcached suppresses every reply, errors included, so the caller writes
// nothing at all. Meta commands use the q flag (Meta.Flags.Has('q')) instead,
// which hides only the nominal replies; that choice is the caller's.
type Request struct {
	Command Command
	Key     []byte   // single-key commands (incl. meta; raw key after base64 decoding)
	Keys    [][]byte // get/gets/gat/gats keys; may be empty for gat/gats (memcached replies END)
	Flags   uint32   // storage commands' client flags (wrapped mod 2^32 as memcached does)
	Exptime int64    // storage/touch/gat exptime, flush_all delay; as sent, truncated to int32 as memcached does
	CAS     uint64   // cas unique (cas command)
	Delta   uint64   // incr/decr
	Noreply bool
	Args    [][]byte // stats arguments; verbosity level
	Data    []byte   // storage payload without "\r\n"; valid until the next Read
	Meta    Meta     // meta commands only

	dataLen   int          // <bytes>/<datalen> when a data block follows the line, else -1
	keyBuf    [KeyMax]byte // base64-decoded meta keys; keys kept across a data read
	opaqueBuf [31]byte     // Meta.Opaque kept across a data read
}

// DataLen returns the size of the data block announced by the last parsed
// line, or -1 if no data block follows it. After a Parse error it is >= 0
// only when the block must still be read and discarded (ms does that).
func (r *Request) DataLen() int { return r.dataLen }

// pin copies the fields that alias the line into the Request itself: reading
// a data block that is not yet buffered refills the buffer under them.
func (r *Request) pin() {
	if len(r.Key) > 0 && &r.Key[0] != &r.keyBuf[0] {
		r.Key = r.keyBuf[:copy(r.keyBuf[:], r.Key)]
	}
	if len(r.Meta.Opaque) > 0 {
		r.Meta.Opaque = r.opaqueBuf[:copy(r.opaqueBuf[:], r.Meta.Opaque)]
	}
}

// maxKeptKeys bounds the Keys and Args arrays a Request keeps between
// requests (48 KiB each); a rare huge multi-get does not pin its array.
const maxKeptKeys = 2048

func (r *Request) reset() {
	r.Command = 0
	r.Key = nil
	r.Keys = r.Keys[:0]
	if cap(r.Keys) > maxKeptKeys {
		r.Keys = nil
	}
	r.Flags = 0
	r.Exptime = 0
	r.CAS = 0
	r.Delta = 0
	r.Noreply = false
	r.Args = r.Args[:0]
	if cap(r.Args) > maxKeptKeys {
		r.Args = nil
	}
	r.Data = nil
	r.Meta = Meta{}
	r.dataLen = -1
}

// tokens holds the space-separated words of a line, as memcached's
// tokenize_command splits them (on ' ' only; tabs belong to words).
type tokens struct {
	t [maxTokens][]byte
	n int // number of words, capped at maxTokens ("too many")
}

// nextToken returns the first word of s and what follows it.
func nextToken(s []byte) (tok, rest []byte) {
	i := 0
	for i < len(s) && s[i] == ' ' {
		i++
	}
	j := i // a plain loop: words are short, IndexByte's call costs more
	for j < len(s) && s[j] != ' ' {
		j++
	}
	if j < len(s) {
		return s[i:j], s[j+1:]
	}
	return s[i:j], nil
}

func (t *tokens) split(s []byte) {
	t.n = 0
	for t.n < maxTokens {
		var tok []byte
		tok, s = nextToken(s)
		if len(tok) == 0 {
			return
		}
		t.t[t.n] = tok
		t.n++
	}
}

// noreply reports whether the last word is "noreply": the only word
// memcached's set_noreply_maybe looks at.
func (t *tokens) noreply() bool { return string(t.t[t.n-1]) == "noreply" }

// Parse parses one request line, given without its "\r\n" (or "\n"). It
// does no I/O: for storage commands the caller reads DataLen()+2 bytes
// next, which Reader does. The slices in req alias line. Errors are the
// exact memcached replies (see errors.go); under noreply they are wrapped
// so that Writer.Error writes nothing.
func Parse(line []byte, req *Request) error {
	req.reset()
	// memcached handles the line as a C string: a NUL ends it.
	if i := bytes.IndexByte(line, 0); i >= 0 {
		line = line[:i]
	}
	cmd, rest := nextToken(line)
	if len(cmd) < 2 {
		return errUnknown
	}
	if len(cmd) == 2 && cmd[0] == 'm' {
		return parseMeta(cmd[1], rest, req)
	}
	switch string(cmd) {
	case "get", "bget": // bget: an undocumented alias memcached still serves
		return parseGet(CmdGet, false, rest, req)
	case "gets":
		return parseGet(CmdGets, false, rest, req)
	case "gat":
		return parseGet(CmdGat, true, rest, req)
	case "gats":
		return parseGet(CmdGats, true, rest, req)
	case "stats":
		req.Command = CmdStats
		for tok, r := nextToken(rest); len(tok) > 0; tok, r = nextToken(r) {
			req.Args = append(req.Args, tok)
		}
		return nil
	case "version":
		req.Command = CmdVersion
		return nil
	case "quit":
		req.Command = CmdQuit
		return nil
	case "shutdown": // what memcached says unless started with -A
		return errNoShutdown
	}
	var t tokens
	t.split(line)
	switch string(cmd) {
	case "set":
		return parseStorage(CmdSet, &t, req)
	case "add":
		return parseStorage(CmdAdd, &t, req)
	case "replace":
		return parseStorage(CmdReplace, &t, req)
	case "append":
		return parseStorage(CmdAppend, &t, req)
	case "prepend":
		return parseStorage(CmdPrepend, &t, req)
	case "cas":
		return parseStorage(CmdCas, &t, req)
	case "delete":
		return parseDelete(&t, req)
	case "incr":
		return parseArith(CmdIncr, &t, req)
	case "decr":
		return parseArith(CmdDecr, &t, req)
	case "touch":
		return parseTouch(&t, req)
	case "flush_all":
		return parseFlushAll(&t, req)
	case "verbosity":
		return parseVerbosity(&t, req)
	}
	return errUnknown
}

// get <key>+                gets <key>+
// gat <exptime> <key>*      gats <exptime> <key>*
// At least one word must follow the command; gat with no key is valid.
// Keys are unbounded in number (memcached re-tokenizes long lines).
func parseGet(cmd Command, touch bool, rest []byte, req *Request) error {
	tok, rest := nextToken(rest)
	if len(tok) == 0 {
		return errUnknown
	}
	req.Command = cmd
	if touch {
		exp, ok := strtol(tok)
		if !ok {
			return errBadExptime
		}
		req.Exptime = exp
		tok, rest = nextToken(rest)
	}
	for ; len(tok) > 0; tok, rest = nextToken(rest) {
		if len(tok) > KeyMax {
			req.Keys = req.Keys[:0]
			return errBadFmt
		}
		req.Keys = append(req.Keys, tok)
	}
	return nil
}

// set|add|replace|append|prepend <key> <flags> <exptime> <bytes> [noreply]
// cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]
// The optional last word is ignored unless it is "noreply". On error the
// data block is NOT consumed: memcached reads it as the next command.
func parseStorage(cmd Command, t *tokens, req *Request) error {
	base := 5
	if cmd == CmdCas {
		base = 6
	}
	if t.n != base && t.n != base+1 {
		return errUnknown
	}
	req.Command = cmd
	req.Noreply = t.noreply()
	if len(t.t[1]) > KeyMax {
		return quiet(errBadFmt, req.Noreply)
	}
	flags, ok1 := strtoul(t.t[2])
	exp, ok2 := strtol(t.t[3])
	n, ok3 := strtol(t.t[4])
	if !ok1 || !ok2 || !ok3 {
		return quiet(errBadFmt, req.Noreply)
	}
	if cmd == CmdCas {
		cas, ok := strtoull(t.t[5])
		if !ok {
			return quiet(errBadFmt, req.Noreply)
		}
		req.CAS = cas
	}
	if n < 0 || n > 1<<31-3 {
		return quiet(errBadFmt, req.Noreply)
	}
	req.Key, req.Flags, req.Exptime, req.dataLen = t.t[1], flags, exp, int(n)
	return nil
}

// delete <key> [0] [noreply]
// The legacy hold time is accepted only as the literal "0".
func parseDelete(t *tokens, req *Request) error {
	if t.n < 2 || t.n > 4 {
		return errUnknown
	}
	req.Command = CmdDelete
	if t.n > 2 {
		zero := string(t.t[2]) == "0"
		req.Noreply = t.noreply()
		if !(t.n == 3 && (zero || req.Noreply) || t.n == 4 && zero && req.Noreply) {
			return quiet(errDeleteUsage, req.Noreply)
		}
	}
	if len(t.t[1]) > KeyMax {
		return quiet(errBadFmt, req.Noreply)
	}
	req.Key = t.t[1]
	return nil
}

// incr <key> <value> [noreply]     decr <key> <value> [noreply]
// <value> is a 64-bit unsigned decimal.
func parseArith(cmd Command, t *tokens, req *Request) error {
	if t.n != 3 && t.n != 4 {
		return errUnknown
	}
	req.Command = cmd
	req.Noreply = t.noreply()
	if len(t.t[1]) > KeyMax {
		return quiet(errBadFmt, req.Noreply)
	}
	d, ok := strtoull(t.t[2])
	if !ok {
		return quiet(errBadDelta, req.Noreply)
	}
	req.Key, req.Delta = t.t[1], d
	return nil
}

// touch <key> <exptime> [noreply]
func parseTouch(t *tokens, req *Request) error {
	if t.n != 3 && t.n != 4 {
		return errUnknown
	}
	req.Command = CmdTouch
	req.Noreply = t.noreply()
	if len(t.t[1]) > KeyMax {
		return quiet(errBadFmt, req.Noreply)
	}
	exp, ok := strtol(t.t[2])
	if !ok {
		return quiet(errBadExptime, req.Noreply)
	}
	req.Key, req.Exptime = t.t[1], exp
	return nil
}

// flush_all [delay] [noreply]
func parseFlushAll(t *tokens, req *Request) error {
	if t.n > 3 {
		return errUnknown
	}
	req.Command = CmdFlushAll
	req.Noreply = t.noreply()
	want := 1
	if req.Noreply {
		want = 2
	}
	if t.n != want { // memcached then reads the delay from the first argument
		d, ok := strtol(t.t[1])
		if !ok {
			return quiet(errBadExptime, req.Noreply)
		}
		req.Exptime = d
	}
	return nil
}

// verbosity <level> [noreply]
func parseVerbosity(t *tokens, req *Request) error {
	if t.n != 2 && t.n != 3 {
		return errUnknown
	}
	req.Command = CmdVerbosity
	req.Noreply = t.noreply()
	if _, ok := strtoul(t.t[1]); !ok {
		return quiet(errBadFmt, req.Noreply)
	}
	req.Args = append(req.Args, t.t[1])
	return nil
}

// AppendRequest appends to dst the request line req was parsed from,
// rebuilt and without its "\r\n", and returns the extended slice: what a
// node sends when it passes a client's write on to the key's owner. It
// writes, for the commands it knows,
//
//	set|add|replace|append|prepend <key> <flags> <exptime> <bytes>
//	cas <key> <flags> <exptime> <bytes> <cas unique>
//	delete <key>
//	incr|decr <key> <value>
//	touch <key> <exptime>
//	mg|md|ma <key> <flag>*
//	ms <key> <datalen> <flag>*
//
// Classic commands lose their noreply (and delete its legacy "0"). Meta
// flags keep the client's order (Meta.Order), q included, each with the
// value Parse gave it ("T5\tjunk" becomes "T5", "M+" on ma "MI"); a key the
// client sent in base64 (b) is sent in base64 again. <bytes> and <datalen>
// are len(req.Data): the data block the caller sends after the line.
//
// If dropOpaque is not nil it is asked about the O flag's token, and the
// flag is left out when it reports true (a token that must not travel).
//
// For any line Parse accepts as one of these commands, Parse of the
// rebuilt line gives the same Request but for Noreply (FuzzRequestRoundTrip
// checks it). AppendRequest allocates nothing when dst has room for the
// line. Other commands panic: they are not forwarded.
func AppendRequest(dst []byte, req *Request, dropOpaque func(opaque []byte) bool) []byte {
	if req.Command >= CmdMetaGet && req.Command <= CmdMetaArith {
		return appendMeta(dst, req, dropOpaque)
	}
	dst = append(dst, req.Command.String()...)
	dst = append(append(dst, ' '), req.Key...)
	switch req.Command {
	case CmdSet, CmdAdd, CmdReplace, CmdAppend, CmdPrepend, CmdCas:
		dst = strconv.AppendUint(append(dst, ' '), uint64(req.Flags), 10)
		dst = strconv.AppendInt(append(dst, ' '), req.Exptime, 10)
		dst = strconv.AppendInt(append(dst, ' '), int64(len(req.Data)), 10)
		if req.Command == CmdCas {
			dst = strconv.AppendUint(append(dst, ' '), req.CAS, 10)
		}
	case CmdDelete:
	case CmdIncr, CmdDecr:
		dst = strconv.AppendUint(append(dst, ' '), req.Delta, 10)
	case CmdTouch:
		dst = strconv.AppendInt(append(dst, ' '), req.Exptime, 10)
	default:
		panic("protocol: AppendRequest of " + req.Command.String())
	}
	return dst
}

// ValidKey reports whether key follows protocol.txt's rule: 1 to 250
// bytes, none of them whitespace or control characters. memcached itself
// only enforces the length (and Parse does the same), but clients such as
// gomemcache refuse other keys, so a server that forwards keys to its peers
// through such a client, or writes them into a request line of its own,
// can check them first. A key that fails may still be sent base64-encoded
// (meta commands' b flag).
func ValidKey[K ~string | ~[]byte](key K) bool {
	if len(key) == 0 || len(key) > KeyMax {
		return false
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}
