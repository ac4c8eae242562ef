package server

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"spillway/protocol"
)

// The binary conformance suite: binary packets exchanged with a fresh
// connection, each reply written byte for byte as memcached 1.6.18 sends
// it. As for the text suite, memcached is the source of truth
// (TestBinaryConformanceMemcached proves every case against it) and
// TestBinaryConformanceSpillway runs the same cases against a node.
//
// A reply packet is compared whole (magic, opcode, lengths, datatype,
// status, opaque, extras, key, value), and so is its CAS, except that a
// CAS written {name} (casVar) is captured the first time it appears and
// must repeat after that; a request's casVar sends the captured CAS.
// After the last reply, the runner sends a noop and requires exactly its
// response next (no extra bytes, the connection still usable), or, for a
// close case, the end of the stream.

// bp is a binary packet of a case: a request to send or a reply to expect.
type bp struct {
	magic  byte // request: 0 means 0x80
	op     protocol.Opcode
	status protocol.BinaryStatus // reply
	extras string
	key    string
	value  string
	opaque uint32
	cas    uint64
	casVar string // request: send this captured CAS; reply: capture or compare
	raw    string // request: send these bytes instead

	// Request lengths that lie, for malformed packets: -1 (or 0 with
	// lie false) means the true length.
	keylen, extlen, bodylen int
	lie                     bool
}

// Builders, so that cases read like the wire.

func rq(op protocol.Opcode, key string) bp {
	return bp{op: op, key: key, keylen: -1, extlen: -1, bodylen: -1}
}
func rs(op protocol.Opcode, status protocol.BinaryStatus) bp { return bp{op: op, status: status} }
func (p bp) ext(e string) bp                                 { p.extras = e; return p }
func (p bp) k(key string) bp                                 { p.key = key; return p }
func (p bp) val(v string) bp                                 { p.value = v; return p }
func (p bp) opq(o uint32) bp                                 { p.opaque = o; return p }
func (p bp) withCAS(c uint64) bp                             { p.cas = c; return p }
func (p bp) casOf(name string) bp                            { p.casVar = name; return p }
func (p bp) lengths(keylen, extlen, bodylen int) bp {
	p.keylen, p.extlen, p.bodylen, p.lie = keylen, extlen, bodylen, true
	return p
}

// u32 and u64 are big-endian numbers, as extras carry them.
func u32(n uint32) string { return string(binary.BigEndian.AppendUint32(nil, n)) }
func u64(n uint64) string { return string(binary.BigEndian.AppendUint64(nil, n)) }

// setExtras are the extras of set, add and replace.
func setExtras(flags, exptime uint32) string { return u32(flags) + u32(exptime) }

// incrExtras are the extras of increment and decrement.
func incrExtras(delta, initial uint64, exptime uint32) string {
	return u64(delta) + u64(initial) + u32(exptime)
}

// noCreate is the exptime that tells increment not to create a missing key.
const noCreate = 0xffffffff

// encode returns the request's bytes, with the CAS of vars if it names one.
func (p bp) encode(vars map[string]uint64) ([]byte, error) {
	if p.raw != "" {
		return []byte(p.raw), nil
	}
	cas := p.cas
	if p.casVar != "" {
		v, ok := vars[p.casVar]
		if !ok {
			return nil, fmt.Errorf("request uses CAS {%s}, which no earlier reply captured", p.casVar)
		}
		cas = v
	}
	keylen, extlen, bodylen := len(p.key), len(p.extras), len(p.extras)+len(p.key)+len(p.value)
	if p.lie {
		if p.keylen >= 0 {
			keylen = p.keylen
		}
		if p.extlen >= 0 {
			extlen = p.extlen
		}
		if p.bodylen >= 0 {
			bodylen = p.bodylen
		}
	}
	magic := p.magic
	if magic == 0 {
		magic = protocol.BinaryMagic
	}
	b := []byte{magic, byte(p.op)}
	b = binary.BigEndian.AppendUint16(b, uint16(keylen))
	b = append(b, byte(extlen), 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(bodylen))
	b = binary.BigEndian.AppendUint32(b, p.opaque)
	b = binary.BigEndian.AppendUint64(b, cas)
	return append(b, p.extras+p.key+p.value...), nil
}

// binaryCase is one exchange of binary packets with a fresh connection.
type binaryCase struct {
	name   string
	send   []bp
	want   []bp
	then   []binaryExchange // further exchanges on the same connection
	close  bool             // the server closes the connection after the replies
	global bool             // affects the whole server: runs alone, after the others
	raw    bool             // send holds a malformed packet: keys are not checked
}

type binaryExchange struct{ send, want []bp }

// Error bodies memcached sends with its statuses.
const (
	txtNotFound  = "Not found"
	txtExists    = "Data exists for key."
	txtTooLarge  = "Too large."
	txtInvalid   = "Invalid arguments"
	txtNotStored = "Not stored."
	txtNonNum    = "Non-numeric server-side value for incr or decr"
	txtUnknown   = "Unknown command"
)

// fails is an error reply of op with memcached's text for status.
func fails(op protocol.Opcode, status protocol.BinaryStatus, text string) bp {
	return rs(op, status).val(text)
}

// set is a plain set of value under key.
func set(key, value string) bp { return rq(protocol.OpSet, key).ext(setExtras(0, 0)).val(value) }

// hit is a get's reply for a value with flags 0 and the CAS captured as casVar.
func hit(op protocol.Opcode, value, casVar string) bp {
	return rs(op, protocol.StatusOK).ext(u32(0)).val(value).casOf(casVar)
}

