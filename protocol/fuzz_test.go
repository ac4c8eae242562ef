package protocol

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

func FuzzParse(f *testing.F) {
	for _, tc := range parseCases {
		f.Add([]byte(tc.line))
	}
	for _, tc := range metaCases {
		f.Add([]byte(tc.line))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var req Request
		err := Parse(line, &req)
		first := describe(&req, err)
		if again := describe(&req, Parse(line, &req)); again != first {
			t.Fatalf("Parse is not deterministic: %s then %s", first, again)
		}
		// Only the key and argument lists grow, at most one entry per word.
		if c := cap(req.Keys) + cap(req.Args); c > 2*len(line)+8 {
			t.Fatalf("%d slice entries for a %d-byte line", c, len(line))
		}
		if err != nil {
			if Fatal(err) {
				t.Fatalf("Parse returned a fatal error: %v", err)
			}
			var out bytes.Buffer
			w := NewWriter(&out)
			w.Error(err)
			w.Flush()
			if s := out.String(); s != "" && (strings.Count(s, "\r\n") != 1 || !strings.HasSuffix(s, "\r\n")) {
				t.Fatalf("reply %q is not one line", s)
			}
			return
		}
		if req.Command == 0 {
			t.Fatal("no command and no error")
		}
		if len(req.Key) > KeyMax || len(req.Meta.Opaque) > 31 {
			t.Fatalf("key %d bytes, opaque %d bytes", len(req.Key), len(req.Meta.Opaque))
		}
		for _, k := range req.Keys {
			if len(k) == 0 || len(k) > KeyMax || bytes.IndexByte(k, ' ') >= 0 || bytes.IndexByte(k, 0) >= 0 {
				t.Fatalf("bad key %q", k)
			}
		}
		if n := req.DataLen(); n > 1<<31-3 {
			t.Fatalf("DataLen %d", n)
		}
	})
}

func FuzzReader(f *testing.F) {
	for _, tc := range wireCases {
		if len(tc.in) < 4096 {
			f.Add([]byte(tc.in))
		}
	}
	// Readers are reused (Reset) to keep each run cheap: the fuzzer then
	// spends its time on inputs, and minimizes the long-line ones quickly.
	lim := Limits{MaxItemSize: 1024, MaxGetLine: 4096}
	rd, src := NewReader(nil, lim), new(bytes.Reader)
	f.Fuzz(func(t *testing.T, in []byte) {
		src.Reset(in)
		rd.Reset(src)
		whole := fuzzRead(t, rd, len(in))
		if len(in) > 3*MaxLineLen {
			return // trickling costs a fill per byte; long inputs would stall minimization
		}
		src.Reset(in)
		rd.Reset(iotest.OneByteReader(src))
		trickle := fuzzRead(t, rd, len(in))
		// How bytes arrive matters only to lines that go past MaxLineLen
		// before their newline (memcached is the same).
		if longestRun(in) <= MaxLineLen && strings.Join(whole, "\n") != strings.Join(trickle, "\n") {
			t.Fatalf("whole: %q\ntrickle: %q", whole, trickle)
		}
	})
}

// fuzzRead reads to the end, checking that every Read makes progress and
// that nothing exceeds the limits.
func fuzzRead(t *testing.T, rd *Reader, size int) []string {
	var req Request
	var out []string
	for {
		err := rd.Read(&req)
		out = append(out, digest(&req, err))
		if len(out) > size+1 {
			t.Fatalf("%d reads from %d bytes", len(out), size)
		}
		if len(req.Data) > 1024 || cap(rd.long) > 4096+readBufSize+1 {
			t.Fatalf("data %d bytes, line buffer %d", len(req.Data), cap(rd.long))
		}
		if Fatal(err) {
			return out
		}
	}
}

func longestRun(b []byte) int {
	longest := 0
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return max(longest, len(b))
		}
		longest, b = max(longest, i), b[i+1:]
	}
	return longest
}

