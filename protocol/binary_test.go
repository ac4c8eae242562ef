package protocol

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// pkt builds a binary request: header, extras, key, value.
func pkt(op Opcode, key, extras, value string, opaque uint32, cas uint64) string {
	return pktLen(op, key, extras, value, opaque, cas, len(key), len(extras)+len(key)+len(value))
}

// pktLen is pkt with the header's keylen and bodylen given.
func pktLen(op Opcode, key, extras, value string, opaque uint32, cas uint64, keylen, bodylen int) string {
	b := []byte{BinaryMagic, byte(op)}
	b = binary.BigEndian.AppendUint16(b, uint16(keylen))
	b = append(b, byte(len(extras)), 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(bodylen))
	b = binary.BigEndian.AppendUint32(b, opaque)
	b = binary.BigEndian.AppendUint64(b, cas)
	return string(b) + extras + key + value
}

func be32(n uint32) string { return string(binary.BigEndian.AppendUint32(nil, n)) }
func be64(n uint64) string { return string(binary.BigEndian.AppendUint64(nil, n)) }

// describeBinary renders one ReadBinary outcome: the request's non-zero
// fields, or the response BinaryError writes for the error ("close"
// added when the connection must close), or "io:" and the error.
func describeBinary(req *BinaryRequest, err error) string {
	if err != nil {
		var out bytes.Buffer
		w := NewWriter(&out)
		w.BinaryError(req, err)
		w.Flush()
		s := ""
		if b := out.Bytes(); len(b) >= 24 {
			s = fmt.Sprintf("status %#x %q", binary.BigEndian.Uint16(b[6:]), b[24:])
		}
		switch {
		case err == ErrTooLarge:
			return fmt.Sprintf("%s %q too large", req.Opcode, req.Key)
		case Fatal(err) && s == "":
			if _, ok := err.(*binaryError); ok {
				return "close"
			}
			return "io:" + err.Error()
		case Fatal(err):
			return s + " close"
		}
		return s
	}
	var b strings.Builder
	b.WriteString(req.Opcode.String())
	f := func(format string, a ...any) { fmt.Fprintf(&b, " "+format, a...) }
	if len(req.Key) > 0 {
		f("%q", req.Key)
	}
	for _, v := range []struct {
		name string
		v    uint64
	}{{"opaque", uint64(req.Opaque)}, {"cas", req.CAS}, {"flags", uint64(req.Flags)}, {"exp", uint64(req.Exptime)}, {"delta", req.Delta}, {"initial", req.Initial}} {
		if v.v != 0 {
			f("%s=%d", v.name, v.v)
		}
	}
	if req.Value != nil {
		f("value=%q", req.Value)
	}
	return b.String()
}

// readAllBinary reads requests from in until an error that ends the
// stream, and describes each outcome.
func readAllBinary(in string, lim Limits) []string {
	rd := NewReader(strings.NewReader(in), lim)
	var req BinaryRequest
	var out []string
	for {
		err := rd.ReadBinary(&req)
		out = append(out, describeBinary(&req, err))
		if err != nil && Fatal(err) {
			return out
		}
	}
}

var noop = pkt(OpNoop, "", "", "", 9, 0)