var binaryLargest = largestValue("bin-largest-fits", false)

var binaryCases = []binaryCase{
	// noop, version
	{name: "bin-noop", send: []bp{rq(protocol.OpNoop, "").opq(0x01020304)}, want: []bp{rs(protocol.OpNoop, protocol.StatusOK).opq(0x01020304)}},
	{name: "bin-version", send: []bp{rq(protocol.OpVersion, "").opq(7)}, want: []bp{rs(protocol.OpVersion, protocol.StatusOK).opq(7).val("1.6.18")}},

	// get getk getq getkq: misses
	{name: "bin-get-miss",
		send: []bp{rq(protocol.OpGet, "bin-get-miss").opq(0xdeadbeef)},
		want: []bp{fails(protocol.OpGet, protocol.StatusKeyNotFound, txtNotFound).opq(0xdeadbeef)}},
	{name: "bin-getk-miss-echoes-key",
		send: []bp{rq(protocol.OpGetK, "bin-getk-miss-echoes-key").opq(3)},
		want: []bp{rs(protocol.OpGetK, protocol.StatusKeyNotFound).k("bin-getk-miss-echoes-key").opq(3)}},
	{name: "bin-getq-getkq-miss-silent",
		send: []bp{rq(protocol.OpGetQ, "bin-getq-getkq-miss-silent-a").opq(1), rq(protocol.OpGetKQ, "bin-getq-getkq-miss-silent-b").opq(2), rq(protocol.OpNoop, "").opq(3)},
		want: []bp{rs(protocol.OpNoop, protocol.StatusOK).opq(3)}},

	// set, then every get
	{name: "bin-set-get",
		send: []bp{rq(protocol.OpSet, "bin-set-get").ext(setExtras(0xcafe, 0)).val("hello").opq(1),
			rq(protocol.OpGet, "bin-set-get").opq(2), rq(protocol.OpGetK, "bin-set-get").opq(3),
			rq(protocol.OpGetQ, "bin-set-get").opq(4), rq(protocol.OpGetKQ, "bin-set-get").opq(5)},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).opq(1).casOf("c"),
			rs(protocol.OpGet, protocol.StatusOK).ext(u32(0xcafe)).val("hello").opq(2).casOf("c"),
			rs(protocol.OpGetK, protocol.StatusOK).ext(u32(0xcafe)).k("bin-set-get").val("hello").opq(3).casOf("c"),
			rs(protocol.OpGetQ, protocol.StatusOK).ext(u32(0xcafe)).val("hello").opq(4).casOf("c"),
			rs(protocol.OpGetKQ, protocol.StatusOK).ext(u32(0xcafe)).k("bin-set-get").val("hello").opq(5).casOf("c")}},
	{name: "bin-set-overwrite-new-cas",
		send: []bp{set("bin-set-overwrite-new-cas", "a"), set("bin-set-overwrite-new-cas", "bb"), rq(protocol.OpGet, "bin-set-overwrite-new-cas")},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).casOf("c1"), rs(protocol.OpSet, protocol.StatusOK).casOf("c2"), hit(protocol.OpGet, "bb", "c2")}},
	{name: "bin-set-empty-and-binary-value",
		send: []bp{set("bin-set-empty-and-binary-value-e", ""), set("bin-set-empty-and-binary-value-b", "\x00\r\n\xff"),
			rq(protocol.OpGet, "bin-set-empty-and-binary-value-e"), rq(protocol.OpGet, "bin-set-empty-and-binary-value-b")},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).casOf("e"), rs(protocol.OpSet, protocol.StatusOK).casOf("b"), hit(protocol.OpGet, "", "e"), hit(protocol.OpGet, "\x00\r\n\xff", "b")}},
	{name: "bin-set-flags-max",
		send: []bp{rq(protocol.OpSet, "bin-set-flags-max").ext(setExtras(0xffffffff, 0)).val("x"), rq(protocol.OpGet, "bin-set-flags-max")},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).casOf("c"), rs(protocol.OpGet, protocol.StatusOK).ext(u32(0xffffffff)).val("x").casOf("c")}},
	// Binary keys may hold any byte; memcached checks only their length.
	{name: "bin-key-any-bytes",
		send: []bp{set("bin-key-any-bytes \r\n\x00\x01é", "v"), rq(protocol.OpGetK, "bin-key-any-bytes \r\n\x00\x01é")},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).casOf("c"), rs(protocol.OpGetK, protocol.StatusOK).ext(u32(0)).k("bin-key-any-bytes \r\n\x00\x01é").val("v").casOf("c")}},
	{name: "bin-key-250",
		send: []bp{set(key250("bin-key-250"), "v"), rq(protocol.OpGet, key250("bin-key-250"))},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).casOf("c"), hit(protocol.OpGet, "v", "c")}},
	{name: "bin-set-expired",
		send: []bp{rq(protocol.OpSet, "bin-set-expired").ext(setExtras(0, 2592001)).val("x"), rq(protocol.OpGet, "bin-set-expired")},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).casOf("c"), fails(protocol.OpGet, protocol.StatusKeyNotFound, txtNotFound)}},
	{name: "bin-set-exptime-far-future",
		send: []bp{rq(protocol.OpSet, "bin-set-exptime-far-future").ext(setExtras(0, 0xfffffff0)).val("x"), rq(protocol.OpGet, "bin-set-exptime-far-future")},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).casOf("c"), hit(protocol.OpGet, "x", "c")}},
	{name: "bin-setq-silent",
		send: []bp{rq(protocol.OpSetQ, "bin-setq-silent").ext(setExtras(1, 0)).val("q").opq(9), rq(protocol.OpGet, "bin-setq-silent").opq(10)},
		want: []bp{rs(protocol.OpGet, protocol.StatusOK).ext(u32(1)).val("q").opq(10).casOf("c")}},

	// add, replace
	{name: "bin-add",
		send: []bp{rq(protocol.OpAdd, "bin-add").ext(setExtras(0, 0)).val("1").opq(1), rq(protocol.OpAdd, "bin-add").ext(setExtras(0, 0)).val("2").opq(2),
			rq(protocol.OpAddQ, "bin-add").ext(setExtras(0, 0)).val("3").opq(3), rq(protocol.OpGet, "bin-add")},
		want: []bp{rs(protocol.OpAdd, protocol.StatusOK).opq(1).casOf("c"), fails(protocol.OpAdd, protocol.StatusKeyExists, txtExists).opq(2),
			fails(protocol.OpAddQ, protocol.StatusKeyExists, txtExists).opq(3), hit(protocol.OpGet, "1", "c")}},
	{name: "bin-addq-new-silent",
		send: []bp{rq(protocol.OpAddQ, "bin-addq-new-silent").ext(setExtras(0, 0)).val("1"), rq(protocol.OpGet, "bin-addq-new-silent")},
		want: []bp{hit(protocol.OpGet, "1", "c")}},
	{name: "bin-replace",
		send: []bp{rq(protocol.OpReplace, "bin-replace").ext(setExtras(0, 0)).val("1").opq(1), rq(protocol.OpReplaceQ, "bin-replace").ext(setExtras(0, 0)).val("1").opq(2),
			set("bin-replace", "a"), rq(protocol.OpReplace, "bin-replace").ext(setExtras(5, 0)).val("b").opq(3), rq(protocol.OpGet, "bin-replace")},
		want: []bp{fails(protocol.OpReplace, protocol.StatusKeyNotFound, txtNotFound).opq(1), fails(protocol.OpReplaceQ, protocol.StatusKeyNotFound, txtNotFound).opq(2),
			rs(protocol.OpSet, protocol.StatusOK).casOf("c1"), rs(protocol.OpReplace, protocol.StatusOK).opq(3).casOf("c2"), rs(protocol.OpGet, protocol.StatusOK).ext(u32(5)).val("b").casOf("c2")}},

	// CAS: a set, add or replace with a CAS is a compare-and-swap.
	{name: "bin-cas",
		send: []bp{set("bin-cas", "a")},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).casOf("c")},
		then: []binaryExchange{
			{send: []bp{set("bin-cas", "b").withCAS(1 << 62)}, want: []bp{fails(protocol.OpSet, protocol.StatusKeyExists, txtExists)}},
			{send: []bp{set("bin-cas", "b").casOf("c")}, want: []bp{rs(protocol.OpSet, protocol.StatusOK).casOf("c2")}},
			{send: []bp{set("bin-cas", "c").casOf("c"), rq(protocol.OpGet, "bin-cas")}, want: []bp{fails(protocol.OpSet, protocol.StatusKeyExists, txtExists), hit(protocol.OpGet, "b", "c2")}},
			{send: []bp{rq(protocol.OpAdd, "bin-cas").ext(setExtras(0, 0)).val("d").casOf("c2")}, want: []bp{rs(protocol.OpAdd, protocol.StatusOK).casOf("c3")}},
			{send: []bp{rq(protocol.OpReplace, "bin-cas").ext(setExtras(0, 0)).val("e").casOf("c2")}, want: []bp{fails(protocol.OpReplace, protocol.StatusKeyExists, txtExists)}},
			{send: []bp{rq(protocol.OpSetQ, "bin-cas").ext(setExtras(0, 0)).val("f").casOf("c2")}, want: []bp{fails(protocol.OpSetQ, protocol.StatusKeyExists, txtExists)}},
		}},
	{name: "bin-cas-missing",
		send: []bp{set("bin-cas-missing", "x").withCAS(5), rq(protocol.OpAdd, "bin-cas-missing").ext(setExtras(0, 0)).val("x").withCAS(5),
			rq(protocol.OpReplace, "bin-cas-missing").ext(setExtras(0, 0)).val("x").withCAS(5)},
		want: []bp{fails(protocol.OpSet, protocol.StatusKeyNotFound, txtNotFound), fails(protocol.OpAdd, protocol.StatusKeyNotFound, txtNotFound), fails(protocol.OpReplace, protocol.StatusKeyNotFound, txtNotFound)}},

	// append, prepend
	{name: "bin-append-prepend",
		send: []bp{rq(protocol.OpAppend, "bin-append-prepend").val("x").opq(1), rq(protocol.OpPrependQ, "bin-append-prepend").val("x").opq(2),
			rq(protocol.OpSet, "bin-append-prepend").ext(setExtras(7, 0)).val("mid"),
			rq(protocol.OpAppend, "bin-append-prepend").val(">>").opq(3), rq(protocol.OpPrepend, "bin-append-prepend").val("<<").opq(4),
			rq(protocol.OpAppendQ, "bin-append-prepend").val("!").opq(5), rq(protocol.OpGet, "bin-append-prepend")},
		want: []bp{fails(protocol.OpAppend, protocol.StatusNotStored, txtNotStored).opq(1), fails(protocol.OpPrependQ, protocol.StatusNotStored, txtNotStored).opq(2),
			rs(protocol.OpSet, protocol.StatusOK).casOf("c1"), rs(protocol.OpAppend, protocol.StatusOK).opq(3).casOf("c2"), rs(protocol.OpPrepend, protocol.StatusOK).opq(4).casOf("c3"),
			rs(protocol.OpGet, protocol.StatusOK).ext(u32(7)).val("<<mid>>!").casOf("c4")}},
	{name: "bin-append-cas",
		send: []bp{set("bin-append-cas", "a")},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).casOf("c")},
		then: []binaryExchange{
			{send: []bp{rq(protocol.OpAppend, "bin-append-cas").val("b").withCAS(1 << 62)}, want: []bp{fails(protocol.OpAppend, protocol.StatusKeyExists, txtExists)}},
			{send: []bp{rq(protocol.OpAppend, "bin-append-cas").val("b").casOf("c"), rq(protocol.OpGet, "bin-append-cas")}, want: []bp{rs(protocol.OpAppend, protocol.StatusOK).casOf("c2"), hit(protocol.OpGet, "ab", "c2")}},
		}},

	// delete
	{name: "bin-delete",
		send: []bp{rq(protocol.OpDelete, "bin-delete").opq(1), rq(protocol.OpDeleteQ, "bin-delete").opq(2), set("bin-delete", "x"),
			rq(protocol.OpDelete, "bin-delete").opq(3), rq(protocol.OpGet, "bin-delete").opq(4)},
		want: []bp{fails(protocol.OpDelete, protocol.StatusKeyNotFound, txtNotFound).opq(1), fails(protocol.OpDeleteQ, protocol.StatusKeyNotFound, txtNotFound).opq(2),
			rs(protocol.OpSet, protocol.StatusOK).casOf("c"), rs(protocol.OpDelete, protocol.StatusOK).opq(3), fails(protocol.OpGet, protocol.StatusKeyNotFound, txtNotFound).opq(4)}},
	{name: "bin-delete-cas",
		send: []bp{set("bin-delete-cas", "x")},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).casOf("c")},
		then: []binaryExchange{
			{send: []bp{rq(protocol.OpDelete, "bin-delete-cas").withCAS(1 << 62)}, want: []bp{fails(protocol.OpDelete, protocol.StatusKeyExists, txtExists)}},
			{send: []bp{rq(protocol.OpDeleteQ, "bin-delete-cas").casOf("c"), rq(protocol.OpGet, "bin-delete-cas")}, want: []bp{fails(protocol.OpGet, protocol.StatusKeyNotFound, txtNotFound)}},
		}},

	// increment, decrement
	{name: "bin-incr-create",
		send: []bp{rq(protocol.OpIncrement, "bin-incr-create").ext(incrExtras(1, 10, noCreate)).opq(1),
			rq(protocol.OpIncrement, "bin-incr-create").ext(incrExtras(1, 10, 0)).opq(2),
			rq(protocol.OpIncrement, "bin-incr-create").ext(incrExtras(5, 10, 0)).opq(3),
			rq(protocol.OpDecrement, "bin-incr-create").ext(incrExtras(20, 10, 0)).opq(4),
			rq(protocol.OpGet, "bin-incr-create")},
		want: []bp{fails(protocol.OpIncrement, protocol.StatusKeyNotFound, txtNotFound).opq(1),
			rs(protocol.OpIncrement, protocol.StatusOK).val(u64(10)).opq(2).casOf("c1"),
			rs(protocol.OpIncrement, protocol.StatusOK).val(u64(15)).opq(3).casOf("c2"),
			rs(protocol.OpDecrement, protocol.StatusOK).val(u64(0)).opq(4).casOf("c3"),
			hit(protocol.OpGet, "0 ", "c3")}},
	{name: "bin-incr-wraps",
		send: []bp{set("bin-incr-wraps", "18446744073709551615"), rq(protocol.OpIncrement, "bin-incr-wraps").ext(incrExtras(2, 0, 0))},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).casOf("c1"), rs(protocol.OpIncrement, protocol.StatusOK).val(u64(1)).casOf("c2")}},
	{name: "bin-incr-non-numeric",
		send: []bp{set("bin-incr-non-numeric", "abc"), rq(protocol.OpIncrement, "bin-incr-non-numeric").ext(incrExtras(1, 0, 0)),
			rq(protocol.OpDecrementQ, "bin-incr-non-numeric").ext(incrExtras(1, 0, 0))},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).casOf("c"), fails(protocol.OpIncrement, protocol.StatusNonNumeric, txtNonNum), fails(protocol.OpDecrementQ, protocol.StatusNonNumeric, txtNonNum)}},
	{name: "bin-incr-quiet",
		send: []bp{rq(protocol.OpIncrementQ, "bin-incr-quiet").ext(incrExtras(1, 7, 0)), rq(protocol.OpIncrementQ, "bin-incr-quiet").ext(incrExtras(1, 7, 0)),
			rq(protocol.OpDecrementQ, "bin-incr-quiet-missing").ext(incrExtras(1, 7, noCreate)), rq(protocol.OpGet, "bin-incr-quiet")},
		want: []bp{fails(protocol.OpDecrementQ, protocol.StatusKeyNotFound, txtNotFound), hit(protocol.OpGet, "8", "c")}},
	{name: "bin-incr-cas",
		send: []bp{set("bin-incr-cas", "1")},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).casOf("c")},
		then: []binaryExchange{
			{send: []bp{rq(protocol.OpIncrement, "bin-incr-cas").ext(incrExtras(1, 0, 0)).withCAS(1 << 62)}, want: []bp{fails(protocol.OpIncrement, protocol.StatusKeyExists, txtExists)}},
			{send: []bp{rq(protocol.OpIncrement, "bin-incr-cas").ext(incrExtras(1, 0, 0)).casOf("c")}, want: []bp{rs(protocol.OpIncrement, protocol.StatusOK).val(u64(2)).casOf("c2")}},
		}},

	// touch, gat, gatk, gatq, gatkq
	{name: "bin-touch",
		send: []bp{rq(protocol.OpTouch, "bin-touch").ext(u32(100)).opq(1), rq(protocol.OpSet, "bin-touch").ext(setExtras(3, 0)).val("v"),
			rq(protocol.OpTouch, "bin-touch").ext(u32(100)).opq(2), rq(protocol.OpGet, "bin-touch")},
		want: []bp{fails(protocol.OpTouch, protocol.StatusKeyNotFound, txtNotFound).opq(1), rs(protocol.OpSet, protocol.StatusOK).casOf("c"),
			rs(protocol.OpTouch, protocol.StatusOK).ext(u32(3)).opq(2).casOf("c"), rs(protocol.OpGet, protocol.StatusOK).ext(u32(3)).val("v").casOf("c")}},
	{name: "bin-touch-expires",
		send: []bp{set("bin-touch-expires", "v"), rq(protocol.OpTouch, "bin-touch-expires").ext(u32(2592001)), rq(protocol.OpGet, "bin-touch-expires")},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).casOf("c"), rs(protocol.OpTouch, protocol.StatusOK).ext(u32(0)).casOf("c"), fails(protocol.OpGet, protocol.StatusKeyNotFound, txtNotFound)}},
	{name: "bin-gat",
		send: []bp{rq(protocol.OpGAT, "bin-gat").ext(u32(100)).opq(1), rq(protocol.OpGATK, "bin-gat").ext(u32(100)).opq(2),
			rq(protocol.OpGATQ, "bin-gat").ext(u32(100)).opq(3), rq(protocol.OpGATKQ, "bin-gat").ext(u32(100)).opq(4),
			rq(protocol.OpSet, "bin-gat").ext(setExtras(9, 0)).val("val"),
			rq(protocol.OpGAT, "bin-gat").ext(u32(100)).opq(5), rq(protocol.OpGATK, "bin-gat").ext(u32(100)).opq(6),
			rq(protocol.OpGATQ, "bin-gat").ext(u32(100)).opq(7), rq(protocol.OpGATKQ, "bin-gat").ext(u32(100)).opq(8)},
		want: []bp{fails(protocol.OpGAT, protocol.StatusKeyNotFound, txtNotFound).opq(1), rs(protocol.OpGATK, protocol.StatusKeyNotFound).k("bin-gat").opq(2),
			rs(protocol.OpSet, protocol.StatusOK).casOf("c"),
			rs(protocol.OpGAT, protocol.StatusOK).ext(u32(9)).val("val").opq(5).casOf("c"),
			rs(protocol.OpGATK, protocol.StatusOK).ext(u32(9)).k("bin-gat").val("val").opq(6).casOf("c"),
			rs(protocol.OpGATQ, protocol.StatusOK).ext(u32(9)).val("val").opq(7).casOf("c"),
			rs(protocol.OpGATKQ, protocol.StatusOK).ext(u32(9)).k("bin-gat").val("val").opq(8).casOf("c")}},

	// A quiet pipeline: only errors and hits come back, in order, and the
	// noop at the end answers for everything before it.
	{name: "bin-quiet-pipeline",
		send: []bp{rq(protocol.OpSetQ, "bin-quiet-pipeline-1").ext(setExtras(0, 0)).val("one").opq(1),
			rq(protocol.OpSetQ, "bin-quiet-pipeline-2").ext(setExtras(0, 0)).val("two").opq(2),
			rq(protocol.OpAddQ, "bin-quiet-pipeline-1").ext(setExtras(0, 0)).val("dup").opq(3),
			rq(protocol.OpGetKQ, "bin-quiet-pipeline-1").opq(4), rq(protocol.OpGetKQ, "bin-quiet-pipeline-none").opq(5),
			rq(protocol.OpGetKQ, "bin-quiet-pipeline-2").opq(6), rq(protocol.OpDeleteQ, "bin-quiet-pipeline-2").opq(7),
			rq(protocol.OpDeleteQ, "bin-quiet-pipeline-2").opq(8), rq(protocol.OpNoop, "").opq(9)},
		want: []bp{fails(protocol.OpAddQ, protocol.StatusKeyExists, txtExists).opq(3),
			rs(protocol.OpGetKQ, protocol.StatusOK).ext(u32(0)).k("bin-quiet-pipeline-1").val("one").opq(4).casOf("c1"),
			rs(protocol.OpGetKQ, protocol.StatusOK).ext(u32(0)).k("bin-quiet-pipeline-2").val("two").opq(6).casOf("c2"),
			fails(protocol.OpDeleteQ, protocol.StatusKeyNotFound, txtNotFound).opq(8), rs(protocol.OpNoop, protocol.StatusOK).opq(9)}},

	// stat
	{name: "bin-stat-reset", send: []bp{rq(protocol.OpStat, "reset").opq(4)}, want: []bp{rs(protocol.OpStat, protocol.StatusOK).opq(4)}},
	{name: "bin-stat-unknown", send: []bp{rq(protocol.OpStat, "nonexistent").opq(5)}, want: []bp{fails(protocol.OpStat, protocol.StatusKeyNotFound, txtNotFound).opq(5)}},
	{name: "bin-stat-detail-bare", send: []bp{rq(protocol.OpStat, "detail")}, want: []bp{fails(protocol.OpStat, protocol.StatusKeyNotFound, txtNotFound)}},

	// Unknown opcodes: the body is skipped and the connection goes on.
	// memcached 1.6.18 serves neither verbosity nor SASL (without -S).
	{name: "bin-unknown-opcode", raw: true,
		send: []bp{rq(0x42, "").val("junk").opq(1)},
		want: []bp{fails(0x42, protocol.StatusUnknownCommand, txtUnknown).opq(1)}},
	{name: "bin-verbosity-unknown", raw: true,
		send: []bp{rq(0x1b, "").opq(2)},
		want: []bp{fails(0x1b, protocol.StatusUnknownCommand, txtUnknown).opq(2)}},
	{name: "bin-sasl-unknown", raw: true,
		send: []bp{rq(0x20, "").opq(3)},
		want: []bp{fails(0x20, protocol.StatusUnknownCommand, txtUnknown).opq(3)}},

	// Malformed packets: "Invalid arguments" and a closed connection.
	{name: "bin-get-with-extras", raw: true, close: true,
		send: []bp{rq(protocol.OpGet, "bin-get-with-extras").ext("abcd").opq(1)},
		want: []bp{fails(protocol.OpGet, protocol.StatusInvalid, txtInvalid).opq(1)}},
	{name: "bin-get-no-key", raw: true, close: true,
		send: []bp{rq(protocol.OpGet, "")},
		want: []bp{fails(protocol.OpGet, protocol.StatusInvalid, txtInvalid)}},
	{name: "bin-get-with-value", raw: true, close: true,
		send: []bp{rq(protocol.OpGet, "bin-get-with-value").val("v")},
		want: []bp{fails(protocol.OpGet, protocol.StatusInvalid, txtInvalid)}},
	{name: "bin-set-short-extras", raw: true, close: true,
		send: []bp{rq(protocol.OpSet, "bin-set-short-extras").ext("abcd").val("v")},
		want: []bp{fails(protocol.OpSet, protocol.StatusInvalid, txtInvalid)}},
	{name: "bin-delete-with-extras", raw: true, close: true,
		send: []bp{rq(protocol.OpDelete, "bin-delete-with-extras").ext(u32(0))},
		want: []bp{fails(protocol.OpDelete, protocol.StatusInvalid, txtInvalid)}},
	{name: "bin-incr-short-extras", raw: true, close: true,
		send: []bp{rq(protocol.OpIncrement, "bin-incr-short-extras").ext(u64(1))},
		want: []bp{fails(protocol.OpIncrement, protocol.StatusInvalid, txtInvalid)}},
	{name: "bin-touch-no-extras", raw: true, close: true,
		send: []bp{rq(protocol.OpTouch, "bin-touch-no-extras")},
		want: []bp{fails(protocol.OpTouch, protocol.StatusInvalid, txtInvalid)}},
	{name: "bin-noop-with-body", raw: true, close: true,
		send: []bp{rq(protocol.OpNoop, "").val("x")},
		want: []bp{fails(protocol.OpNoop, protocol.StatusInvalid, txtInvalid)}},
	{name: "bin-flush-long-extras", raw: true, close: true,
		send: []bp{rq(protocol.OpFlush, "").ext(u64(0))},
		want: []bp{fails(protocol.OpFlush, protocol.StatusInvalid, txtInvalid)}},
	{name: "bin-stat-with-extras", raw: true, close: true,
		send: []bp{rq(protocol.OpStat, "").ext(u32(0))},
		want: []bp{fails(protocol.OpStat, protocol.StatusInvalid, txtInvalid)}},
	{name: "bin-key-251", raw: true, close: true,
		send: []bp{rq(protocol.OpGet, key251).opq(8)},
		want: []bp{fails(protocol.OpGet, protocol.StatusInvalid, txtInvalid).opq(8)}},
	{name: "bin-key-longer-than-body", raw: true, close: true,
		send: []bp{rq(protocol.OpGet, "bin-key-longer-than-body").lengths(-1, -1, 3)},
		want: []bp{fails(protocol.OpGet, protocol.StatusUnknownCommand, txtUnknown)}},
	{name: "bin-key-and-extras-longer-than-body", raw: true, close: true,
		send: []bp{rq(protocol.OpSet, "bin-key-and-extras-longer-than-body").ext(setExtras(0, 0)).lengths(-1, -1, len("bin-key-and-extras-longer-than-body")+4)},
		want: []bp{fails(protocol.OpSet, protocol.StatusUnknownCommand, txtUnknown)}},
	{name: "bin-bad-magic", raw: true, close: true,
		send: []bp{rq(protocol.OpNoop, ""), {raw: "\x81\x0a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"}},
		want: []bp{rs(protocol.OpNoop, protocol.StatusOK)}},

	// Values over the item size limit: "Too large.", the value skipped,
	// the connection usable. A set drops the old value; add, replace and
	// append keep it.
	{name: "bin-largest-fits",
		send: []bp{set("bin-largest-fits", xs(binaryLargest)), rq(protocol.OpSet, "bin-largest-fits").ext(setExtras(1, 0)).val(xs(binaryLargest))},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).casOf("c"), fails(protocol.OpSet, protocol.StatusTooLarge, txtTooLarge)}},
	{name: "bin-set-too-large-drops-old",
		send: []bp{set("bin-set-too-large-drops-old", "old"), set("bin-set-too-large-drops-old", xs(itemSizeMax)), rq(protocol.OpGet, "bin-set-too-large-drops-old")},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).casOf("c"), fails(protocol.OpSet, protocol.StatusTooLarge, txtTooLarge), fails(protocol.OpGet, protocol.StatusKeyNotFound, txtNotFound)}},
	{name: "bin-setq-too-large-drops-old",
		send: []bp{set("bin-setq-too-large-drops-old", "old"), rq(protocol.OpSetQ, "bin-setq-too-large-drops-old").ext(setExtras(0, 0)).val(xs(2 * itemSizeMax)), rq(protocol.OpGet, "bin-setq-too-large-drops-old")},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).casOf("c"), fails(protocol.OpSetQ, protocol.StatusTooLarge, txtTooLarge), fails(protocol.OpGet, protocol.StatusKeyNotFound, txtNotFound)}},
	{name: "bin-add-too-large-keeps-old",
		send: []bp{set("bin-add-too-large-keeps-old", "old"), rq(protocol.OpAdd, "bin-add-too-large-keeps-old").ext(setExtras(0, 0)).val(xs(itemSizeMax)),
			rq(protocol.OpReplace, "bin-add-too-large-keeps-old").ext(setExtras(0, 0)).val(xs(itemSizeMax)),
			rq(protocol.OpAppend, "bin-add-too-large-keeps-old").val(xs(itemSizeMax)), rq(protocol.OpGet, "bin-add-too-large-keeps-old")},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).casOf("c"), fails(protocol.OpAdd, protocol.StatusTooLarge, txtTooLarge), fails(protocol.OpReplace, protocol.StatusTooLarge, txtTooLarge),
			fails(protocol.OpAppend, protocol.StatusTooLarge, txtTooLarge), hit(protocol.OpGet, "old", "c")}},

	// flush, quit: these change the server or the connection for good.
	{name: "bin-quit", close: true,
		send: []bp{rq(protocol.OpQuit, "").opq(5), rq(protocol.OpNoop, "")},
		want: []bp{rs(protocol.OpQuit, protocol.StatusOK).opq(5)}},
	{name: "bin-quitq", close: true,
		send: []bp{rq(protocol.OpSet, "bin-quitq").ext(setExtras(0, 0)).val("x").opq(1), rq(protocol.OpQuitQ, "").opq(5), rq(protocol.OpNoop, "")},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).opq(1).casOf("c")}},
	{name: "bin-flush", global: true,
		send: []bp{set("bin-flush", "x"), rq(protocol.OpFlush, "").opq(1), rq(protocol.OpGet, "bin-flush"),
			set("bin-flush", "y"), rq(protocol.OpFlushQ, "").opq(2), rq(protocol.OpGet, "bin-flush")},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).casOf("c1"), rs(protocol.OpFlush, protocol.StatusOK).opq(1), fails(protocol.OpGet, protocol.StatusKeyNotFound, txtNotFound),
			rs(protocol.OpSet, protocol.StatusOK).casOf("c2"), fails(protocol.OpGet, protocol.StatusKeyNotFound, txtNotFound)}},
	{name: "bin-flush-delay-zero-extras", global: true,
		send: []bp{set("bin-flush-delay-zero-extras", "x"), rq(protocol.OpFlush, "").ext(u32(0)), rq(protocol.OpGet, "bin-flush-delay-zero-extras")},
		want: []bp{rs(protocol.OpSet, protocol.StatusOK).casOf("c"), rs(protocol.OpFlush, protocol.StatusOK), fails(protocol.OpGet, protocol.StatusKeyNotFound, txtNotFound)}},
}

