package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestWriter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(w *Writer)
		want  string
	}{
		{"value", func(w *Writer) { w.Value([]byte("k"), 5, []byte("abc")) }, "VALUE k 5 3\r\nabc\r\n"},
		{"value-empty", func(w *Writer) { w.Value([]byte("k"), 0, nil) }, "VALUE k 0 0\r\n\r\n"},
		{"value-max-flags", func(w *Writer) { w.Value([]byte("k"), 4294967295, []byte("a")) }, "VALUE k 4294967295 1\r\na\r\n"},
		{"value-cas", func(w *Writer) { w.ValueCAS([]byte("k"), 0, []byte("a"), 18446744073709551615) }, "VALUE k 0 1 18446744073709551615\r\na\r\n"},
		{"get-reply", func(w *Writer) {
			w.Value([]byte("a"), 1, []byte("x"))
			w.Value([]byte("b"), 2, []byte("yy"))
			w.Status(End)
		}, "VALUE a 1 1\r\nx\r\nVALUE b 2 2\r\nyy\r\nEND\r\n"},
		{"statuses", func(w *Writer) {
			for s := Stored; s <= MetaNoop; s++ {
				w.Status(s)
			}
		}, "STORED\r\nNOT_STORED\r\nEXISTS\r\nNOT_FOUND\r\nDELETED\r\nTOUCHED\r\nEND\r\nOK\r\nMN\r\n"},
		{"status-unknown", func(w *Writer) { w.Status(0) }, "SERVER_ERROR unknown status\r\n"},
		{"uint", func(w *Writer) { w.Uint(18446744073709551615) }, "18446744073709551615\r\n"},
		{"line", func(w *Writer) { w.Line("VERSION 1.6.18") }, "VERSION 1.6.18\r\n"},
		{"stats", func(w *Writer) {
			w.Stat("version", "1.6.18")
			w.StatUint("curr_items", 7)
			w.Status(End)
		}, "STAT version 1.6.18\r\nSTAT curr_items 7\r\nEND\r\n"},

		{"error-nil", func(w *Writer) { w.Error(nil) }, ""},
		{"error-unknown", func(w *Writer) { w.Error(ErrUnknownCommand) }, "ERROR\r\n"},
		{"error-bad-format", func(w *Writer) { w.Error(ErrBadFormat) }, "CLIENT_ERROR bad command line format\r\n"},
		{"error-bad-chunk", func(w *Writer) { w.Error(ErrBadDataChunk) }, "CLIENT_ERROR bad data chunk\r\n"},
		{"error-too-large", func(w *Writer) { w.Error(ErrTooLarge) }, "SERVER_ERROR object too large for cache\r\n"},
		{"error-line-too-long", func(w *Writer) { w.Error(ErrLineTooLong) }, ""},
		{"error-noreply", func(w *Writer) { w.Error(quiet(errBadFmt, true)) }, ""},
		{"error-client", func(w *Writer) { w.Error(ClientError("cannot increment or decrement non-numeric value")) },
			"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"},
		{"error-server", func(w *Writer) { w.Error(ServerError("out of memory")) }, "SERVER_ERROR out of memory\r\n"},
		{"error-wrapped", func(w *Writer) { w.Error(fmt.Errorf("ctx: %w", ErrBadFormat)) }, "CLIENT_ERROR bad command line format\r\n"},
		{"error-wrapped-quiet", func(w *Writer) { w.Error(fmt.Errorf("ctx: %w", quiet(errBadFmt, true))) }, ""},
		{"error-other", func(w *Writer) { w.Error(errors.New("peer down")) }, "SERVER_ERROR peer down\r\n"},
		{"error-other-multiline", func(w *Writer) { w.Error(errors.New("a\r\nb")) }, "SERVER_ERROR a  b\r\n"},

		{"meta-hit", func(w *Writer) {
			w.MetaValueStart(1)
			w.MetaUint('f', 0)
			w.MetaInt('t', -1)
			w.MetaUint('c', 28)
			w.MetaKey([]byte("k"), false)
			w.MetaBytes('O', []byte("123"))
			w.MetaFlag('W')
			w.MetaEnd([]byte("a"))
		}, "VA 1 f0 t-1 c28 kk O123 W\r\na\r\n"},
		{"meta-empty-value", func(w *Writer) { w.MetaValueStart(0); w.MetaEnd(nil) }, "VA 0\r\n\r\n"},
		{"meta-hd", func(w *Writer) { w.MetaStart("HD"); w.MetaEnd(nil) }, "HD\r\n"},
		{"meta-b64-key", func(w *Writer) { w.MetaStart("HD"); w.MetaKey([]byte("k"), true); w.MetaEnd(nil) }, "HD kaw== b\r\n"},
		{"meta-miss", func(w *Writer) { w.MetaStart("EN"); w.MetaEnd(nil); w.MetaStart("MN"); w.MetaEnd(nil) }, "EN\r\nMN\r\n"},
		{"meta-va-then-hd", func(w *Writer) {
			w.MetaValueStart(2)
			w.MetaEnd([]byte("hi"))
			w.MetaStart("HD")
			w.MetaEnd(nil)
		}, "VA 2\r\nhi\r\nHD\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			w := NewWriter(&out)
			tc.write(w)
			if out.Len() != 0 {
				t.Errorf("wrote %d bytes before Flush", out.Len())
			}
			if w.Buffered() != len(tc.want) {
				t.Errorf("Buffered = %d, want %d", w.Buffered(), len(tc.want))
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("got %q\nwant %q", out.String(), tc.want)
			}
		})
	}
}