var binaryReadCases = []struct {
	name string
	in   string
	lim  Limits
	want []string
}{
	{"get", pkt(OpGet, "foo", "", "", 7, 0), Limits{}, []string{`get "foo" opaque=7`, "io:EOF"}},
	{"getkq", pkt(OpGetKQ, "foo", "", "", 0, 0), Limits{}, []string{`getkq "foo"`, "io:EOF"}},
	{"set", pkt(OpSet, "k", be32(5)+be32(60), "hello", 1, 99), Limits{}, []string{`set "k" opaque=1 cas=99 flags=5 exp=60 value="hello"`, "io:EOF"}},
	{"set-empty-value", pkt(OpSetQ, "k", be32(0)+be32(0), "", 0, 0), Limits{}, []string{`setq "k" value=""`, "io:EOF"}},
	{"append", pkt(OpAppend, "k", "", "++", 0, 3), Limits{}, []string{`append "k" cas=3 value="++"`, "io:EOF"}},
	{"incr", pkt(OpIncrement, "n", be64(2)+be64(10)+be32(0xffffffff), "", 0, 0), Limits{}, []string{`increment "n" exp=4294967295 delta=2 initial=10`, "io:EOF"}},
	{"touch", pkt(OpTouch, "k", be32(100), "", 0, 0), Limits{}, []string{`touch "k" exp=100`, "io:EOF"}},
	{"gatkq", pkt(OpGATKQ, "k", be32(1), "", 0, 0), Limits{}, []string{`gatkq "k" exp=1`, "io:EOF"}},
	{"flush", pkt(OpFlush, "", "", "", 0, 0) + pkt(OpFlushQ, "", be32(30), "", 0, 0), Limits{}, []string{"flush", "flushq exp=30", "io:EOF"}},
	{"stat", pkt(OpStat, "", "", "", 0, 0) + pkt(OpStat, "settings", "", "", 0, 0), Limits{}, []string{"stat", `stat "settings"`, "io:EOF"}},
	{"noop-version-quit", noop + pkt(OpVersion, "", "", "", 0, 0) + pkt(OpQuitQ, "", "", "", 0, 0), Limits{}, []string{"noop opaque=9", "version", "quitq", "io:EOF"}},
	{"key-any-bytes", pkt(OpGet, "a b\r\n\x00", "", "", 0, 0), Limits{}, []string{`get "a b\r\n\x00"`, "io:EOF"}},
	{"key-250", pkt(OpGet, strings.Repeat("k", 250), "", "", 0, 0), Limits{}, []string{`get "` + strings.Repeat("k", 250) + `"`, "io:EOF"}},

	// Errors that keep the connection.
	{"unknown-skips-body", pkt(0x42, "key", "ext", "value", 5, 0) + noop, Limits{}, []string{`status 0x81 "Unknown command"`, "noop opaque=9", "io:EOF"}},
	{"verbosity-unknown", pkt(0x1b, "", be32(1), "", 0, 0) + noop, Limits{}, []string{`status 0x81 "Unknown command"`, "noop opaque=9", "io:EOF"}},
	{"sasl-unknown", pkt(0x21, "PLAIN", "", "secret", 0, 0) + noop, Limits{}, []string{`status 0x81 "Unknown command"`, "noop opaque=9", "io:EOF"}},
	{"too-large", pkt(OpSet, "k", be32(0)+be32(0), "123456", 0, 0) + noop, Limits{MaxItemSize: 5}, []string{`set "k" too large`, "noop opaque=9", "io:EOF"}},
	{"append-too-large", pkt(OpAppendQ, "k", "", "123456", 0, 0) + noop, Limits{MaxItemSize: 5}, []string{`appendq "k" too large`, "noop opaque=9", "io:EOF"}},
	// memcached reads a touch's extras and key only: more body is the next request.
	{"touch-body-is-next-request", pkt(OpTouch, "k", be32(1), noop, 0, 0), Limits{}, []string{`touch "k" exp=1`, "noop opaque=9", "io:EOF"}},

	// Errors that close it.
	{"bad-magic", "\x81" + noop[1:], Limits{}, []string{"close"}},
	{"text", "get foo bar baz qux quux\r\n", Limits{}, []string{"close"}},
	{"key-longer-than-body", pktLen(OpGet, "foo", "", "", 0, 0, 3, 2), Limits{}, []string{`status 0x81 "Unknown command" close`}},
	{"key-251", pkt(OpGet, strings.Repeat("k", 251), "", "", 0, 0), Limits{}, []string{`status 0x4 "Invalid arguments" close`}},
	{"get-extras", pkt(OpGet, "k", "abcd", "", 0, 0), Limits{}, []string{`status 0x4 "Invalid arguments" close`}},
	{"get-no-key", pkt(OpGet, "", "", "", 0, 0), Limits{}, []string{`status 0x4 "Invalid arguments" close`}},
	{"set-no-extras", pkt(OpSet, "k", "", "v", 0, 0), Limits{}, []string{`status 0x4 "Invalid arguments" close`}},
	{"delete-extras", pkt(OpDelete, "k", be32(0), "", 0, 0), Limits{}, []string{`status 0x4 "Invalid arguments" close`}},
	{"incr-value", pkt(OpIncrement, "n", be64(1)+be64(0)+be32(0), "x", 0, 0), Limits{}, []string{`status 0x4 "Invalid arguments" close`}},
	{"flush-key", pkt(OpFlush, "k", "", "", 0, 0), Limits{}, []string{`status 0x4 "Invalid arguments" close`}},
	{"quit-body", pkt(OpQuit, "", "", "x", 0, 0), Limits{}, []string{`status 0x4 "Invalid arguments" close`}},
	{"stat-extras", pkt(OpStat, "", "abcd", "", 0, 0), Limits{}, []string{`status 0x4 "Invalid arguments" close`}},

	// The stream ends.
	{"empty", "", Limits{}, []string{"io:EOF"}},
	{"half-header", noop[:10], Limits{}, []string{"io:unexpected EOF"}},
	{"half-key", pkt(OpGet, "foo", "", "", 0, 0)[:25], Limits{}, []string{"io:unexpected EOF"}},
	{"half-value", pkt(OpSet, "k", be32(0)+be32(0), "hello", 0, 0)[:36], Limits{}, []string{"io:unexpected EOF"}},
	{"half-skipped-body", pkt(0x42, "", "", "hello", 0, 0)[:26], Limits{}, []string{"io:unexpected EOF"}},
}