// TestBinaryConformanceMemcached proves every binary case against the real memcached.
func TestBinaryConformanceMemcached(t *testing.T) {
	runBinaryConformance(t, startMemcached(t))
}

// TestBinaryConformanceSpillway runs the binary cases against a node.
func TestBinaryConformanceSpillway(t *testing.T) {
	runBinaryConformance(t, startSpillway(t))
}

// TestBinaryConformanceCases checks the table itself, without a server.
func TestBinaryConformanceCases(t *testing.T) {
	seen := make(map[string]bool)
	sawGlobal := false
	for _, c := range binaryCases {
		if seen[c.name] || !strings.HasPrefix(c.name, "bin-") {
			t.Errorf("case name %q is a duplicate or lacks the bin- prefix", c.name)
		}
		seen[c.name] = true
		if c.global {
			sawGlobal = true
		} else if sawGlobal {
			t.Errorf("%s: global cases must come last", c.name)
		}
		if c.raw {
			continue
		}
		sends := append([]bp(nil), c.send...)
		for _, ex := range c.then {
			sends = append(sends, ex.send...)
		}
		for _, p := range sends {
			if p.key != "" && !strings.HasPrefix(p.key, c.name) && p.op != protocol.OpStat {
				t.Errorf("%s: key %q does not start with the case name: cases must not share keys", c.name, p.key)
			}
		}
	}
}

