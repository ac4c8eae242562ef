package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"spillway/internal/buildtest"
)

// The Go runtime's limit is the sizing formula less -m (off the heap) and
// the binary's pages: --copy-memory (in a cluster) + 48 MiB + 20 KiB per
// connection --conn-limit allows.
func TestGoMemoryLimit(t *testing.T) {
	const mib, kib = 1 << 20, 1 << 10
	for _, c := range []struct {
		name string
		args []string
		want int64
	}{
		{"defaults alone", nil, 48*mib + 1024*20*kib},
		{"-m is off the heap", []string{"-m", "4096"}, 48*mib + 1024*20*kib},
		{"conn limit", []string{"-c", "10000"}, 48*mib + 10000*20*kib},
		{"cluster default copies", []string{"--gossip", "127.0.0.1:7946"}, 16*mib + 48*mib + 1024*20*kib},
		{"cluster", []string{"--gossip", "127.0.0.1:7946", "-m", "1024", "--copy-memory", "64", "-c", "4096"}, 64*mib + 48*mib + 4096*20*kib},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := defaultServeFlags()
			if _, err := parseOptions("serve", "", f.options(), c.args, &bytes.Buffer{}); err != nil {
				t.Fatal(err)
			}
			if got := f.goMemoryLimit(); got != c.want {
				t.Errorf("%q: %d MiB, want %d MiB", c.args, got>>20, c.want>>20)
			}
		})
	}
}

// A node sets the limit at start and logs it; GOMEMLIMIT, when set, wins.
func TestGoMemoryLimitSet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	bin, err := buildtest.Binary(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env, want, from string
	}{
		{"", strconv.Itoa(48<<20 + 100*20<<10), "flags"},
		{"GOMEMLIMIT=300MiB", strconv.Itoa(300 << 20), "GOMEMLIMIT"},
	} {
		cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "-m", "64", "-c", "100")
		cmd.Env = append(os.Environ(), "GOMEMLIMIT=")
		if c.env != "" {
			cmd.Env = append(cmd.Env, c.env)
		}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		var serving string
		timeout := time.After(10 * time.Second)
		for serving == "" {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatal("the node exited before serving")
				}
				if strings.Contains(l, "msg=serving") {
					serving = l
				}
			case <-timeout:
				t.Fatal("no serving line in 10s")
			}
		}
		cmd.Process.Kill()
		for range lines {
		}
		cmd.Wait()
		if want := "go_memory_limit=" + c.want + " go_memory_limit_from=" + c.from; !strings.Contains(serving, want) {
			t.Errorf("%q: %s\nwant %s", c.env, serving, want)
		}
	}
}
