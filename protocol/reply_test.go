package protocol

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

// replyCases are whole streams; each is read reply by reply until an error.
var replyCases = []struct {
	name string
	wire string
	want []string // "line" or "line|value" per reply read
	err  error    // the error that ends the stream
}{
	{"miss", "END\r\n", []string{"END"}, io.EOF},
	{"hit", "VALUE k 5 3\r\nabc\r\nEND\r\n", []string{"VALUE k 5 3|abc", "END"}, io.EOF},
	{"hit-cas", "VALUE k 0 2 99\r\nab\r\nEND\r\n", []string{"VALUE k 0 2 99|ab", "END"}, io.EOF},
	{"empty-value", "VALUE k 0 0\r\n\r\nEND\r\n", []string{"VALUE k 0 0|", "END"}, io.EOF},
	{"value-holds-crlf", "VALUE k 0 4\r\na\r\nb\r\n", []string{"VALUE k 0 4|a\r\nb"}, io.EOF},
	{"two-values", "VALUE a 0 1\r\nx\r\nVALUE b 0 2\r\nyy\r\nEND\r\n", []string{"VALUE a 0 1|x", "VALUE b 0 2|yy", "END"}, io.EOF},
	{"meta-value", "VA 2 f5 c123 t-1\r\nhi\r\nMN\r\n", []string{"VA 2 f5 c123 t-1|hi", "MN"}, io.EOF},
	{"meta-lines", "HD c7\r\nEN\r\nNF\r\n", []string{"HD c7", "EN", "NF"}, io.EOF},
	{"stats", "STAT pid 12\r\nSTAT version 1.6.18\r\nEND\r\n", []string{"STAT pid 12", "STAT version 1.6.18", "END"}, io.EOF},
	{"errors", "ERROR\r\nSERVER_ERROR out of memory\r\n", []string{"ERROR", "SERVER_ERROR out of memory"}, io.EOF},
	{"closed", "", nil, io.EOF},

	{"no-eol", "END\n", nil, ErrBadReply},
	{"no-cr-mid-stream", "STORED\r\nEND\n", []string{"STORED"}, ErrBadReply},
	{"unterminated-line", "END", nil, io.ErrUnexpectedEOF},
	{"value-no-size", "VALUE k 0\r\n", nil, ErrBadReply},
	{"value-bad-size", "VALUE k 0 x\r\n", nil, ErrBadReply},
	{"value-negative-size", "VALUE k 0 -1\r\n", nil, ErrBadReply},
	{"value-size-overflow", "VALUE k 0 99999999999999999999\r\n", nil, ErrBadReply},
	{"value-bad-flags", "VALUE k 4294967296 1\r\nx\r\n", nil, ErrBadReply},
	{"value-bad-cas", "VALUE k 0 1 -5\r\nx\r\n", nil, ErrBadReply},
	{"value-extra-token", "VALUE k 0 1 5 6\r\nx\r\n", nil, ErrBadReply},
	{"value-alone", "VALUE\r\n", nil, ErrBadReply},
	{"meta-value-no-size", "VA\r\n", nil, ErrBadReply},
	{"meta-value-bad-size", "VA f1\r\n", nil, ErrBadReply},
	{"over-max-value", "VALUE k 0 65\r\n" + strings.Repeat("v", 65) + "\r\nEND\r\n", nil, ErrValueTooLarge},
	{"over-max-value-truncated", "VALUE k 0 65\r\n", nil, io.ErrUnexpectedEOF},
	{"over-max-value-not-terminated", "VA 65\r\n" + strings.Repeat("v", 67) + "\r\n", nil, ErrBadReply},
	{"over-max-value-beyond-skipping", "VA 2000000000\r\n", nil, ErrBadReply},
	{"block-not-terminated", "VALUE k 0 2\r\nabcd\r\n", nil, ErrBadReply},
	{"block-truncated", "VALUE k 0 40\r\nabc", nil, io.ErrUnexpectedEOF},
	{"block-missing", "VALUE k 0 4\r\n", nil, io.ErrUnexpectedEOF},
	{"line-too-long", "STAT " + strings.Repeat("x", 100) + "\r\n", nil, ErrBadReply},
}

// A value over MaxValue fails its own reply only: the stream reads on.
func TestReplyReaderSkipsLargeValue(t *testing.T) {
	br := bufio.NewReaderSize(strings.NewReader("VA 65\r\n"+strings.Repeat("v", 65)+"\r\nVA 2\r\nok\r\n"), 64)
	rr := ReplyReader{MaxValue: 64}
	if _, _, err := rr.Read(br); !errors.Is(err, ErrValueTooLarge) {
		t.Fatalf("a 65-byte value: %v, want ErrValueTooLarge", err)
	}
	if line, value, err := rr.Read(br); err != nil || string(line) != "VA 2" || string(value) != "ok" {
		t.Fatalf("the reply after it: %q %q %v", line, value, err)
	}
}