// runBinaryConformance runs every binary case as a subtest against addr:
// in parallel on their own connections, then the global ones in turn.
func runBinaryConformance(t *testing.T, addr string) {
	t.Helper()
	t.Run("cases", func(t *testing.T) {
		for _, c := range binaryCases {
			if !c.global {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					runBinaryCase(t, addr, c)
				})
			}
		}
	})
	t.Run("global", func(t *testing.T) {
		for _, c := range binaryCases {
			if c.global {
				t.Run(c.name, func(t *testing.T) { runBinaryCase(t, addr, c) })
			}
		}
	})
}

// probeOpaque marks the noop that ends every case that does not close.
const probeOpaque = 0xfeedf00d

func runBinaryCase(t *testing.T, addr string, c binaryCase) {
	conn, err := net.DialTimeout("tcp", addr, conformanceDialTimeout)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	vars := make(map[string]uint64)
	steps := append([]binaryExchange{{c.send, c.want}}, c.then...)
	for i, ex := range steps {
		var out []byte
		for _, p := range ex.send {
			b, err := p.encode(vars)
			if err != nil {
				t.Fatalf("exchange %d: %v", i+1, err)
			}
			out = append(out, b...)
		}
		deadline := time.Now().Add(conformanceReplyTimeout + time.Duration(len(out)>>20)*time.Second)
		conn.SetDeadline(deadline)
		written := make(chan error, 1)
		go func() { _, err := conn.Write(out); written <- err }()
		for j, w := range ex.want {
			got, err := readBinaryPacket(conn)
			if err != nil {
				t.Fatalf("exchange %d, reply %d of %d: %v\nwant %s", i+1, j+1, len(ex.want), err, w)
			}
			if msg := w.match(got, vars); msg != "" {
				t.Fatalf("exchange %d, reply %d of %d: %s\nwant %s\ngot  %s", i+1, j+1, len(ex.want), msg, w, describePacket(got))
			}
		}
		if werr := <-written; werr != nil && !c.close {
			t.Fatalf("exchange %d: write: %v", i+1, werr)
		}
	}
	conn.SetDeadline(time.Now().Add(conformanceReplyTimeout))
	if c.close {
		rest, err := io.ReadAll(conn)
		if err != nil && !isConnReset(err) {
			t.Fatalf("the server must close the connection after the replies, but: %v", err)
		}
		if len(rest) > 0 {
			t.Fatalf("extra bytes before the close: %s", describePacket(rest))
		}
		return
	}
	probe, _ := rq(protocol.OpNoop, "").opq(probeOpaque).encode(nil)
	if _, err := conn.Write(probe); err != nil {
		t.Fatalf("after the replies, writing a noop: %v", err)
	}
	got, err := readBinaryPacket(conn)
	if err != nil {
		t.Fatalf("after the replies, want only the noop's response, got %v", err)
	}
	if msg := rs(protocol.OpNoop, protocol.StatusOK).opq(probeOpaque).match(got, vars); msg != "" {
		t.Fatalf("after the replies, want only the noop's response, got %s (%s): extra replies", describePacket(got), msg)
	}
}