// Values larger than the buffer, and many small writes that fill it, must
// come out intact and in order.
func TestWriterLarge(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out)
	big := bytes.Repeat([]byte("v"), 3*writeBufSize+7)
	var want strings.Builder
	for i := 0; i < 3000; i++ {
		key := fmt.Sprintf("key%d", i)
		w.Value([]byte(key), uint32(i), []byte("val"))
		fmt.Fprintf(&want, "VALUE %s %d 3\r\nval\r\n", key, i)
	}
	w.ValueCAS([]byte("big"), 1, big, 2)
	fmt.Fprintf(&want, "VALUE big 1 %d 2\r\n%s\r\n", len(big), big)
	w.MetaValueStart(len(big))
	w.MetaEnd(big)
	fmt.Fprintf(&want, "VA %d\r\n%s\r\n", len(big), big)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if out.String() != want.String() {
		t.Errorf("output differs (%d bytes, want %d)", out.Len(), want.Len())
	}
}

func TestWriterErrorSticks(t *testing.T) {
	boom := errors.New("boom")
	w := NewWriter(errWriter{boom})
	w.Value([]byte("k"), 0, bytes.Repeat([]byte("x"), 2*writeBufSize))
	w.Status(End)
	if err := w.Flush(); err != boom {
		t.Errorf("Flush = %v, want boom", err)
	}
}

type errWriter struct{ err error }

func (e errWriter) Write([]byte) (int, error) { return 0, e.err }

func TestWriterAllocs(t *testing.T) {
	w := NewWriter(io.Discard)
	key, val := []byte("some:key:1234"), bytes.Repeat([]byte("v"), 100)
	for name, f := range map[string]func(){
		"Value":    func() { w.Value(key, 42, val) },
		"ValueCAS": func() { w.ValueCAS(key, 42, val, 1234567) },
		"Status":   func() { w.Status(End) },
		"Uint":     func() { w.Uint(12345) },
		"StatUint": func() { w.StatUint("curr_items", 12345) },
		"Error":    func() { w.Error(ErrBadFormat) },
		"Meta": func() {
			w.MetaValueStart(len(val))
			w.MetaUint('c', 99)
			w.MetaKey(key, true)
			w.MetaBytes('O', key)
			w.MetaEnd(val)
		},
	} {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocs, want 0", name, n)
		}
	}
}

func TestWriterReset(t *testing.T) {
	var a, b bytes.Buffer
	w := NewWriter(&a)
	w.Status(Stored)
	w.Reset(&b)
	w.Status(End)
	w.Flush()
	if a.Len() != 0 || b.String() != "END\r\n" {
		t.Errorf("a=%q b=%q", a.String(), b.String())
	}
}
