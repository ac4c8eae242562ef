package main

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sampleValue is a value other than the default that each kind of option
// takes.
func sampleValue(o option) string {
	switch o.value.(type) {
	case *durationValue:
		return "42s"
	case *intValue:
		return "7"
	case *sizeValue:
		return "3m"
	case *floatValue:
		return "0.5"
	case *boolValue:
		return "true"
	case *countValue:
		return "2"
	}
	return "x-" + o.long
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "spillway.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestConfigSourcesAgree: every option of serve means the same from its
// flag, its variable and the config file, and is reported as coming from
// where it came.
func TestConfigSourcesAgree(t *testing.T) {
	for _, o := range (&serveFlags{}).options() {
		if o.long == configOption {
			continue
		}
		v := sampleValue(o)
		var got [3]string
		for i, src := range []string{"flag", "env", "file"} {
			f := defaultServeFlags()
			opts := f.options()
			var args []string
			switch src {
			case "flag":
				args = []string{"--" + o.long + "=" + v}
			case "env":
				t.Setenv(o.env("SPILLWAY_"), v)
			case "file":
				args = []string{"--config", writeConfig(t, "# a comment\n"+o.long+": "+v+"\n")}
			}
			given, err := parseOptions("serve", "", opts, args, &bytes.Buffer{})
			os.Unsetenv(o.env("SPILLWAY_"))
			if err != nil {
				t.Fatalf("--%s from the %s: %v", o.long, src, err)
			}
			for _, p := range opts {
				if p.long == o.long {
					got[i] = p.value.String()
				}
			}
			want := map[string]string{"flag": "--" + o.long, "env": "$" + o.env("SPILLWAY_"), "file": ":2: " + o.long}[src]
			if !strings.HasSuffix(given[o.long], want) {
				t.Errorf("--%s from the %s recorded as %q, want ...%q", o.long, src, given[o.long], want)
			}
		}
		if got[0] != got[1] || got[0] != got[2] {
			t.Errorf("--%s %s: flag gives %q, env %q, file %q", o.long, v, got[0], got[1], got[2])
		}
	}
}

// TestConfigPrecedence: the command line over the environment over the
// file over the defaults; a list in the file is a comma-separated value.
func TestConfigPrecedence(t *testing.T) {
	path := writeConfig(t, "memory-limit: 10\nport: 1111\njoin: [a:1, \"b:2\"]\ncopy-ttl: 9s\norigin:\n")
	t.Setenv("SPILLWAY_CONFIG", path)
	t.Setenv("SPILLWAY_MEMORY_LIMIT", "20")
	t.Setenv("SPILLWAY_PORT", "2222")
	f := defaultServeFlags()
	given, err := parseOptions("serve", "", f.options(), []string{"-m", "30"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, got, want, from string }{
		{"memory-limit", (&sizeValue{p: &f.memoryBytes, unit: 1 << 20}).String(), "30", "-m"},
		{"port", (&intValue{&f.port}).String(), "2222", "$SPILLWAY_PORT"},
		{"join", f.join, "a:1,b:2", path + ":3: join"},
		{"copy-ttl", f.copyTTL.String(), "9s", path + ":4: copy-ttl"},
		{"config", f.config, path, "$SPILLWAY_CONFIG"},
	} {
		if c.got != c.want || given[c.name] != c.from {
			t.Errorf("%s = %q from %q, want %q from %q", c.name, c.got, given[c.name], c.want, c.from)
		}
	}
	if _, ok := given["origin"]; ok || f.origin != "" {
		t.Errorf("an empty setting counted: origin %q from %q", f.origin, given["origin"])
	}
}

// TestConfigErrors: a mistake in the file names the file, the line and
// the setting.
func TestConfigErrors(t *testing.T) {
	for _, c := range []struct{ name, text, want string }{
		{"unknown setting", "port: 1\nmemory: 64\n", ":2: memory: unknown setting"},
		{"bad value", "\nmemory-limit: lots\n", `:2: memory-limit "lots": want a size`},
		{"twice", "port: 1\nport: 2\n", ":2: port: set already on line 1"},
		{"not a mapping", "- port\n", ":1: want settings"},
		{"nested", "origin:\n  url: x\n", ":2: origin: want a value or a list"},
		{"config in config", "config: other.yaml\n", ":1: config: unknown setting"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			path := writeConfig(t, c.text)
			if code := run([]string{"serve", "--config", path}, &out, &errOut); code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			if !strings.HasPrefix(errOut.String(), "spillway serve: "+path) || !strings.Contains(errOut.String(), c.want) {
				t.Errorf("stderr %q, want the file's path and %q", errOut.String(), c.want)
			}
		})
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"serve", "--config", "/nonexistent.yaml"}, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "--config: open /nonexistent.yaml: no such file") {
		t.Errorf("missing file: exit %d, %q", code, errOut.String())
	}
	// The checks name the file when the setting came from it.
	path := writeConfig(t, "join: 127.0.0.1:7946\n")
	errOut.Reset()
	run([]string{"serve", "--config", path}, &out, &errOut)
	if want := "spillway serve: " + path + ":1: join needs --gossip"; !strings.HasPrefix(errOut.String(), want) {
		t.Errorf("stderr %q, want %q", errOut.String(), want)
	}
}

