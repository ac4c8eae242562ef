package protocol

import (
	"encoding/base64"
	"strings"
	"testing"
)

var (
	key250 = strings.Repeat("k", 250)
	key251 = strings.Repeat("k", 251)
)

// parseCases are single request lines (without "\r\n") and what Parse makes
// of them. Every error reply here was checked against memcached 1.6.18.
var parseCases = []struct {
	name, line, want string
}{
	// retrieval
	{"get", "get k", `get keys=["k"]`},
	{"get-many", "get a b c", `get keys=["a" "b" "c"]`},
	{"get-spaces", "  get   a  b ", `get keys=["a" "b"]`},
	{"get-no-key", "get", "ERROR"},
	{"get-only-space", "get ", "ERROR"},
	{"get-noreply-is-a-key", "get k noreply", `get keys=["k" "noreply"]`},
	{"gets", "gets a b", `gets keys=["a" "b"]`},
	{"bget", "bget k", `get keys=["k"]`},
	{"get-key-250", "get " + key250, `get keys=["` + key250 + `"]`},
	{"key-too-long", "get " + key251, "CLIENT_ERROR bad command line format"},
	{"key-too-long-later", "get a " + key251 + " b", "CLIENT_ERROR bad command line format"},
	{"get-tab-in-key", "get k\tx", `get keys=["k\tx"]`},
	{"get-control-key", "get k\x01", `get keys=["k\x01"]`},
	{"get-nul-ends-line", "get a\x00b c", `get keys=["a"]`},
	{"get-30-keys", "get" + strings.Repeat(" k", 30), `get keys=["k" "k" "k" "k" "k" "k" "k" "k" "k" "k" "k" "k" "k" "k" "k" "k" "k" "k" "k" "k" "k" "k" "k" "k" "k" "k" "k" "k" "k" "k"]`},
	{"gat", "gat 10 k", `gat keys=["k"] exp=10`},
	{"gats", "gats -1 a b", `gats keys=["a" "b"] exp=-1`},
	{"gat-no-key", "gat 10", "gat exp=10"},
	{"gat-bad-exptime", "gat x k", "CLIENT_ERROR invalid exptime argument"},
	{"gat-float-exptime", "gat 1.5 k", "CLIENT_ERROR invalid exptime argument"},
	{"gat-no-args", "gat", "ERROR"},
	{"gat-key-too-long", "gat 1 " + key251, "CLIENT_ERROR bad command line format"},

	// storage
	{"set", "set k 5 10 3", `set "k" flags=5 exp=10 len=3`},
	{"set-noreply", "set k 0 0 1 noreply", `set "k" len=1 noreply`},
	{"set-junk-last-word", "set k 0 0 1 norep", `set "k" len=1`},
	{"add", "add k 1 2 3", `add "k" flags=1 exp=2 len=3`},
	{"replace", "replace k 0 0 0", `replace "k" len=0`},
	{"append", "append k 0 0 1", `append "k" len=1`},
	{"prepend", "prepend k 0 0 1", `prepend "k" len=1`},
	{"cas", "cas k 0 0 1 99", `cas "k" cas=99 len=1`},
	{"cas-noreply", "cas k 0 0 1 99 noreply", `cas "k" cas=99 len=1 noreply`},
	{"cas-bad-unique", "cas k 0 0 1 x", "CLIENT_ERROR bad command line format"},
	{"cas-negative-unique", "cas k 0 0 1 -1", "CLIENT_ERROR bad command line format"},
	{"cas-missing-unique", "cas k 0 0 1", "ERROR"},
	{"set-too-few", "set k 0 0", "ERROR"},
	{"set-too-many", "set k 0 0 1 noreply x", "ERROR"},
	{"set-key-250", "set " + key250 + " 0 0 1", `set "` + key250 + `" len=1`},
	{"key-too-long-set", "set " + key251 + " 0 0 1", "CLIENT_ERROR bad command line format"},
	{"key-too-long-noreply", "set " + key251 + " 0 0 1 noreply", "quiet:CLIENT_ERROR bad command line format"},
	{"flags-max", "set k 4294967295 0 1", `set "k" flags=4294967295 len=1`},
	{"flags-overflow", "set k 4294967296 0 1", `set "k" len=1`}, // memcached wraps: stored with flags 0
	{"flags-overflow-wraps", "set k 4294967301 0 1", `set "k" flags=5 len=1`},
	{"flags-beyond-64-bits", "set k 18446744073709551616 0 1", "CLIENT_ERROR bad command line format"},
	{"flags-negative", "set k -1 0 1", "CLIENT_ERROR bad command line format"},
	{"flags-plus", "set k +5 0 1", `set "k" flags=5 len=1`},
	{"flags-hex", "set k 0x10 0 1", "CLIENT_ERROR bad command line format"},
	{"exptime-not-integer", "set k 0 x 1", "CLIENT_ERROR bad command line format"},
	{"exptime-float", "set k 0 1.5 1", "CLIENT_ERROR bad command line format"},
	{"exptime-negative", "set k 0 -1 1", `set "k" exp=-1 len=1`},
	{"exptime-int32-wrap", "set k 0 2147483648 1", `set "k" exp=-2147483648 len=1`},
	{"exptime-int32-wrap-negative", "set k 0 -2147483649 1", `set "k" exp=2147483647 len=1`},
	{"exptime-beyond-64-bits", "set k 0 99999999999999999999 1", "CLIENT_ERROR bad command line format"},
	{"negative-bytes", "set k 0 0 -1", "CLIENT_ERROR bad command line format"},
	{"bytes-not-integer", "set k 0 0 x", "CLIENT_ERROR bad command line format"},
	{"bytes-int-max", "set k 0 0 2147483646", "CLIENT_ERROR bad command line format"},
	{"bytes-int32-wrap", "set k 0 0 4294967297", `set "k" len=1`}, // memcached reads 1 byte
	{"bytes-wraps-negative", "set k 0 0 4294967295", "CLIENT_ERROR bad command line format"},
	{"bytes-noreply-word", "set k 0 0 noreply", "quiet:CLIENT_ERROR bad command line format"},
	{"bytes-tab-suffix", "set k 0 0 1\tjunk", `set "k" len=1`},
	{"bytes-tab-prefix", "set k 0 0 \t1", `set "k" len=1`},
	{"bytes-nul-ends-line", "set k 0 0 1\x00 junk", `set "k" len=1`},
	{"set-upper-case", "SET k 0 0 1", "ERROR"},

	// delete
	{"delete", "delete k", `delete "k"`},
	{"delete-noreply", "delete k noreply", `delete "k" noreply`},
	{"delete-zero", "delete k 0", `delete "k"`},
	{"delete-zero-noreply", "delete k 0 noreply", `delete "k" noreply`},
	{"delete-hold", "delete k 5", "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"},
	{"delete-hold-noreply", "delete k 5 noreply", "quiet:CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"},
	{"delete-00", "delete k 00", "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"},
	{"delete-junk", "delete k noreply x", "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"},
	{"delete-no-key", "delete", "ERROR"},
	{"delete-too-many", "delete k 1 2 3", "ERROR"},
	{"delete-key-too-long", "delete " + key251, "CLIENT_ERROR bad command line format"},
	{"delete-key-too-long-noreply", "delete " + key251 + " noreply", "quiet:CLIENT_ERROR bad command line format"},

	// incr, decr, touch
	{"incr", "incr k 5", `incr "k" delta=5`},
	{"decr-noreply", "decr k 5 noreply", `decr "k" delta=5 noreply`},
	{"incr-max", "incr k 18446744073709551615", `incr "k" delta=18446744073709551615`},
	{"incr-zero", "incr k 0", `incr "k"`},
	{"incr-overflow", "incr k 18446744073709551616", "CLIENT_ERROR invalid numeric delta argument"},
	{"incr-non-numeric", "incr k x", "CLIENT_ERROR invalid numeric delta argument"},
	{"incr-negative", "incr k -1", "CLIENT_ERROR invalid numeric delta argument"},
	{"incr-minus-zero", "incr k -0", `incr "k"`},
	{"incr-minus-huge", "incr k -9223372036854775809", `incr "k" delta=9223372036854775807`},
	{"incr-suffix", "incr k 5x", "CLIENT_ERROR invalid numeric delta argument"},
	{"incr-noreply-error", "incr k x noreply", "quiet:CLIENT_ERROR invalid numeric delta argument"},
	{"incr-junk-last-word", "incr k 1 2", `incr "k" delta=1`},
	{"incr-no-delta", "incr k", "ERROR"},
	{"incr-key-too-long", "incr " + key251 + " 1", "CLIENT_ERROR bad command line format"},
	{"touch", "touch k 10", `touch "k" exp=10`},
	{"touch-noreply", "touch k 10 noreply", `touch "k" exp=10 noreply`},
	{"touch-bad-exptime", "touch k x", "CLIENT_ERROR invalid exptime argument"},
	{"touch-bad-exptime-noreply", "touch k x noreply", "quiet:CLIENT_ERROR invalid exptime argument"},
	{"touch-no-exptime", "touch k", "ERROR"},

	// others
	{"flush_all", "flush_all", "flush_all"},
	{"flush_all-delay", "flush_all 10", "flush_all exp=10"},
	{"flush_all-noreply", "flush_all noreply", "flush_all noreply"},
	{"flush_all-delay-noreply", "flush_all 10 noreply", "flush_all exp=10 noreply"},
	{"flush_all-bad", "flush_all x", "CLIENT_ERROR invalid exptime argument"},
	{"flush_all-bad-noreply", "flush_all x noreply", "quiet:CLIENT_ERROR invalid exptime argument"},
	{"flush_all-noreply-first", "flush_all noreply 5", "CLIENT_ERROR invalid exptime argument"},
	{"flush_all-junk", "flush_all 0 foo", "flush_all"},
	{"flush_all-too-many", "flush_all 1 2 3", "ERROR"},
	{"verbosity", "verbosity 1", `verbosity args=["1"]`},
	{"verbosity-noreply", "verbosity 1 noreply", `verbosity args=["1"] noreply`},
	{"verbosity-bad", "verbosity x", "CLIENT_ERROR bad command line format"},
	{"verbosity-only-noreply", "verbosity noreply", "quiet:CLIENT_ERROR bad command line format"},
	{"verbosity-none", "verbosity", "ERROR"},
	{"version", "version", "version"},
	{"version-args", "version foo", "version"},
	{"quit", "quit", "quit"},
	{"stats", "stats", "stats"},
	{"stats-args", "stats settings x", `stats args=["settings" "x"]`},
	{"empty", "", "ERROR"},
	{"space", " ", "ERROR"},
	{"one-letter", "g", "ERROR"},
	{"unknown", "hello world", "ERROR"},
	{"admin-command", "lru_crawler foo", "ERROR"},
	{"shutdown", "shutdown", "ERROR: shutdown not enabled"},
}