func TestReadBinary(t *testing.T) {
	for _, tc := range binaryReadCases {
		t.Run(tc.name, func(t *testing.T) {
			got := readAllBinary(tc.in, tc.lim)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
			// The same, a byte at a time.
			rd := NewReader(iotest.OneByteReader(strings.NewReader(tc.in)), tc.lim)
			var req BinaryRequest
			for i, want := range tc.want {
				err := rd.ReadBinary(&req)
				if got := describeBinary(&req, err); got != want {
					t.Fatalf("a byte at a time, outcome %d: got %q, want %q", i, got, want)
				}
				if err != nil && Fatal(err) {
					break
				}
			}
		})
	}
}

func TestIsBinary(t *testing.T) {
	for in, want := range map[string]bool{noop: true, "get k\r\n": false, "\x81": false} {
		if got, err := NewReader(strings.NewReader(in), Limits{}).IsBinary(); got != want || err != nil {
			t.Errorf("IsBinary(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := NewReader(strings.NewReader(""), Limits{}).IsBinary(); err != io.EOF {
		t.Errorf("IsBinary of an empty stream: %v", err)
	}
	// It only peeks: the request is still there to read.
	rd := NewReader(strings.NewReader(noop), Limits{})
	var req BinaryRequest
	if ok, _ := rd.IsBinary(); !ok || rd.ReadBinary(&req) != nil || req.Opcode != OpNoop {
		t.Fatalf("after IsBinary: %s", describeBinary(&req, nil))
	}
}

// readOne reads the single request in.
func readOne(t *testing.T, in string) *BinaryRequest {
	t.Helper()
	var req BinaryRequest
	if err := NewReader(strings.NewReader(in), Limits{}).ReadBinary(&req); err != nil {
		t.Fatalf("ReadBinary: %v", err)
	}
	return &req
}

func TestBinaryTwin(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"get", pkt(OpGetQ, "k", "", "", 1, 0), "mg k v f c"},
		{"getk", pkt(OpGetK, "k", "", "", 1, 0), "mg k v f c"},
		{"touch", pkt(OpTouch, "k", be32(100), "", 0, 0), "mg k T100 f c"},
		{"gat", pkt(OpGATKQ, "k", be32(100), "", 0, 0), "mg k T100 v f c"},
		{"set", pkt(OpSet, "k", be32(3)+be32(60), "hello", 0, 0), "ms k 5 F3 T60 c"},
		{"set-cas", pkt(OpSetQ, "k", be32(0)+be32(0), "v", 0, 42), "ms k 1 F0 T0 C42 c"},
		{"add", pkt(OpAdd, "k", be32(0)+be32(0), "v", 0, 0), "ms k 1 F0 T0 ME c"},
		{"add-cas-is-cas", pkt(OpAdd, "k", be32(0)+be32(0), "v", 0, 7), "ms k 1 F0 T0 C7 c"},
		{"replace", pkt(OpReplaceQ, "k", be32(0)+be32(0), "v", 0, 0), "ms k 1 F0 T0 MR c"},
		{"append", pkt(OpAppend, "k", "", "++", 0, 0), "ms k 2 MA c"},
		{"prepend-cas", pkt(OpPrependQ, "k", "", "--", 0, 9), "ms k 2 MP C9 c"},
		{"delete", pkt(OpDelete, "k", "", "", 0, 0), "md k"},
		{"delete-cas", pkt(OpDeleteQ, "k", "", "", 0, 5), "md k C5"},
		{"incr", pkt(OpIncrement, "n", be64(2)+be64(10)+be32(0), "", 0, 0), "ma n D2 MI N0 J10 v c"},
		{"decr-no-create", pkt(OpDecrementQ, "n", be64(1)+be64(0)+be32(0xffffffff), "", 0, 3), "ma n D1 MD C3 v c"},
		{"exptime-past-2038", pkt(OpSet, "k", be32(0)+be32(0xfffffff0), "v", 0, 0), "ms k 1 F0 T2147483647 c"},
		{"key-base64", pkt(OpGet, "a b", "", "", 0, 0), "mg YSBi b v f c"},
		{"key-control", pkt(OpDelete, "a\x00", "", "", 0, 0), "md YQA= b"},
	}
	var twin Request
	for _, tt := range tests {
		req := readOne(t, tt.in)
		req.Twin(&twin)
		line := string(AppendRequest(nil, &twin, nil))
		if line != tt.want {
			t.Errorf("%s: twin %q, want %q", tt.name, line, tt.want)
		}
		// The twin is a request a text client could have sent.
		var back Request
		if err := Parse([]byte(line), &back); err != nil {
			t.Errorf("%s: the twin %q does not parse: %v", tt.name, line, err)
		} else if !bytes.Equal(back.Key, req.Key) || string(back.Meta.Order()) != string(twin.Meta.Order()) {
			t.Errorf("%s: the twin %q parses as key %q flags %q", tt.name, line, back.Key, back.Meta.Order())
		}
	}
	others := []struct {
		in   string
		want string
	}{
		{pkt(OpFlushQ, "", be32(30), "", 0, 0), "flush_all exp=30"},
		{pkt(OpFlush, "", be32(0xffffffff), "", 0, 0), "flush_all exp=2147483647"},
		{pkt(OpNoop, "", "", "", 0, 0), "mn"},
		{pkt(OpVersion, "", "", "", 0, 0), "version"},
		{pkt(OpQuitQ, "", "", "", 0, 0), "quit"},
		{pkt(OpStat, "", "", "", 0, 0), "stats"},
		{pkt(OpStat, "settingsXY", "", "", 0, 0), `stats args=["settings"]`},
		{pkt(OpStat, "reset", "", "", 0, 0), `stats args=["reset"]`},
		{pkt(OpStat, "items", "", "", 0, 0), `stats args=["items"]`},
	}
	for _, tt := range others {
		req := readOne(t, tt.in)
		req.Twin(&twin)
		if got := describe(&twin, nil); got != tt.want {
			t.Errorf("%s: twin %q, want %q", req.Opcode, got, tt.want)
		}
	}
}

