package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

var big = strings.Repeat("x", 2000000) // over memcached's 1 MiB item limit

// wireCases are byte streams and the outcomes of successive Reads, up to
// the first fatal error. Unless oneByte says otherwise, the same outcomes
// are expected when the stream arrives one byte at a time.
var wireCases = []struct {
	name    string
	in      string
	lim     Limits
	want    []string
	oneByte []string // outcomes when bytes trickle in, if different
}{
	{name: "pipelined", in: "get a b\r\nset k 1 2 3\r\nabc\r\ndelete k\r\nmn\r\n",
		want: []string{`get keys=["a" "b"]`, `set "k" flags=1 exp=2 len=3 data="abc"`, `delete "k"`, "mn", "io:EOF"}},
	{name: "bare-newlines", in: "get a\nset k 0 0 1\nx\r\nmn\n",
		want: []string{`get keys=["a"]`, `set "k" len=1 data="x"`, "mn", "io:EOF"}},
	{name: "data-holds-crlf", in: "set k 0 0 4\r\na\r\nb\r\n",
		want: []string{`set "k" len=4 data="a\r\nb"`, "io:EOF"}},
	{name: "zero-length", in: "set k 0 0 0\r\n\r\n",
		want: []string{`set "k" len=0 data=""`, "io:EOF"}},
	{name: "bytes-int32-wrap", in: "set k 0 0 4294967297\r\na\r\n",
		want: []string{`set "k" len=1 data="a"`, "io:EOF"}},
	{name: "ms", in: "ms k 2 T0 F5\r\nhi\r\n",
		want: []string{`ms "k" len=2 [TF] F=5 M=S data="hi"`, "io:EOF"}},
	{name: "empty-lines", in: "\r\n\n \r\nmn\r\n",
		want: []string{"ERROR", "ERROR", "ERROR", "mn", "io:EOF"}},
	{name: "nul-in-line", in: "get a\x00b\r\nmn\r\n",
		want: []string{`get keys=["a"]`, "mn", "io:EOF"}},
	{name: "quit-is-a-command", in: "quit\r\nmn\r\n", want: []string{"quit", "mn", "io:EOF"}},
	{name: "no-eol", in: "get a", want: []string{"io:unexpected EOF"}},
	{name: "eof-in-data", in: "set k 0 0 5\r\nab", want: []string{"io:unexpected EOF"}},
	{name: "eof-in-discard", in: "set k 0 0 5\r\nab", lim: Limits{MaxItemSize: 4}, want: []string{"io:unexpected EOF"}},

	// A bad chunk consumes exactly <bytes>+2; what follows is a command.
	{name: "bad-data-chunk", in: "set k 0 0 1\r\nab\r\nmn\r\n",
		want: []string{"CLIENT_ERROR bad data chunk", "ERROR", "mn", "io:EOF"}},
	{name: "bad-data-chunk-bare-lf", in: "set k 0 0 1\na\nmn\n",
		want: []string{"CLIENT_ERROR bad data chunk", "ERROR", "io:EOF"}},
	{name: "bad-data-chunk-long", in: "set k 0 0 1\r\nabc\r\nmn\r\n",
		want: []string{"CLIENT_ERROR bad data chunk", "ERROR", "mn", "io:EOF"}},
	{name: "bad-data-chunk-noreply", in: "set k 0 0 1 noreply\r\nab\r\nmn\r\n",
		want: []string{"quiet:CLIENT_ERROR bad data chunk", "ERROR", "mn", "io:EOF"}},
	{name: "ms-bad-data-chunk-q", in: "ms k 1 q\r\nab\r\nmn\r\n",
		want: []string{"CLIENT_ERROR bad data chunk", "ERROR", "mn", "io:EOF"}},

	// A malformed storage line leaves its data block to be read as a command.
	{name: "negative-bytes", in: "set k 0 0 -1\r\na\r\nmn\r\n",
		want: []string{"CLIENT_ERROR bad command line format", "ERROR", "mn", "io:EOF"}},
	{name: "flags-negative", in: "set k -1 0 1\r\na\r\nmn\r\n",
		want: []string{"CLIENT_ERROR bad command line format", "ERROR", "mn", "io:EOF"}},
	{name: "key-too-long", in: "set " + key251 + " 0 0 1\r\na\r\nmn\r\n",
		want: []string{"CLIENT_ERROR bad command line format", "ERROR", "mn", "io:EOF"}},
	{name: "noreply", in: "set " + key251 + " 0 0 1 noreply\r\na\r\nmn\r\n",
		want: []string{"quiet:CLIENT_ERROR bad command line format", "ERROR", "mn", "io:EOF"}},
	{name: "noreply-errors", in: "incr k x noreply\r\ntouch k x noreply\r\ndelete k 5 noreply\r\nflush_all x noreply\r\nverbosity x noreply\r\nincr k x\r\nmn\r\n",
		want: []string{"quiet:CLIENT_ERROR invalid numeric delta argument", "quiet:CLIENT_ERROR invalid exptime argument",
			"quiet:CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]", "quiet:CLIENT_ERROR invalid exptime argument",
			"quiet:CLIENT_ERROR bad command line format", "CLIENT_ERROR invalid numeric delta argument", "mn", "io:EOF"}},
	{name: "noreply-does-not-hide-ERROR", in: "set k 0 0 noreply x y\r\nmn\r\n", want: []string{"ERROR", "mn", "io:EOF"}},

	// Too large: the payload is discarded unchecked, the connection lives.
	{name: "too-large", in: "set k 0 0 2000000\r\n" + big + "\r\nmn\r\n",
		want: []string{"SERVER_ERROR object too large for cache", "mn", "io:EOF"}},
	{name: "too-large-noreply", in: "set k 0 0 2000000 noreply\r\n" + big + "\r\nmn\r\n",
		want: []string{"quiet:SERVER_ERROR object too large for cache", "mn", "io:EOF"}},
	{name: "too-large-limit", in: "set k 0 0 5\r\nhelloXXmn\r\n", lim: Limits{MaxItemSize: 4},
		want: []string{"SERVER_ERROR object too large for cache", "mn", "io:EOF"}},
	{name: "ms-too-large-q", in: "ms k 2000000 q\r\n" + big + "\r\nmn\r\n",
		want: []string{"SERVER_ERROR object too large for cache", "mn", "io:EOF"}},

	// ms discards its block after an error once <datalen> is known.
	{name: "ms-swallow", in: "ms k 1 Q\r\na\r\nmn\r\n",
		want: []string{"CLIENT_ERROR invalid flag", "mn", "io:EOF"}},
	{name: "ms-swallow-unchecked", in: "ms k 1 b\r\nab\r\nmn\r\n",
		want: []string{"CLIENT_ERROR error decoding key", "ERROR", "mn", "io:EOF"}},
	{name: "ms-swallow-mode", in: "ms k 1 MX\r\na\r\nmn\r\n",
		want: []string{"CLIENT_ERROR invalid mode for ms M token", "mn", "io:EOF"}},
	{name: "ms-no-swallow-bad-datalen", in: "ms k x\r\na\r\nmn\r\n",
		want: []string{"CLIENT_ERROR bad command line format", "ERROR", "mn", "io:EOF"}},
	{name: "ms-no-swallow-too-many-flags", in: "ms k 1" + flags16 + " q\r\na\r\nmn\r\n",
		want: []string{"CLIENT_ERROR options flags too long", "ERROR", "mn", "io:EOF"}},

	// Lines: memcached gives up once 2048 bytes are buffered without a
	// newline, unless the line is a get; a whole line is parsed regardless.
	{name: "line-too-long", in: strings.Repeat("x", 3000), want: []string{"close"}},
	{name: "line-too-long-after-reply", in: "mn\r\n" + strings.Repeat("x", 3000) + "\r\n",
		want: []string{"mn", "ERROR", "io:EOF"}, oneByte: []string{"mn", "close"}},
	{name: "long-line-whole", in: "set " + strings.Repeat("k", 3000) + " 0 0 1\r\na\r\nmn\r\n",
		want:    []string{"CLIENT_ERROR bad command line format", "ERROR", "mn", "io:EOF"},
		oneByte: []string{"close"}},
	{name: "long-get", in: "get" + strings.Repeat(" k", 1500) + "\r\nmn\r\n",
		want: []string{`get keys=["k" "k" "k"` + strings.Repeat(` "k"`, 1497) + "]", "mn", "io:EOF"}},
	{name: "long-get-too-long", in: "get" + strings.Repeat(" k", 1500) + "\r\n", lim: Limits{MaxGetLine: 2500},
		want: []string{"close"}},
	{name: "long-gat", in: "gat 5" + strings.Repeat(" k", 1500) + "\r\n",
		want: []string{`gat keys=["k" "k" "k"` + strings.Repeat(` "k"`, 1497) + "] exp=5", "io:EOF"}},
	{name: "long-get-100-spaces", in: strings.Repeat(" ", 100) + "get" + strings.Repeat(" k", 1500) + "\r\n",
		want: []string{`get keys=["k" "k" "k"` + strings.Repeat(` "k"`, 1497) + "]", "io:EOF"}},
	{name: "long-get-101-spaces", in: strings.Repeat(" ", 101) + "get" + strings.Repeat(" k", 1500) + "\r\n",
		want:    []string{`get keys=["k" "k" "k"` + strings.Repeat(` "k"`, 1497) + "]", "io:EOF"},
		oneByte: []string{"close"}},
}