func TestParse(t *testing.T) {
	var req Request
	for _, tc := range append(parseCases, metaCases...) {
		t.Run(tc.name, func(t *testing.T) {
			got := describe(&req, Parse([]byte(tc.line), &req))
			if got != tc.want {
				t.Errorf("Parse(%q)\n got %s\nwant %s", tc.line, got, tc.want)
			}
		})
	}
}

// Parse must not keep anything from the previous request.
func TestParseResets(t *testing.T) {
	var req Request
	Parse([]byte("ms "+strings.Repeat("QUFB", 4)+" 2 b T5 F3 O9 c"), &req)
	Parse([]byte("get x"), &req)
	if got := describe(&req, nil); got != `get keys=["x"]` {
		t.Errorf("after reuse: %s", got)
	}
	if req.DataLen() != -1 {
		t.Errorf("DataLen = %d, want -1", req.DataLen())
	}
}

func TestParseAllocs(t *testing.T) {
	var req Request
	for _, line := range []string{"get k1 k2 k3", "gets k1 k2 k3", "set k 0 0 5", "mg k v f t c O123", "delete k noreply"} {
		b := []byte(line)
		if n := testing.AllocsPerRun(100, func() { Parse(b, &req) }); n != 0 {
			t.Errorf("Parse(%q): %v allocs, want 0", line, n)
		}
	}
}