// readBinaryPacket reads one response packet: header and body.
func readBinaryPacket(r io.Reader) ([]byte, error) {
	h := make([]byte, 24)
	if n, err := io.ReadFull(r, h); err != nil {
		if n > 0 {
			return nil, fmt.Errorf("%w after %d bytes of a header: %q", err, n, h[:n])
		}
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(h[8:]))
	if len(body) > 4<<20 {
		return nil, fmt.Errorf("a reply announcing a %d-byte body: %s", len(body), describePacket(h))
	}
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("%w in the body of %s", err, describePacket(h))
	}
	return append(h, body...), nil
}

// match compares a reply with the expected packet p, binding or checking
// its CAS variable; it returns "" when they match, else what differs.
func (p bp) match(got []byte, vars map[string]uint64) string {
	want, _ := bp{op: p.op, extras: p.extras, key: p.key, value: p.value, opaque: p.opaque, keylen: -1, extlen: -1, bodylen: -1}.encode(nil)
	want[0] = 0x81
	binary.BigEndian.PutUint16(want[6:], uint16(p.status))
	cas := binary.BigEndian.Uint64(got[16:24])
	switch v, bound := vars[p.casVar]; {
	case p.casVar == "":
		binary.BigEndian.PutUint64(want[16:], p.cas)
	case bound:
		binary.BigEndian.PutUint64(want[16:], v)
	case cas == 0:
		return fmt.Sprintf("CAS {%s} is 0", p.casVar)
	default:
		binary.BigEndian.PutUint64(want[16:], cas)
	}
	if string(got) != string(want) {
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				return fmt.Sprintf("differs at byte %d", i)
			}
		}
		return fmt.Sprintf("%d bytes, want %d", len(got), len(want))
	}
	if p.casVar != "" {
		vars[p.casVar] = cas
	}
	return ""
}

