package main

import (
	"bytes"
	"encoding/base64"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestErrorText: a mistake is reported once, under the flag's name as the
// user writes it, with no package names stuttering in front (issue 15).
func TestErrorText(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	shortKey := base64.StdEncoding.EncodeToString([]byte("0123456789"))
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"long flag", []string{"serve", "--epsilon", "x"}, `spillway serve: --epsilon "x": want a non-negative number or inf` + "\n"},
		{"short flag", []string{"serve", "-m", "lots"}, `spillway serve: -m "lots": want a size`},
		{"negative threads", []string{"serve", "-t", "-1"}, `spillway serve: -t "-1": want a non-negative whole number`},
		{"long form of a short flag", []string{"serve", "--memory-limit", "lots"}, `spillway serve: --memory-limit "lots": want a size`},
		{"unknown flag", []string{"serve", "--nope"}, "spillway serve: unknown flag --nope (spillway serve --help lists them)\n"},
		{"missing value", []string{"bench", "--servers"}, "spillway bench: --servers needs a value\n"},
		{"item size over half of -m", []string{"serve", "-m", "1", "-I", "2m"},
			"spillway serve: -I 2097152 is more than half of -m (1048576 bytes)"},
		{"no stutter", []string{"bench", "--servers", "127.0.0.1:1", "--rate", "1", "--duration", "1ms"},
			"spillway bench: rate * duration is less than one request\n"},
		{"short gossip key", []string{"serve", "--gossip", "127.0.0.1:0", "--gossip-key", shortKey},
			"spillway serve: --gossip-key: key 1 decodes to 10 bytes; want 16, 24 or 32"},
		{"second gossip key not base64", []string{"serve", "--gossip", "127.0.0.1:0", "--gossip-key", base64.StdEncoding.EncodeToString(make([]byte, 32)) + ",x!"},
			"spillway serve: --gossip-key: key 2 is not base64"},
		{"cluster name too long", []string{"serve", "--gossip", "127.0.0.1:0", "--cluster", strings.Repeat("c", 256)},
			"spillway serve: --cluster: 256 bytes; at most 255"},
		{"port taken, named node", []string{"serve", "--listen", taken.Addr().String(), "--gossip", "127.0.0.1:0", "--name", "n1"},
			"spillway serve (n1): --listen " + taken.Addr().String() + ": address already in use\n"},
		{"gossip port taken", []string{"serve", "--listen", "127.0.0.1:0", "--peer-listen", "127.0.0.1:0", "--gossip", taken.Addr().String(), "--name", "n1"},
			"spillway serve (n1): --gossip " + taken.Addr().String() + " (TCP): address already in use\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run(c.args, &out, &errOut); code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			if !strings.HasPrefix(errOut.String(), c.want) {
				t.Errorf("stderr %q\nwant it to begin %q", errOut.String(), c.want)
			}
		})
	}
}

// TestMistakesCaughtEarly: what can be checked before the work starts is
// (issue 15: a bad --html path failed only after the whole run, and
// --gossip-key without --gossip was accepted silently).
func TestMistakesCaughtEarly(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "old.json")
	if err := os.WriteFile(existing, []byte("old report"), 0o644); err != nil {
		t.Fatal(err)
	}
	ca := testPKI(t, dir)
	key := base64.StdEncoding.EncodeToString(make([]byte, 32))
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"html path", []string{"bench", "--local", "1", "--duration", "20s", "--html", "/nonexistent/dir/report.html"},
			"spillway bench: --html: open /nonexistent/dir/report.html: no such file or directory\n"},
		{"html path a directory", []string{"bench", "--local", "1", "--duration", "20s", "--json", existing, "--html", dir},
			"spillway bench: --html: open " + dir + ": is a directory\n"},
		{"gossip key alone", []string{"serve", "--listen", "127.0.0.1:0", "--gossip-key", key},
			"spillway serve: --gossip-key needs --gossip: without it the node runs alone\n"},
		{"join alone, from the environment", []string{"serve", "--listen", "127.0.0.1:0"},
			"spillway serve: $SPILLWAY_JOIN needs --gossip"},
		{"an empty peer secret", []string{"serve", "--listen", "127.0.0.1:0", "--gossip", "127.0.0.1:0", "--peer-secret", " , "},
			"spillway serve: --peer-secret: no secret in it"},
		{"client auth with an open peer port", []string{"serve", "--listen", "127.0.0.1:0", "--gossip", "127.0.0.1:0", "-Y", existing},
			"spillway serve: --auth-file and --tls-ca guard the client port only"},
		{"bench TLS on the embedded cluster", []string{"bench", "--local", "1", "--tls-ca", ca},
			"spillway bench: --tls-ca goes with --servers: the embedded cluster speaks plain TCP\n"},
		{"bench TLS CA not a certificate", []string{"bench", "--servers", "127.0.0.1:1", "--tls-ca", existing},
			"spillway bench: --tls-ca: "},
		{"bench client certificate without a CA", []string{"bench", "--servers", "127.0.0.1:1", "--tls-cert", existing},
			"spillway bench: --tls-cert and --tls-key need --tls-ca\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if strings.Contains(c.want, "SPILLWAY_JOIN") {
				t.Setenv("SPILLWAY_JOIN", "127.0.0.1:7946")
			}
			var out, errOut bytes.Buffer
			done := make(chan int, 1)
			start := time.Now()
			go func() { done <- run(c.args, &out, &errOut) }()
			select {
			case code := <-done:
				if code != 1 {
					t.Errorf("exit %d, want 1", code)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("still running after 10s; want it refused at once")
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("refused after %v; want it at once", d)
			}
			if !strings.HasPrefix(errOut.String(), c.want) {
				t.Errorf("stderr %q\nwant it to begin %q", errOut.String(), c.want)
			}
		})
	}
	// A report file that existed is left as it was when the run is refused.
	if b, err := os.ReadFile(existing); err != nil || string(b) != "old report" {
		t.Errorf("%s after a refused run: %q, %v", existing, b, err)
	}
}
