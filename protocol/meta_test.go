package protocol

import (
	"strings"
	"testing"
)

var (
	opaque31 = strings.Repeat("a", 31)
	opaque32 = strings.Repeat("a", 32)
	flags16  = " v f t c s h l k O1 u T5 N5 R5 P L I" // 16 flags
)

// metaCases are meta request lines and what Parse makes of them; the error
// replies were checked against memcached 1.6.18.
var metaCases = []struct {
	name, line, want string
}{
	{"mn", "mn", "mn"},
	{"mn-args", "mn foo bar", "mn"},
	{"m-unknown", "mx k", "ERROR"},

	{"mg-no-key", "mg", "ERROR"},
	{"mg", "mg k", `mg "k"`},
	{"mg-flags", "mg k v f t c k s O123 q", `mg "k" [vftcksOq] O=123`},
	{"mg-tokens", "mg k T30 N5 R10 u h l E", "CLIENT_ERROR invalid flag"},
	{"mg-token-fields", "mg k T30 N5 R10 u h l", `mg "k" [TNRuhl] T=30 N=5 R=10`},
	{"mg-flag-suffix-ignored", "mg k kfoo vbar", `mg "k" [kv]`},
	{"mg-mode-not-checked", "mg k M+", `mg "k" [M] M=+`},
	{"mg-b64-key", "mg aw== b k v", `mg "k" b64 [bkv]`},
	{"mg-b64-lenient", "mg a!w=!= b", `mg "k" b64 [b]`},
	{"mg-b64-bad", "mg k b", "CLIENT_ERROR error decoding key"},
	{"mg-b64-bad-padding", "mg AAAA==== b", "CLIENT_ERROR error decoding key"},
	{"mg-key-too-long", "mg " + key251 + " v", "CLIENT_ERROR bad command line format"},
	{"mg-dup", "mg k v v", "CLIENT_ERROR duplicate flag"},
	{"mg-dup-suffix", "mg k k kfoo", "CLIENT_ERROR duplicate flag"},
	{"mg-high-byte", "mg k \xff", "CLIENT_ERROR duplicate flag"},
	{"mg-invalid", "mg k Q", "CLIENT_ERROR invalid flag"},
	{"mg-digit", "mg k 5", "CLIENT_ERROR invalid flag"},
	{"mg-bad-T", "mg k Tx", "CLIENT_ERROR bad token in command line format"},
	{"mg-bad-T-empty", "mg k T", "CLIENT_ERROR bad token in command line format"},
	{"mg-bad-then-invalid", "mg k Tx Q", "CLIENT_ERROR invalid flag"},
	{"mg-bad-then-dup", "mg k Tx v v", "CLIENT_ERROR duplicate flag"},
	{"mg-bad-F", "mg k Fx", "CLIENT_ERROR bad command line format"},
	{"mg-bad-C", "mg k Cx", "CLIENT_ERROR bad token in command line format"},
	{"mg-bad-M", "mg k Mxy", "CLIENT_ERROR incorrect length for M token"},
	{"mg-bad-J", "mg k Jx", "CLIENT_ERROR invalid numeric initial value"},
	{"mg-bad-D", "mg k Dx", "CLIENT_ERROR invalid numeric delta value"},
	{"mg-bad-N", "mg k Nx", "CLIENT_ERROR bad token in command line format"},
	{"mg-bad-R", "mg k Rx", "CLIENT_ERROR bad token in command line format"},
	{"mg-opaque-31", "mg k O" + opaque31, `mg "k" [O] O=` + opaque31},
	{"mg-opaque-too-long", "mg k O" + opaque32, "CLIENT_ERROR opaque token too long"},
	{"mg-17-flags", "mg k" + flags16 + " q", `mg "k" [vftcshlkOuTNRPLIq] O=1 T=5 N=5 R=5`},
	{"mg-too-many-flags", "mg k" + flags16 + " q b", "CLIENT_ERROR options flags are too long"},
	{"mg-ttl-int32-wrap", "mg k T2147483648", `mg "k" [T] T=-2147483648`},

	{"ms", "ms k 1", `ms "k" len=1 M=S`},
	{"ms-no-datalen", "ms k", "CLIENT_ERROR bad command line format"},
	{"ms-no-key", "ms", "ERROR"},
	{"ms-bad-datalen", "ms k x", "CLIENT_ERROR bad command line format"},
	{"ms-negative-datalen", "ms k -1", "CLIENT_ERROR bad command line format"},
	{"ms-datalen-wrap", "ms k 4294967297", `ms "k" len=1 M=S`},
	{"ms-key-too-long", "ms " + key251 + " 1", "CLIENT_ERROR bad command line format"},
	{"ms-flags", "ms k 1 ME c k O5 F7 T0", `ms "k" len=1 [MckOFT] O=5 F=7 M=E`},
	{"ms-invalidate", "ms k 1 I C5", `ms "k" len=1 [IC] C=5 M=S`},
	{"ms-F-wraps", "ms k 1 F4294967296", `ms "k" len=1 [F] M=S`},
	{"ms-invalid-flag", "ms k 1 Q", "CLIENT_ERROR invalid flag"},
	{"ms-S-is-not-a-flag", "ms k 1 S1", "CLIENT_ERROR invalid flag"},
	{"ms-dup", "ms k 1 v v", "CLIENT_ERROR duplicate flag"},
	{"ms-bad-mode", "ms k 1 MX", "CLIENT_ERROR invalid mode for ms M token"},
	{"ms-lower-mode", "ms k 1 Me", "CLIENT_ERROR invalid mode for ms M token"},
	{"ms-bad-F", "ms k 1 Fx", "CLIENT_ERROR bad command line format"},
	{"ms-b64-bad", "ms k 1 b", "CLIENT_ERROR error decoding key"},
	{"ms-opaque-too-long", "ms k 1 O" + opaque32, "CLIENT_ERROR opaque token too long"},
	{"ms-mode-beats-opaque", "ms k 1 O" + opaque32 + " MX", "CLIENT_ERROR invalid mode for ms M token"},
	{"ms-16-flags", "ms k 1" + flags16, `ms "k" len=1 [vftcshlkOuTNRPLI] O=1 T=5 N=5 R=5 M=S`},
	{"ms-too-many-flags", "ms k 1" + flags16 + " q", "CLIENT_ERROR options flags too long"},

	{"md-no-key", "md", "ERROR"},
	{"md", "md k", `md "k"`},
	{"md-flags", "md k C5 I T30 q", `md "k" [CITq] T=30 C=5`},
	{"md-invalid", "md k Q", "CLIENT_ERROR invalid or duplicate flag"},
	{"md-dup", "md k q q", "CLIENT_ERROR invalid or duplicate flag"},
	{"md-bad-T", "md k Tx", "CLIENT_ERROR invalid or duplicate flag"},
	{"md-b64-bad", "md k b", "CLIENT_ERROR invalid or duplicate flag"},
	{"md-opaque-too-long", "md k O" + opaque32, "CLIENT_ERROR opaque token too long"},
	{"md-17-flags", "md k" + flags16 + " q", `md "k" [vftcshlkOuTNRPLIq] O=1 T=5 N=5 R=5`},
	{"md-too-many-flags", "md k" + flags16 + " q b", "CLIENT_ERROR options flags too long"},
	{"md-key-too-long", "md " + key251, "CLIENT_ERROR bad command line format"},

	{"ma-no-key", "ma", "ERROR"},
	{"ma", "ma k", `ma "k" D=1 M=I`},
	{"ma-incr-vivify", "ma k M+ N0 J5 v", `ma "k" [MNJv] J=5 D=1 M=I`},
	{"ma-decr", "ma k M- D2 v", `ma "k" [MDv] D=2 M=D`},
	{"ma-decr-letter", "ma k MD", `ma "k" [M] D=1 M=D`},
	{"ma-bad-mode", "ma k MX", "CLIENT_ERROR invalid mode for ma M token"},
	{"ma-lower-mode", "ma k Mi", "CLIENT_ERROR invalid mode for ma M token"},
	{"ma-invalid", "ma k Q", "CLIENT_ERROR invalid or duplicate flag"},
	{"ma-bad-D", "ma k Dx", "CLIENT_ERROR invalid or duplicate flag"},
	{"ma-negative-D", "ma k D-1", "CLIENT_ERROR invalid or duplicate flag"},
	{"ma-J-overflow", "ma k J18446744073709551616", "CLIENT_ERROR invalid or duplicate flag"},
	{"ma-dup-opaque", "ma k O1 k O2", "CLIENT_ERROR invalid or duplicate flag"},
	{"ma-opaque-too-long", "ma k O" + opaque32, "CLIENT_ERROR opaque token too long"},

	{"me-no-key", "me", "CLIENT_ERROR bad command line format"},
	{"me", "me k", `me "k"`},
	{"me-args-ignored", "me k x y", `me "k"`},
	{"me-b64", "me aw== b", `me "k" b64`},
	{"me-b64-bad", "me k b", "CLIENT_ERROR bad command line format"},
	{"me-key-too-long", "me " + key251, "CLIENT_ERROR bad command line format"},
}