// String describes an expected packet.
func (p bp) String() string {
	cas := fmt.Sprint(p.cas)
	if p.casVar != "" {
		cas = "{" + p.casVar + "}"
	}
	return fmt.Sprintf("%s status %#x opaque %#x cas %s extras %q key %q value %s",
		p.op, uint16(p.status), p.opaque, cas, p.extras, p.key, shorten(p.value))
}

// describePacket describes a reply as it came.
func describePacket(b []byte) string {
	if len(b) < 24 {
		return fmt.Sprintf("%d bytes %q", len(b), b)
	}
	keylen, extlen := int(binary.BigEndian.Uint16(b[2:])), int(b[4])
	body := b[24:]
	if extlen+keylen > len(body) {
		return fmt.Sprintf("header %x, body %q", b[:24], body)
	}
	return fmt.Sprintf("magic %#x %s datatype %d status %#x bodylen %d opaque %#x cas %d extras %q key %q value %s",
		b[0], protocol.Opcode(b[1]), b[5], binary.BigEndian.Uint16(b[6:]), binary.BigEndian.Uint32(b[8:]),
		binary.BigEndian.Uint32(b[12:]), binary.BigEndian.Uint64(b[16:]),
		body[:extlen], body[extlen:extlen+keylen], shorten(string(body[extlen+keylen:])))
}

func shorten(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q... (%d bytes)", s[:64], len(s))
	}
	return fmt.Sprintf("%q", s)
}
