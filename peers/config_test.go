package peers

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

func TestValidKeyLengths(t *testing.T) {
	for _, keys := range [][][]byte{nil, {make([]byte, 16)}, {make([]byte, 24)}, {make([]byte, 32), make([]byte, 16)}} {
		c := Config{SecretKeys: keys}
		if err := c.setDefaults(); err != nil {
			t.Errorf("keys of %d bytes: %v", len(keys), err)
		}
	}
}

func TestDefaults(t *testing.T) {
	c := Config{BindPort: 7946}
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if c.BindAddr != DefaultBindAddr || c.Logger == nil {
		t.Errorf("defaults not applied: %+v", c)
	}
	if !strings.HasSuffix(c.Name, ":7946") {
		t.Errorf("default name %q lacks the bind port", c.Name)
	}
	a, b := Config{}, Config{}
	_ = a.setDefaults()
	_ = b.setDefaults()
	if a.Name == b.Name {
		t.Errorf("two nodes on random ports got the same default name %q", a.Name)
	}
	mc, err := (&Config{Profile: Local, Tune: func(c *memberlist.Config) { c.Name = "ignored"; c.ProbeInterval = time.Minute }, Name: "x"}).memberlist(nil)
	if err != nil {
		t.Fatal(err)
	}
	if mc.Name != "x" || mc.ProbeInterval != time.Minute || mc.ProbeTimeout != memberlist.DefaultLocalConfig().ProbeTimeout {
		t.Errorf("Tune/Profile/Name not layered right: name %q probe %v/%v", mc.Name, mc.ProbeInterval, mc.ProbeTimeout)
	}
}

func TestLogWriter(t *testing.T) {
	tests := []struct {
		line  string
		level slog.Level
		msg   string
	}{
		{"[DEBUG] memberlist: Stream connection from=x\n", slog.LevelDebug, "memberlist: Stream connection from=x"},
		{"[INFO] memberlist: Marking n2 as failed\n", slog.LevelDebug, "memberlist: Marking n2 as failed"},
		{"[WARN] memberlist: Refuting a suspect message\n", slog.LevelWarn, "memberlist: Refuting a suspect message"},
		{"[ERR] memberlist: Failed to decrypt\n", slog.LevelWarn, "memberlist: Failed to decrypt"},
		{"[WARN] memberlist: Got ping for unexpected node 'a2' from=x\n", slog.LevelDebug, "memberlist: Got ping for unexpected node 'a2' from=x"},
		{"Err: Could not set the deadline: x\n", slog.LevelDebug, "memberlist: Err: Could not set the deadline: x"},
	}
	for _, tt := range tests {
		h := &captureHandler{}
		n, err := logWriter{l: slog.New(h)}.Write([]byte(tt.line))
		if n != len(tt.line) || err != nil {
			t.Errorf("Write(%q) = %d, %v", tt.line, n, err)
		}
		if len(h.recs) != 1 || h.recs[0].Level != tt.level || h.recs[0].Message != tt.msg {
			t.Errorf("Write(%q) logged %+v, want %v %q", tt.line, h.recs, tt.level, tt.msg)
		}
	}
}

type captureHandler struct{ recs []slog.Record }

func (h *captureHandler) Enabled(_ context.Context, _ slog.Level) bool { return true }
func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	h.recs = append(h.recs, r)
	return nil
}
func (h *captureHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *captureHandler) WithGroup(string) slog.Handler      { return h }

var _ io.Writer = logWriter{}

// TestLogWriterDeclaredDead: memberlist's refutation of a dead message
// about this node calls OnDeclaredDead; its other lines do not.
func TestLogWriterDeclaredDead(t *testing.T) {
	called := make(chan struct{}, 4)
	w := logWriter{l: slog.New(&captureHandler{}), onDead: func() { called <- struct{}{} }}
	w.Write([]byte("[WARN] memberlist: Refuting a suspect message (from: b)\n"))
	w.Write([]byte("[WARN] memberlist: Refuting a dead message (from: b)\n"))
	select {
	case <-called:
	case <-time.After(5 * time.Second):
		t.Fatal("OnDeclaredDead not called for a refuted death")
	}
	select {
	case <-called:
		t.Fatal("OnDeclaredDead called for a refuted suspicion")
	case <-time.After(50 * time.Millisecond):
	}
}
