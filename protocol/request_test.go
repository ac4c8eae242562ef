package protocol

import (
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