// digest is a cheap describe: the fuzzer spends its time reading, not
// formatting, and minimizes inputs faster.
func digest(req *Request, err error) string {
	if err != nil {
		return err.Error()
	}
	m := &req.Meta
	b := append([]byte(req.Command.String()), 0)
	b = append(append(b, req.Key...), 0)
	for _, k := range req.Keys {
		b = append(append(b, k...), ' ')
	}
	for _, a := range req.Args {
		b = append(append(b, a...), ' ')
	}
	for _, v := range []uint64{uint64(req.Flags), uint64(req.Exptime), req.CAS, req.Delta, uint64(m.Flags), uint64(m.TTL),
		uint64(m.ClientFlags), m.CAS, uint64(m.Vivify), uint64(m.Recache), m.Initial, m.Delta, uint64(m.Mode)} {
		b = strconv.AppendUint(append(b, ' '), v, 10)
	}
	b = strconv.AppendBool(b, req.Noreply)
	b = append(append(b, m.Order()...), m.Opaque...)
	return string(append(b, req.Data...))
}

// FuzzReadReply reads a stream of replies to its end and checks that what
// was read, written out again, is exactly the bytes consumed; that every
// value is the size its line announced and within MaxValue, and a larger
// one is skipped whole, the stream reading on; and that bytes trickling in
// one at a time read the same.
func FuzzReadReply(f *testing.F) {
	for _, tc := range replyCases {
		f.Add([]byte(tc.wire))
	}
	var out bytes.Buffer
	w := NewWriter(&out)
	w.ValueCAS([]byte("k"), 7, []byte("a\r\nb"), 99)
	w.Status(End)
	w.MetaValueStart(3)
	w.MetaUint('c', 12)
	w.MetaEnd([]byte("xyz"))
	w.StatUint("curr_items", 5)
	w.Flush()
	f.Add(out.Bytes())

	const maxValue = 1024
	// Over maxValue: skipped, and the replies after it read.
	big := strings.Repeat("v", maxValue+1)
	f.Add([]byte("VA 1025 t\r\n" + big + "\r\nHD\r\nVALUE k 0 1025\r\n" + big + "\r\nEND\r\n"))
	src, br := new(bytes.Reader), bufio.NewReaderSize(nil, 256)
	f.Fuzz(func(t *testing.T, in []byte) {
		src.Reset(in)
		br.Reset(src)
		whole := fuzzReplies(t, br, src, in, maxValue)
		src.Reset(in)
		br.Reset(iotest.OneByteReader(src))
		if trickle := fuzzReplies(t, br, nil, in, maxValue); trickle != whole {
			t.Fatalf("whole: %q\ntrickle: %q", whole, trickle)
		}
	})
}

// fuzzReplies reads replies until an error and returns them written out
// again, with the error. With src, it checks that they are the bytes
// consumed.
func fuzzReplies(t *testing.T, br *bufio.Reader, src *bytes.Reader, in []byte, maxValue int) string {
	rr := ReplyReader{MaxValue: maxValue}
	var again []byte
	for reads := 0; ; reads++ {
		if reads > len(in) {
			t.Fatalf("%d reads from %d bytes", reads, len(in))
		}
		line, value, err := rr.Read(br)
		if errors.Is(err, ErrValueTooLarge) {
			// Skipped, and the stream reads on: what was consumed is the
			// line and its whole block, which only in has.
			n, _ := valueSize(line)
			start := len(again) + len(line) + 2
			if n <= maxValue || start+n+2 > len(in) || string(in[start+n:start+n+2]) != "\r\n" {
				t.Fatalf("line %q skipped as too large (max %d) from %d bytes", line, maxValue, len(in))
			}
			again = append(append(again, line...), "\r\n"...)
			again = append(again, in[start:start+n+2]...)
			if src != nil && !bytes.Equal(again, in[:len(in)-src.Len()-br.Buffered()]) {
				t.Fatalf("skipped to %d, consumed %d", len(again), len(in)-src.Len()-br.Buffered())
			}
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrBadReply) && err != io.EOF && err != io.ErrUnexpectedEOF {
				t.Fatalf("unexpected error %v", err)
			}
			if err == io.EOF && len(again) != len(in) {
				t.Fatalf("EOF after %d of %d bytes", len(again), len(in))
			}
			return string(again) + "\x00" + err.Error()
		}
		if bytes.IndexByte(line, '\n') >= 0 {
			t.Fatalf("line %q holds a newline", line)
		}
		n, isValue := valueSize(line)
		if isValue != (value != nil) || (isValue && n != len(value)) || len(value) > maxValue {
			t.Fatalf("line %q with a %d-byte value (isValue %v, size %d)", line, len(value), isValue, n)
		}
		if v, ok := ParseValueLine(line); ok && v.Size != len(value) {
			t.Fatalf("VALUE line %q, %d-byte value", line, len(value))
		}
		again = append(append(again, line...), "\r\n"...)
		if value != nil {
			again = append(append(again, value...), "\r\n"...)
		}
		if src != nil && !bytes.Equal(again, in[:len(in)-src.Len()-br.Buffered()]) {
			t.Fatalf("read %q, consumed %q", again, in[:len(in)-src.Len()-br.Buffered()])
		}
	}
}