func TestMetaFlagsHas(t *testing.T) {
	var req Request
	if err := Parse([]byte("mg k v O1 T5 q"), &req); err != nil {
		t.Fatal(err)
	}
	for c, want := range map[byte]bool{'v': true, 'O': true, 'T': true, 'q': true, 'k': false, 'V': false, 'o': false, '5': false, ' ': false} {
		if got := req.Meta.Flags.Has(c); got != want {
			t.Errorf("Has(%q) = %v, want %v", c, got, want)
		}
	}
}

// decodeKey must agree with encoding/base64 on canonical input.
func TestDecodeKey(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"aw==", "k"}, {"a2s=", "kk"}, {"a2tr", "kkk"}, {"a2tra2tr", "kkkkkk"},
		{"a\n2\x01s=", "kk"}, // bytes outside the alphabet are skipped
		{"a2s=garb", "kk"},   // decoding stops after the first padded block
		{"a2s=garbage!", ""}, // but the count of alphabet bytes must still be a multiple of 4
		{"a2s", ""}, {"", ""}, {"====", ""}, {"a===", ""},
	} {
		var dst [KeyMax]byte
		n := decodeKey(dst[:], []byte(tc.in))
		if got := string(dst[:n]); got != tc.want {
			t.Errorf("decodeKey(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