// response describes the packets BinaryReply writes for one twin reply.
func response(req *BinaryRequest, line, value string) string {
	var out bytes.Buffer
	w := NewWriter(&out)
	var v []byte
	if value != "" {
		v = []byte(value)
	}
	w.BinaryReply(req, []byte(line), v)
	w.Flush()
	var s []string
	b := out.Bytes()
	for len(b) >= 24 {
		keylen, extlen := int(binary.BigEndian.Uint16(b[2:])), int(b[4])
		n := 24 + int(binary.BigEndian.Uint32(b[8:]))
		body := b[24:n]
		p := fmt.Sprintf("%s %#x", Opcode(b[1]), binary.BigEndian.Uint16(b[6:]))
		if b[0] != binaryResMagic || b[5] != 0 || binary.BigEndian.Uint32(b[12:]) != req.Opaque {
			p += fmt.Sprintf(" BAD HEADER %x", b[:24])
		}
		if cas := binary.BigEndian.Uint64(b[16:]); cas != 0 {
			p += fmt.Sprintf(" cas=%d", cas)
		}
		if extlen > 0 {
			p += fmt.Sprintf(" extras=%x", body[:extlen])
		}
		if keylen > 0 {
			p += fmt.Sprintf(" key=%q", body[extlen:extlen+keylen])
		}
		if len(body) > extlen+keylen {
			p += fmt.Sprintf(" %q", body[extlen+keylen:])
		}
		s = append(s, p)
		b = b[n:]
	}
	if len(b) > 0 {
		s = append(s, fmt.Sprintf("TRAILING %q", b))
	}
	return strings.Join(s, "; ")
}