// FuzzRequestRoundTrip rebuilds every line Parse accepts as a command
// AppendRequest knows, reads the rebuilt line and data block back, and
// checks that the Request is the same but for noreply.
func FuzzRequestRoundTrip(f *testing.F) {
	for _, tc := range appendCases {
		f.Add([]byte(tc.line), []byte(tc.data))
	}
	for _, tc := range parseCases {
		f.Add([]byte(tc.line), []byte("data"))
	}
	for _, tc := range metaCases {
		f.Add([]byte(tc.line), []byte("data"))
	}
	var req, again Request
	var wire []byte
	src := new(bytes.Reader)
	rd := NewReader(nil, Limits{MaxItemSize: 1 << 30})
	f.Fuzz(func(t *testing.T, line, data []byte) {
		if bytes.IndexByte(line, '\n') >= 0 {
			return // Parse is given a line without its newline
		}
		if Parse(line, &req) != nil || !appendable(req.Command) {
			return
		}
		hasData := req.DataLen() >= 0
		if hasData {
			req.Data = append([]byte{}, data...) // never nil, as Reader's
		}
		wire = append(AppendRequest(wire[:0], &req, nil), "\r\n"...)
		if hasData {
			wire = append(append(wire, data...), "\r\n"...)
		}
		src.Reset(wire)
		rd.Reset(src)
		if err := rd.Read(&again); err != nil {
			t.Fatalf("%q: rebuilt as %q: %v", line, wire, err)
		}
		if n := rd.Buffered() + src.Len(); n != 0 {
			t.Fatalf("%q: rebuilt as %q: %d bytes left after one request", line, wire, n)
		}
		req.Noreply = false
		if d := diffRequest(&req, &again); d != "" {
			t.Fatalf("%q: rebuilt as %q: %s", line, wire, d)
		}
	})
}

// appendable reports whether AppendRequest rebuilds cmd.
func appendable(cmd Command) bool {
	switch cmd {
	case CmdSet, CmdAdd, CmdReplace, CmdAppend, CmdPrepend, CmdCas, CmdDelete, CmdIncr, CmdDecr, CmdTouch,
		CmdMetaGet, CmdMetaSet, CmdMetaDelete, CmdMetaArith:
		return true
	}
	return false
}

// diffRequest names the first field in which a and b differ, or returns "".
func diffRequest(a, b *Request) string {
	ma, mb := &a.Meta, &b.Meta
	for _, f := range []struct {
		name string
		same bool
	}{
		{"command", a.Command == b.Command},
		{"key", bytes.Equal(a.Key, b.Key)},
		{"keys", len(a.Keys) == 0 && len(b.Keys) == 0},
		{"args", len(a.Args) == 0 && len(b.Args) == 0},
		{"flags", a.Flags == b.Flags},
		{"exptime", a.Exptime == b.Exptime},
		{"cas", a.CAS == b.CAS},
		{"delta", a.Delta == b.Delta},
		{"noreply", a.Noreply == b.Noreply},
		{"data", bytes.Equal(a.Data, b.Data) && (a.Data == nil) == (b.Data == nil)},
		{"meta flags", ma.Flags == mb.Flags},
		{"meta order", bytes.Equal(ma.Order(), mb.Order())},
		{"opaque", bytes.Equal(ma.Opaque, mb.Opaque)},
		{"TTL", ma.TTL == mb.TTL},
		{"client flags", ma.ClientFlags == mb.ClientFlags},
		{"meta CAS", ma.CAS == mb.CAS},
		{"vivify", ma.Vivify == mb.Vivify},
		{"recache", ma.Recache == mb.Recache},
		{"initial", ma.Initial == mb.Initial},
		{"meta delta", ma.Delta == mb.Delta},
		{"mode", ma.Mode == mb.Mode},
	} {
		if !f.same {
			return f.name + " differs: " + digest(a, nil) + " vs " + digest(b, nil)
		}
	}
	return ""
}