// readAll reads until EOF or a fatal error and describes each outcome.
func readAll(r io.Reader, lim Limits) []string {
	rd := NewReader(r, lim)
	var req Request
	var out []string
	for i := 0; i < 10000; i++ {
		err := rd.Read(&req)
		out = append(out, describe(&req, err))
		if Fatal(err) {
			break
		}
	}
	return out
}

func TestReaderWire(t *testing.T) {
	for _, tc := range wireCases {
		t.Run(tc.name, func(t *testing.T) {
			check := func(how string, got, want []string) {
				t.Helper()
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("%s:\n got %.400q\nwant %.400q", how, got, want)
				}
			}
			check("whole", readAll(strings.NewReader(tc.in), tc.lim), tc.want)
			want := tc.want
			if tc.oneByte != nil {
				want = tc.oneByte
			}
			check("one byte at a time", readAll(iotest.OneByteReader(strings.NewReader(tc.in)), tc.lim), want)
		})
	}
}

// One command split over many writes on a pipe, the others pipelined in
// one write: the Reader must not care how the bytes arrive.
func TestReaderSplitWrites(t *testing.T) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		for _, chunk := range []string{"se", "t k 0", " 0 5\r", "\nhel", "lo", "\r", "\nget a b\r\nmg k v\r\nmn\r\n",
			"ms a2V5 2 b O123 k\r\n", "h", "i\r\n", "ms key 2 O456\r\n", "h", "i\r\n"} {
			if _, err := pw.Write([]byte(chunk)); err != nil {
				done <- err
				return
			}
		}
		done <- pw.Close()
	}()
	got := readAll(pr, Limits{})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := []string{`set "k" len=5 data="hello"`, `get keys=["a" "b"]`, `mg "k" [v]`, "mn",
		`ms "key" len=2 b64 [bOk] O=123 M=S data="hi"`, `ms "key" len=2 [O] O=456 M=S data="hi"`, "io:EOF"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestReaderBuffered(t *testing.T) {
	rd := NewReader(strings.NewReader("get a\r\nget b\r\n"), Limits{})
	var req Request
	if err := rd.Read(&req); err != nil {
		t.Fatal(err)
	}
	if rd.Buffered() != len("get b\r\n") {
		t.Errorf("Buffered = %d after the first of two pipelined requests", rd.Buffered())
	}
	if err := rd.Read(&req); err != nil || rd.Buffered() != 0 {
		t.Errorf("Read = %v, Buffered = %d; want nil, 0", err, rd.Buffered())
	}
}

// Data belongs to the caller: later reads must not overwrite it.
func TestReaderDataOwned(t *testing.T) {
	rd := NewReader(strings.NewReader("set a 0 0 3\r\none\r\nset b 0 0 3\r\ntwo\r\n"), Limits{})
	var req Request
	rd.Read(&req)
	first := req.Data
	rd.Read(&req)
	if string(first) != "one" || string(req.Data) != "two" {
		t.Errorf("data = %q, %q", first, req.Data)
	}
}

// An I/O error from the connection is fatal and comes back as is.
func TestReaderIOError(t *testing.T) {
	boom := errors.New("boom")
	rd := NewReader(iotest.ErrReader(boom), Limits{})
	var req Request
	if err := rd.Read(&req); err != boom || !Fatal(err) {
		t.Errorf("Read = %v, want boom (fatal)", err)
	}
}

// loopReader serves the same bytes forever, without allocating.
type loopReader struct {
	b []byte
	i int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], l.b[l.i:])
		n += c
		l.i = (l.i + c) % len(l.b)
	}
	return n, nil
}

