package wire

import (
	"bytes"
	"encoding/base64"
	"testing"

	"spillway/protocol"
)

// FuzzRequestLines builds every request line peers send and parses it
// back with the parser the peer port uses: the key, the tag and the flags
// come out as they went in, whatever bytes the key holds.
func FuzzRequestLines(f *testing.F) {
	f.Add("k", "fwd.abc", " T30")
	f.Add("key with spaces\r\n", "get.1", "")
	f.Add("\x00\xff", "inv.zz", "")
	f.Fuzz(func(t *testing.T, key, tag, extra string) {
		if len(key) == 0 || len(key) > protocol.KeyMax || !validToken(tag) || len(tag) >= 32 || (extra != "" && extra != " T30") {
			t.Skip()
		}
		if !protocol.ValidKey(key) && base64.StdEncoding.EncodedLen(len(key)) > protocol.KeyMax {
			t.Skip() // too long to travel base64-encoded: the entry node refuses it (README)
		}
		var req protocol.Request
		for _, line := range [][]byte{AppendGet(nil, key, tag, extra), DeleteLine(key, " O"+tag)} {
			if err := protocol.Parse(line, &req); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			if string(req.Key) != key || !bytes.Equal(req.Meta.Opaque, []byte(tag)) {
				t.Fatalf("%q: key %q opaque %q, want %q %q", line, req.Key, req.Meta.Opaque, key, tag)
			}
		}
		if !validToken(key) || len(key) > 32 {
			return // a control verb is one of ours: a short plain word
		}
		line := ControlLine(key, tag, len(extra))
		if err := protocol.Parse(line, &req); err != nil || req.Command != protocol.CmdMetaSet ||
			string(req.Key) != key || string(req.Meta.Opaque) != tag || req.DataLen() != len(extra) {
			t.Fatalf("%q: %v (key %q, opaque %q, %d bytes)", line, err, req.Key, req.Meta.Opaque, req.DataLen())
		}
	})
}

// validToken reports whether s can stand as one token of a request line.
func validToken(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}
