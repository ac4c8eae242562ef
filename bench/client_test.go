package bench

import (
	"bufio"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"spillway/protocol"
)

// replyConn is a conn whose reader reads wire, for key index 1 ("bench:1")
// of a run with id 1 that has issued versions 1..3 of it.
func replyConn(r io.Reader) *conn {
	e := &engine{run: 1, versions: make([]atomic.Uint32, 2)}
	e.versions[1].Store(3)
	return &conn{w: &worker{e: e}, br: bufio.NewReader(r), rr: protocol.ReplyReader{MaxValue: maxValue}}
}

func TestReadReply(t *testing.T) {
	good := string(appendValue(nil, []byte("bench:1"), 1, 2, 40))
	value := func(head, data string) string {
		return head + " " + strconv.Itoa(len(data)) + "\r\n" + data + "\r\nEND\r\n"
	}
	for _, tc := range []struct {
		name     string
		op       opKind
		wire     string
		kind     string
		hit      bool
		fatal    error // errors.Is target; nil: connection stays usable
		anyFatal bool
	}{
		{"miss", opGet, "END\r\n", "", false, nil, false},
		{"hit", opGet, value("VALUE bench:1 0", good), "", true, nil, false},
		{"hit-with-cas", opGet, strings.Replace(value("VALUE bench:1 5", good), "\r\n", " 99\r\n", 1), "", true, nil, false},
		{"hit-other-run", opGet, value("VALUE bench:1 0", string(appendValue(nil, []byte("bench:1"), 7, 9, 40))), "", true, nil, false},
		{"wrong-key", opGet, value("VALUE bench:2 0", good), kindCorrupt, false, nil, false},
		{"flipped-byte", opGet, value("VALUE bench:1 0", strings.Replace(good, "bench:1:", "bench:1:0", 1)[:len(good)]), kindCorrupt, false, nil, false},
		{"future-version", opGet, value("VALUE bench:1 0", string(appendValue(nil, []byte("bench:1"), 1, 4, 40))), kindCorrupt, false, nil, false},
		{"server-error", opGet, "SERVER_ERROR out of memory storing object\r\n", kindServer, false, nil, false},
		{"client-error", opSet, "CLIENT_ERROR bad data chunk\r\n", kindClient, false, nil, false},
		{"error", opGet, "ERROR\r\n", kindError, false, nil, false},
		{"stored", opSet, "STORED\r\n", "", false, nil, false},
		{"not-stored", opSet, "NOT_STORED\r\n", kindNotStored, false, nil, false},
		{"set-exists", opSet, "EXISTS\r\n", "", false, errProtocol, true},
		{"set-value", opSet, value("VALUE bench:1 0", good), "", false, errProtocol, true},
		{"bad-size", opGet, "VALUE bench:1 0 x\r\n", "", false, protocol.ErrBadReply, true},
		{"no-size", opGet, "VALUE bench:1\r\n", "", false, protocol.ErrBadReply, true},
		{"too-large", opGet, "VALUE bench:1 0 67108865\r\n", "", false, io.ErrUnexpectedEOF, true},
		{"too-large-to-skip", opGet, "VALUE bench:1 0 2147483648\r\n", "", false, protocol.ErrBadReply, true},
		{"no-data-crlf", opGet, "VALUE bench:1 0 2\r\nabcd\r\nEND\r\n", "", false, protocol.ErrBadReply, true},
		{"no-end", opGet, "VALUE bench:1 0 2\r\nab\r\nVALUE", "", false, io.ErrUnexpectedEOF, true},
		{"junk-after-value", opGet, "VALUE bench:1 0 2\r\nab\r\nSTORED\r\n", "", false, errProtocol, true},
		{"meta-value-to-get", opGet, "VA 2\r\nab\r\nEND\r\n", "", false, errProtocol, true},
		{"no-eol", opGet, "END\n", "", false, protocol.ErrBadReply, true},
		{"truncated", opGet, "VALUE bench:1 0 40\r\nabc", "", false, io.ErrUnexpectedEOF, true},
		{"closed", opGet, "", "", false, io.EOF, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := replyConn(strings.NewReader(tc.wire))
			kind, hit, detail, err := c.readReply(&op{kind: tc.op, key: []byte("bench:1"), index: 1})
			if tc.anyFatal {
				if err == nil || (tc.fatal != nil && !errors.Is(err, tc.fatal)) {
					t.Fatalf("err = %v, want %v", err, tc.fatal)
				}
				return
			}
			if err != nil || kind != tc.kind || hit != tc.hit {
				t.Fatalf("got kind %q hit %v err %v, want kind %q hit %v", kind, hit, err, tc.kind, tc.hit)
			}
			if (kind == kindCorrupt) != errors.Is(detail, errCorrupt) {
				t.Errorf("detail %v for kind %q", detail, kind)
			}
		})
	}
}

// loop repeats b forever.
type loop struct {
	b   []byte
	off int
}

func (l *loop) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k := copy(p[n:], l.b[l.off:])
		n += k
		l.off = (l.off + k) % len(l.b)
	}
	return n, nil
}

func BenchmarkReadReplyHit(b *testing.B) {
	val := appendValue(nil, []byte("bench:1"), 1, 2, 100)
	wire := "VALUE bench:1 0 " + strconv.Itoa(len(val)) + "\r\n" + string(val) + "\r\nEND\r\n"
	c := replyConn(&loop{b: []byte(wire)})
	o := &op{kind: opGet, key: []byte("bench:1"), index: 1}
	b.ReportAllocs()
	b.SetBytes(int64(len(wire)))
	for b.Loop() {
		if _, hit, _, err := c.readReply(o); err != nil || !hit {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendValue(b *testing.B) {
	key := []byte("bench:12345")
	var buf []byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf = appendValue(buf[:0], key, 1, uint32(i), 100)
	}
}