func TestReaderAllocs(t *testing.T) {
	rd := NewReader(&loopReader{b: []byte("get k1 k2 k3\r\n")}, Limits{})
	var req Request
	n := testing.AllocsPerRun(1000, func() {
		if err := rd.Read(&req); err != nil || len(req.Keys) != 3 {
			t.Fatalf("Read: %v, %q", err, req.Keys)
		}
	})
	if n != 0 {
		t.Errorf("Read(get k1 k2 k3): %v allocs, want 0", n)
	}
	// A data block is aliased while it is buffered whole, and read into a
	// block the Reader reuses when it is not (20 KiB > the 16 KiB buffer).
	for _, size := range []int{5, 20 << 10} {
		value := bytes.Repeat([]byte{'v'}, size)
		rd = NewReader(&loopReader{b: fmt.Appendf(nil, "set k 0 0 %d\r\n%s\r\n", size, value)}, Limits{})
		if n := testing.AllocsPerRun(1000, func() {
			if err := rd.Read(&req); err != nil || !bytes.Equal(req.Data, value) {
				t.Fatalf("Read: %v, %d bytes", err, len(req.Data))
			}
		}); n != 0 {
			t.Errorf("Read(set of %d bytes): %v allocs, want 0", size, n)
		}
	}
}

func TestReaderLongGet(t *testing.T) {
	for _, tc := range []struct {
		keys      int
		maxAllocs float64
	}{
		{1000, 0},  // 4 KB: the line and the key array are reused
		{5000, 20}, // 20 KiB: past the read buffer; the line buffer is reused, the key array regrown
	} {
		line := "get" + strings.Repeat(" key", tc.keys) + "\r\n"
		rd := NewReader(&loopReader{b: []byte(line)}, Limits{})
		var req Request
		rd.Read(&req) // warm up
		n := testing.AllocsPerRun(20, func() {
			if err := rd.Read(&req); err != nil || len(req.Keys) != tc.keys || !bytes.Equal(req.Keys[tc.keys-1], []byte("key")) {
				t.Fatalf("Read: %v, %d keys", err, len(req.Keys))
			}
		})
		if n > tc.maxAllocs {
			t.Errorf("get with %d keys: %v allocs per read, want <= %v", tc.keys, n, tc.maxAllocs)
		}
	}
}

// A get line longer than keepLongLine is read whole, and its buffer is
// not kept once the next request is read: an idle connection does not
// hold the size of its largest request.
func TestReaderDropsLongLineBuffer(t *testing.T) {
	long := "get" + strings.Repeat(" key", 100_000) + "\r\n"
	rd := NewReader(strings.NewReader(long+"get k\r\n"), Limits{MaxGetLine: 1 << 20})
	var req Request
	if err := rd.Read(&req); err != nil || len(req.Keys) != 100_000 {
		t.Fatalf("long get: %v, %d keys", err, len(req.Keys))
	}
	if cap(rd.long) <= keepLongLine {
		t.Fatalf("long-line buffer %d bytes, want the line in it", cap(rd.long))
	}
	if err := rd.Read(&req); err != nil || len(req.Keys) != 1 {
		t.Fatalf("next get: %v, %d keys", err, len(req.Keys))
	}
	if c := cap(rd.long); c > keepLongLine {
		t.Errorf("after a short request the reader keeps a %d-byte line buffer", c)
	}
}