func TestValidKey(t *testing.T) {
	for key, want := range map[string]bool{"k": true, key250: true, key251: false, "": false, "a b": false, "a\tb": false, "a\x7f": false, "ключ": true} {
		if got := ValidKey([]byte(key)); got != want {
			t.Errorf("ValidKey(%q) = %v, want %v", key, got, want)
		}
		if got := ValidKey(key); got != want {
			t.Errorf("ValidKey(string %q) = %v, want %v", key, got, want)
		}
	}
}

func TestCommandString(t *testing.T) {
	if CmdGet.String() != "get" || CmdMetaDebug.String() != "me" || CmdFlushAll.String() != "flush_all" || Command(0).String() != "unknown" || Command(200).String() != "unknown" {
		t.Error("Command.String mismatch")
	}
}

// appendCases are request lines and the line AppendRequest rebuilds from
// what Parse makes of them; data is the block that follows (Request.Data).
var appendCases = []struct {
	name, line, data, want string
}{
	{"set", "set k 5 10 3", "abc", "set k 5 10 3"},
	{"set-noreply", "set k 0 0 1 noreply", "a", "set k 0 0 1"},
	{"set-junk-last-word", "set k 0 0 1 norep", "a", "set k 0 0 1"},
	{"set-numbers-as-parsed", "set  k +5 2147483648 1\tjunk", "a", "set k 5 -2147483648 1"},
	{"set-flags-wrap", "set k 4294967301 0 1", "a", "set k 5 0 1"},
	{"set-len-is-data", "set k 0 0 7", "abc", "set k 0 0 3"},
	{"set-empty", "set k 0 0 0", "", "set k 0 0 0"},
	{"set-control-key", "set k\x01\t 0 0 1", "a", "set k\x01\t 0 0 1"},
	{"add", "add k 1 2 3", "abc", "add k 1 2 3"},
	{"replace", "replace k 0 0 0 noreply", "", "replace k 0 0 0"},
	{"append", "append k 0 0 1", "a", "append k 0 0 1"},
	{"prepend", "prepend k 0 0 1", "a", "prepend k 0 0 1"},
	{"cas", "cas k 3 4 1 99 noreply", "a", "cas k 3 4 1 99"},
	{"cas-max", "cas k 0 0 1 18446744073709551615", "a", "cas k 0 0 1 18446744073709551615"},
	{"delete", "delete k", "", "delete k"},
	{"delete-0-noreply", "delete k 0 noreply", "", "delete k"},
	{"incr", "incr k 18446744073709551615", "", "incr k 18446744073709551615"},
	{"decr-noreply", "decr k 5 noreply", "", "decr k 5"},
	{"touch", "touch k -1 noreply", "", "touch k -1"},

	{"mg", "mg k", "", "mg k"},
	{"mg-order-q", "mg k v q O123 c f k t s", "", "mg k v q O123 c f k t s"},
	{"mg-token-values", "mg k T30\tx N+5 R-1 kfoo vbar", "", "mg k T30 N5 R-1 k v"},
	{"mg-mode-kept", "mg k M+", "", "mg k M+"},
	{"mg-empty-opaque", "mg k O v", "", "mg k O v"},
	{"mg-b64", "mg aw== b k v", "", "mg aw== b k v"},
	{"mg-b64-reencoded", "mg a!w=!= b", "", "mg aw== b"},
	{"mg-b64-space-key", "mg YSBi k b", "", "mg YSBi k b"},
	{"mg-b64-after-pad", "mg QQ==QUJD b", "", "mg QQ== b"},
	{"ms", "ms k 2 T0 F5 C9 MA I q", "ab", "ms k 2 T0 F5 C9 MA I q"},
	{"ms-len-is-data", "ms Zm9v 9 b", "ab", "ms Zm9v 2 b"},
	{"ms-default-mode", "ms k 1", "a", "ms k 1"},
	{"ms-b64", "ms Zm9v 1 b O1", "a", "ms Zm9v 1 b O1"},
	{"md", "md k q C5 O7 I T10", "", "md k q C5 O7 I T10"},
	{"ma", "ma k", "", "ma k"},
	{"ma-mode-normalised", "ma k M+ D7 J9 N0 T1 q v", "", "ma k MI D7 J9 N0 T1 q v"},
	{"ma-decr", "ma k M- C18446744073709551615", "", "ma k MD C18446744073709551615"},
}