func TestBinaryReply(t *testing.T) {
	get := pkt(OpGet, "k", "", "", 7, 0)
	getkq := pkt(OpGetKQ, "k", "", "", 7, 0)
	set := pkt(OpSet, "k", be32(0)+be32(0), "v", 7, 0)
	setq := pkt(OpSetQ, "k", be32(0)+be32(0), "v", 7, 0)
	add := pkt(OpAdd, "k", be32(0)+be32(0), "v", 7, 0)
	addCAS := pkt(OpAdd, "k", be32(0)+be32(0), "v", 7, 1)
	replace := pkt(OpReplace, "k", be32(0)+be32(0), "v", 7, 0)
	appendq := pkt(OpAppendQ, "k", "", "v", 7, 0)
	incr := pkt(OpIncrement, "n", be64(1)+be64(0)+be32(0), "", 7, 0)
	incrq := pkt(OpIncrementQ, "n", be64(1)+be64(0)+be32(0), "", 7, 0)
	touch := pkt(OpTouch, "k", be32(1), "", 7, 0)
	gatk := pkt(OpGATK, "k", be32(1), "", 7, 0)
	stat := pkt(OpStat, "", "", "", 7, 0)
	tests := []struct {
		req, line, value, want string
	}{
		{get, "VA 5 f3 c42", "hello", `get 0x0 cas=42 extras=00000003 "hello"`},
		{get, "EN", "", `get 0x1 "Not found"`},
		{getkq, "VA 5 f3 c42", "hello", `getkq 0x0 cas=42 extras=00000003 key="k" "hello"`},
		{getkq, "EN", "", ``},
		{pkt(OpGetK, "k", "", "", 7, 0), "EN", "", `getk 0x1 key="k"`},
		{touch, "HD f3 c42", "", `touch 0x0 cas=42 extras=00000003`},
		{gatk, "VA 1 f0 c2", "v", `gatk 0x0 cas=2 extras=00000000 key="k" "v"`},
		{set, "HD c42", "", `set 0x0 cas=42`},
		{setq, "HD c42", "", ``},
		{set, "EX", "", `set 0x2 "Data exists for key."`},
		{setq, "NF", "", `setq 0x1 "Not found"`},
		{set, "NS", "", `set 0x5 "Not stored."`},
		{add, "NS", "", `add 0x2 "Data exists for key."`},
		{addCAS, "NS", "", `add 0x5 "Not stored."`},
		{replace, "NS", "", `replace 0x1 "Not found"`},
		{appendq, "NS", "", `appendq 0x5 "Not stored."`},
		{set, "SERVER_ERROR object too large for cache", "", `set 0x3 "Too large."`},
		{set, "SERVER_ERROR owner unreachable: timeout", "", `set 0x82 "owner unreachable: timeout"`},
		{set, "CLIENT_ERROR bad data chunk", "", `set 0x4 "bad data chunk"`},
		{set, "ERROR", "", `set 0x81 "Unknown command"`},
		{set, "WHAT", "", `set 0x82 "WHAT"`},
		{pkt(OpDelete, "k", "", "", 7, 0), "HD", "", `delete 0x0`},
		{pkt(OpDeleteQ, "k", "", "", 7, 0), "HD", "", ``},
		{incr, "VA 2 c9", "15", `increment 0x0 cas=9 "\x00\x00\x00\x00\x00\x00\x00\x0f"`},
		{incrq, "VA 2 c9", "15", ``},
		{incrq, "CLIENT_ERROR cannot increment or decrement non-numeric value", "", `incrementq 0x6 "Non-numeric server-side value for incr or decr"`},
		{incr, "NF", "", `increment 0x1 "Not found"`},
		{pkt(OpFlush, "", "", "", 7, 0), "OK", "", `flush 0x0`},
		{pkt(OpFlushQ, "", "", "", 7, 0), "OK", "", ``},
		{pkt(OpNoop, "", "", "", 7, 0), "MN", "", `noop 0x0`},
		{pkt(OpVersion, "", "", "", 7, 0), "VERSION 1.6.18", "", `version 0x0 "1.6.18"`},
		{stat, "STAT pid 42", "", `stat 0x0 key="pid" "42"`},
		{stat, "STAT version 1.6.18 x", "", `stat 0x0 key="version" "1.6.18 x"`},
		{stat, "END", "", `stat 0x0`},
		{stat, "RESET", "", `stat 0x0`},
		{stat, "ERROR", "", `stat 0x1 "Not found"`},
		{stat, "CLIENT_ERROR usage: stats detail on|off|dump", "", `stat 0x1 "Not found"`},
	}
	for _, tt := range tests {
		req := readOne(t, tt.req)
		if got := response(req, tt.line, tt.value); got != tt.want {
			t.Errorf("%s, %q: got %s, want %s", req.Opcode, tt.line, got, tt.want)
		}
	}
}