// TestPrintConfig: --print-config prints every setting with its source,
// masks the secrets, starts nothing, and its output read back as a config
// file gives the same settings.
func TestPrintConfig(t *testing.T) {
	k1 := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	k2 := base64.StdEncoding.EncodeToString([]byte("fedcba9876543210"))
	path := writeConfig(t, "copy-ttl: 9s\n")
	t.Setenv("SPILLWAY_GOSSIP_KEY", k1+","+k2)
	t.Setenv("SPILLWAY_EPSILON", "inf")
	t.Setenv("SPILLWAY_PEER_SECRET", "s3cret-one,s3cret-two")
	args := []string{"serve", "--print-config", "--config", path, "--gossip", "127.0.0.1:0", "--name", "n1",
		"-l", "0.0.0.0:11211", "--advertise", "10.0.0.5", "--origin", "http://o:8080/{key}", "-vv"}
	var out, errOut bytes.Buffer
	if code := run(args, &out, &errOut); code != 0 || errOut.Len() > 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	text := out.String()
	for _, want := range []string{
		`gossip-key: "***,***" # $SPILLWAY_GOSSIP_KEY`,
		`peer-secret: "***,***" # $SPILLWAY_PEER_SECRET`,
		"copy-ttl: 9s # " + path + ":1: copy-ttl",
		`listen: "0.0.0.0:11211" # -l`,
		"epsilon: +Inf # $SPILLWAY_EPSILON",
		"verbose: 2 # -v",
		"memory-limit: 64 # default",
		`origin: "http://o:8080/{key}" # --origin`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("lacks the line %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, k1) || strings.Contains(text, k2) || strings.Contains(text, "s3cret") {
		t.Errorf("a key shows:\n%s", text)
	}
	for _, s := range []string{"config:", "print-config:"} {
		if strings.Contains(text, "\n"+s) {
			t.Errorf("prints %s", s)
		}
	}

	// Read back (its secrets set elsewhere), it gives the same settings.
	back := writeConfig(t, text)
	want := defaultServeFlags()
	if _, err := parseOptions("serve", "", want.options(), args[2:], &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	got := defaultServeFlags()
	if _, err := parseOptions("serve", "", got.options(), []string{"--config", back}, &bytes.Buffer{}); err != nil {
		t.Fatalf("reading --print-config's output back: %v\n%s", err, text)
	}
	wo, gotOpts := want.options(), got.options()
	for i, o := range wo {
		if o.long != configOption && o.long != "print-config" && o.value.String() != gotOpts[i].value.String() {
			t.Errorf("%s: %q, read back %q", o.long, o.value.String(), gotOpts[i].value.String())
		}
	}

	for name, want := range map[string]bool{"gossip-key": true, "peer-secret": true, "tls-key": true,
		"auth-password": true, "listen": false, "max-item-size": false, "join": false} {
		if secret(name) != want {
			t.Errorf("secret(%q) = %v", name, !want)
		}
	}
}

// TestAdvertiseName: --advertise may name the host (a container's
// $HOSTNAME in docker-compose); the node advertises its address.
func TestAdvertiseName(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"localhost", "127.0.0.1"}, // from /etc/hosts: no DNS server asked
		{"localhost:7000", "127.0.0.1:7000"},
		{"10.0.0.5", "10.0.0.5"},
		{"10.0.0.5:7000", "10.0.0.5:7000"},
		{"", ""},
	} {
		f := serveFlags{advertise: c.in}
		if err := f.resolveAdvertise(); err != nil || f.advertise != c.want {
			t.Errorf("--advertise %q: %q, %v; want %q", c.in, f.advertise, err, c.want)
		}
	}
}