func TestReplyReader(t *testing.T) {
	for _, tc := range replyCases {
		t.Run(tc.name, func(t *testing.T) {
			// A 64-byte buffer: lines longer than that are refused.
			br := bufio.NewReaderSize(strings.NewReader(tc.wire), 64)
			rr := ReplyReader{MaxValue: 64}
			var got []string
			for {
				line, value, err := rr.Read(br)
				if err != nil {
					if !errors.Is(err, tc.err) {
						t.Errorf("error %v, want %v", err, tc.err)
					}
					break
				}
				s := string(line)
				if value != nil {
					s += "|" + string(value)
				}
				got = append(got, s)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("read %q, want %q", got, tc.want)
			}
		})
	}
}

// TestReplyReaderValueBuffers: a value is the reader's buffer until the
// next Read; a large one is not kept for the next.
func TestReplyReaderValueBuffers(t *testing.T) {
	big := strings.Repeat("v", keepValueBuf)
	br := bufio.NewReader(strings.NewReader("VA 3\r\nabc\r\nVA 3\r\nxyz\r\nVA 65536\r\n" + big + "\r\nVA 1\r\nq\r\n"))
	var rr ReplyReader // zero value: 1 MiB limit
	_, v1, _ := rr.Read(br)
	_, v2, _ := rr.Read(br)
	if &v1[0] != &v2[0] || string(v2) != "xyz" {
		t.Errorf("small values do not share the buffer (%q)", v2)
	}
	if _, v, err := rr.Read(br); err != nil || len(v) != len(big) {
		t.Fatalf("big value: %d bytes, %v", len(v), err)
	}
	if cap(rr.value) > keepValueBuf {
		t.Errorf("kept a %d-byte buffer", cap(rr.value))
	}
	if _, v, err := rr.Read(br); err != nil || string(v) != "q" {
		t.Errorf("after the big value: %q, %v", v, err)
	}
}

func TestParseValueLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		line string
		want ValueLine
		ok   bool
	}{
		{"plain", "VALUE k 5 3", ValueLine{Key: []byte("k"), Flags: 5, Size: 3}, true},
		{"cas", "VALUE key:1 4294967295 0 18446744073709551615", ValueLine{Key: []byte("key:1"), Flags: 1<<32 - 1, CAS: 1<<64 - 1, HasCAS: true}, true},
		{"not-value", "VA 3 f1", ValueLine{}, false},
		{"no-key", "VALUE", ValueLine{}, false},
		{"flags-overflow", "VALUE k 4294967296 3", ValueLine{}, false},
		{"cas-overflow", "VALUE k 0 3 18446744073709551616", ValueLine{}, false},
		{"signed-size", "VALUE k 0 +3", ValueLine{}, false},
		{"extra", "VALUE k 0 3 1 2", ValueLine{}, false},
	} {
		got, ok := ParseValueLine([]byte(tc.line))
		if ok != tc.ok || string(got.Key) != string(tc.want.Key) || got.Flags != tc.want.Flags ||
			got.Size != tc.want.Size || got.CAS != tc.want.CAS || got.HasCAS != tc.want.HasCAS {
			t.Errorf("%s: ParseValueLine(%q) = %+v, %v; want %+v, %v", tc.name, tc.line, got, ok, tc.want, tc.ok)
		}
	}
}

func TestMetaReplyFlag(t *testing.T) {
	for _, tc := range []struct {
		line string
		f    byte
		want string
		ok   bool
	}{
		{"VA 2 f5 c123 t-1", 'c', "123", true},
		{"VA 2 f5 c123 t-1", 't', "-1", true},
		{"VA 2 f5", 'c', "", false},
		{"VA 22 s9", '2', "", false}, // <bytes> is not a flag
		{"HD c7 Oabc", 'O', "abc", true},
		{"HD k", 'k', "", true},
		{"EN", 'c', "", false},
		{"", 'c', "", false},
	} {
		got, ok := MetaReplyFlag([]byte(tc.line), tc.f)
		if string(got) != tc.want || ok != tc.ok {
			t.Errorf("MetaReplyFlag(%q, %c) = %q, %v; want %q, %v", tc.line, tc.f, got, ok, tc.want, tc.ok)
		}
	}
}

func TestReplyReaderAllocs(t *testing.T) {
	wire := "VALUE some:key:1234 42 10 77\r\n0123456789\r\nEND\r\nVA 3 f1 c2\r\nabc\r\n"
	r := strings.NewReader(wire)
	br := bufio.NewReader(r)
	var rr ReplyReader
	n := testing.AllocsPerRun(100, func() {
		r.Reset(wire)
		br.Reset(r)
		for range 3 {
			line, _, err := rr.Read(br)
			if err != nil {
				t.Fatal(err)
			}
			ParseValueLine(line)
			MetaReplyFlag(line, 'c')
		}
	})
	if n != 0 {
		t.Errorf("%v allocs per stream, want 0", n)
	}
}

func BenchmarkReplyReaderHit(b *testing.B) {
	wire := "VALUE bench:1 0 100\r\n" + strings.Repeat("v", 100) + "\r\nEND\r\n"
	r := strings.NewReader(wire)
	br := bufio.NewReader(r)
	var rr ReplyReader
	b.ReportAllocs()
	b.SetBytes(int64(len(wire)))
	for b.Loop() {
		r.Reset(wire)
		br.Reset(r)
		if _, v, err := rr.Read(br); err != nil || len(v) != 100 {
			b.Fatal(err)
		}
		if _, _, err := rr.Read(br); err != nil {
			b.Fatal(err)
		}
	}
}