// TestReadBinaryAllocs: reading a request allocates nothing but a
// storage command's value.
func TestReadBinaryAllocs(t *testing.T) {
	in := pkt(OpGetKQ, "user:1001", "", "", 1, 0) + pkt(OpDelete, "user:1001", "", "", 2, 0) +
		pkt(OpIncrement, "n", be64(1)+be64(0)+be32(0), "", 3, 0) + pkt(OpTouch, "k", be32(5), "", 4, 0)
	rd := NewReader(&loopReader{b: []byte(strings.Repeat(in, 64))}, Limits{})
	var req BinaryRequest
	var twin Request
	w := NewWriter(io.Discard)
	miss := []byte("EN")
	if n := testing.AllocsPerRun(1000, func() {
		if err := rd.ReadBinary(&req); err != nil {
			t.Fatal(err)
		}
		req.Twin(&twin)
		w.BinaryReply(&req, miss, nil)
	}); n != 0 {
		t.Fatalf("%v allocations per request", n)
	}
}

func BenchmarkReadBinaryGet(b *testing.B) {
	in := []byte(pkt(OpGetK, "user:1001", "", "", 1, 0))
	rd := NewReader(&loopReader{b: bytes.Repeat(in, 64)}, Limits{})
	var req BinaryRequest
	var twin Request
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if err := rd.ReadBinary(&req); err != nil {
			b.Fatal(err)
		}
		req.Twin(&twin)
	}
}