func TestAppendRequest(t *testing.T) {
	var req Request
	for _, tc := range appendCases {
		t.Run(tc.name, func(t *testing.T) {
			if err := Parse([]byte(tc.line), &req); err != nil {
				t.Fatalf("Parse(%q): %v", tc.line, err)
			}
			if req.DataLen() >= 0 {
				req.Data = []byte(tc.data)
			}
			if got := string(AppendRequest(nil, &req, nil)); got != tc.want {
				t.Errorf("AppendRequest(%q)\n got %q\nwant %q", tc.line, got, tc.want)
			}
		})
	}
}

// isTag stands for a caller's test of an opaque it must not pass on.
func isTag(opaque []byte) bool { return strings.HasPrefix(string(opaque), "tag.") }

func TestAppendRequestDropOpaque(t *testing.T) {
	for line, want := range map[string]string{
		"mg k v Otag.1 c": "mg k v c",
		"mg k v O123 c":   "mg k v O123 c",
		"md k Otag.x q":   "md k q",
		"ma k Otag.":      "ma k",
		"ms k 0 Otag.1 I": "ms k 0 I",
	} {
		var req Request
		if err := Parse([]byte(line), &req); err != nil {
			t.Fatalf("Parse(%q): %v", line, err)
		}
		if got := string(AppendRequest([]byte("x"), &req, isTag)); got != "x"+want {
			t.Errorf("AppendRequest(%q) = %q, want %q", line, got, "x"+want)
		}
	}
}

