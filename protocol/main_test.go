package protocol

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// describe renders one Read/Parse outcome as a short string, so that the
// tables below read like the wire: a request with its non-zero fields, or
// the reply Writer.Error sends for an error ("quiet:" when noreply hides it,
// "close" for ErrLineTooLong, "io:" for stream errors).
func describe(req *Request, err error) string {
	if err != nil {
		var out bytes.Buffer
		w := NewWriter(&out)
		w.Error(err)
		w.Flush()
		reply := strings.TrimSuffix(out.String(), "\r\n")
		switch {
		case err == ErrLineTooLong:
			return "close"
		case Quiet(err):
			return "quiet:" + err.(quietError).err.reply
		case Fatal(err):
			return "io:" + err.Error()
		}
		return reply
	}
	var b strings.Builder
	b.WriteString(req.Command.String())
	f := func(format string, a ...any) { fmt.Fprintf(&b, " "+format, a...) }
	if req.Key != nil {
		f("%q", req.Key)
	}
	if len(req.Keys) > 0 {
		f("keys=%q", req.Keys)
	}
	if req.Flags != 0 {
		f("flags=%d", req.Flags)
	}
	if req.Exptime != 0 {
		f("exp=%d", req.Exptime)
	}
	if req.CAS != 0 {
		f("cas=%d", req.CAS)
	}
	if req.Delta != 0 {
		f("delta=%d", req.Delta)
	}
	if len(req.Args) > 0 {
		f("args=%q", req.Args)
	}
	if req.dataLen >= 0 {
		f("len=%d", req.dataLen)
	}
	if req.Noreply {
		f("noreply")
	}
	m := &req.Meta
	if m.Flags.Has('b') {
		f("b64")
	}
	if o := m.Order(); len(o) > 0 {
		f("[%s]", o)
	}
	if m.Opaque != nil {
		f("O=%s", m.Opaque)
	}
	for _, v := range []struct {
		name string
		v    int64
	}{{"T", m.TTL}, {"F", int64(m.ClientFlags)}, {"C", int64(m.CAS)}, {"N", m.Vivify}, {"R", m.Recache}, {"J", int64(m.Initial)}, {"D", int64(m.Delta)}} {
		if v.v != 0 {
			f("%s=%d", v.name, v.v)
		}
	}
	if m.Mode != 0 {
		f("M=%c", m.Mode)
	}
	if req.Data != nil {
		f("data=%q", req.Data)
	}
	return b.String()
}