func BenchmarkBinaryReplyHit(b *testing.B) {
	var req BinaryRequest
	if err := NewReader(strings.NewReader(pkt(OpGetK, "user:1001", "", "", 1, 0)), Limits{}).ReadBinary(&req); err != nil {
		b.Fatal(err)
	}
	w := NewWriter(io.Discard)
	line, value := []byte("VA 100 f42 c12345"), bytes.Repeat([]byte("v"), 100)
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	for b.Loop() {
		w.BinaryReply(&req, line, value)
	}
}

// twinReplies are reply lines of every shape a twin can get.
var twinReplies = [][]byte{
	[]byte("VA 2 f1 c2"), []byte("HD f1 c3"), []byte("EN"), []byte("NS"), []byte("EX"), []byte("NF"),
	[]byte("OK"), []byte("MN"), []byte("VERSION 1.6.18"), []byte("STAT a b"), []byte("END"), []byte("RESET"),
	[]byte("ERROR"), []byte("CLIENT_ERROR x"), []byte("SERVER_ERROR y"), []byte("SERVER_ERROR object too large for cache"), []byte(""),
}

// FuzzBinary reads binary requests from any stream: no panic, no
// request out of bounds; every twin of a meta command is a line Parse
// reads back as the same request; every response is whole packets that
// echo the request's opcode and opaque.
func FuzzBinary(f *testing.F) {
	for _, tc := range binaryReadCases {
		if len(tc.in) < 4096 {
			f.Add([]byte(tc.in))
		}
	}
	rd, src := NewReader(nil, Limits{MaxItemSize: 1024}), new(bytes.Reader)
	var req BinaryRequest
	var twin, back Request
	var out bytes.Buffer
	w := NewWriter(&out)
	f.Fuzz(func(t *testing.T, in []byte) {
		src.Reset(in)
		rd.Reset(src)
		for {
			err := rd.ReadBinary(&req)
			out.Reset()
			w.Reset(&out)
			if err != nil {
				w.BinaryError(&req, err)
				w.Flush()
				checkPackets(t, &req, out.Bytes())
				if Fatal(err) {
					return
				}
				continue
			}
			if len(req.Key) > KeyMax || len(req.Value) > 1024 {
				t.Fatalf("key of %d bytes, value of %d", len(req.Key), len(req.Value))
			}
			req.Twin(&twin)
			if twin.Command == 0 {
				t.Fatalf("%s has no twin", req.Opcode)
			}
			if twin.Command >= CmdMetaGet && twin.Command <= CmdMetaArith {
				line := AppendRequest(nil, &twin, nil)
				err := Parse(line, &back)
				switch {
				case err != nil && twin.Meta.Flags.Has('b') && len(req.Key) > KeyMax/4*3:
					// A key that needs base64 and is too long for it:
					// the twin cannot be passed on in a line.
				case err != nil:
					t.Fatalf("twin %q of %s: %v", line, req.Opcode, err)
				case !bytes.Equal(back.Key, twin.Key) || string(back.Meta.Order()) != string(twin.Meta.Order()) || back.DataLen() != twin.DataLen():
					t.Fatalf("twin %q of %s read back as %s", line, req.Opcode, describe(&back, nil))
				}
			}
			for _, line := range twinReplies {
				w.BinaryReply(&req, line, []byte("12"))
			}
			w.Flush()
			checkPackets(t, &req, out.Bytes())
		}
	})
}

// checkPackets fails unless b is whole response packets to req.
func checkPackets(t *testing.T, req *BinaryRequest, b []byte) {
	t.Helper()
	for len(b) > 0 {
		if len(b) < 24 {
			t.Fatalf("%d trailing bytes", len(b))
		}
		keylen, extlen, bodylen := int(binary.BigEndian.Uint16(b[2:])), int(b[4]), int(binary.BigEndian.Uint32(b[8:]))
		if b[0] != binaryResMagic || Opcode(b[1]) != req.Opcode || binary.BigEndian.Uint32(b[12:]) != req.Opaque ||
			keylen+extlen > bodylen || 24+bodylen > len(b) {
			t.Fatalf("bad response header %x to %s (%d bytes follow)", b[:24], req.Opcode, len(b)-24)
		}
		b = b[24+bodylen:]
	}
}