func TestAppendRequestUnsupported(t *testing.T) {
	for _, line := range []string{"get k", "gat 1 k", "flush_all", "mn", "me k", "version"} {
		var req Request
		if err := Parse([]byte(line), &req); err != nil {
			t.Fatalf("Parse(%q): %v", line, err)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("AppendRequest(%q) did not panic", line)
				}
			}()
			AppendRequest(nil, &req, nil)
		}()
	}
}

func TestAppendRequestAllocs(t *testing.T) {
	buf := make([]byte, 0, 512)
	for _, line := range []string{"set k 0 0 5", "cas k 1 2 5 99", "incr k 1", "mg k v f t c O123 q", "ms Zm9v 5 b T10 F3", "ma k MD D5"} {
		var req Request
		if err := Parse([]byte(line), &req); err != nil {
			t.Fatalf("Parse(%q): %v", line, err)
		}
		if n := testing.AllocsPerRun(100, func() { AppendRequest(buf[:0], &req, isTag) }); n != 0 {
			t.Errorf("AppendRequest(%q): %v allocs, want 0", line, n)
		}
	}
}

func TestAppendKey(t *testing.T) {
	for _, tc := range []struct {
		key, want string
		b64       bool
	}{
		{"k", "k", false},
		{key250, key250, false},
		{"a b", "YSBi", true},
		{"a\r\nget x", "YQ0KZ2V0IHg=", true},
		{"\x00", "AA==", true},
		{"", "", true},
		{key251, base64.StdEncoding.EncodeToString([]byte(key251)), true},
	} {
		for _, got := range []struct {
			line []byte
			b64  bool
		}{pair(AppendKey([]byte("md "), tc.key)), pair(AppendKey([]byte("md "), []byte(tc.key)))} {
			if string(got.line) != "md "+tc.want || got.b64 != tc.b64 {
				t.Errorf("AppendKey(%q) = %q, %v; want %q, %v", tc.key, got.line, got.b64, "md "+tc.want, tc.b64)
			}
		}
		if !tc.b64 {
			continue
		}
		dec := make([]byte, 512)
		if n := decodeKey(dec, []byte(tc.want)); tc.key != "" && string(dec[:n]) != tc.key {
			t.Errorf("decodeKey(%q) = %q, want %q", tc.want, dec[:n], tc.key)
		}
	}
}

func pair(line []byte, b64 bool) struct {
	line []byte
	b64  bool
} {
	return struct {
		line []byte
		b64  bool
	}{line, b64}
}
