// Package memcachedtest starts the real memcached for the tests that check
// Spillway against it (the reference of every byte a client sees), and
// holds the policy for tools that are missing: a test skips loudly on a
// developer's machine, and fails when SPILLWAY_CI is set, because CI must
// never turn green by skipping. It is internal, for tests only, like
// net/http/httptest.
package memcachedtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// CIEnv names the variable that turns every "tool missing" skip into a failure.
const CIEnv = "SPILLWAY_CI"

// startTimeout bounds how long Start waits for memcached to accept
// connections. It is usually ready in a few milliseconds.
const startTimeout = 5 * time.Second

// Missing skips t, or fails it when SPILLWAY_CI is set, saying what is
// missing and which Debian package provides it.
func Missing(t testing.TB, what, debianPkg string) {
	t.Helper()
	msg := fmt.Sprintf("%s is not available: install it with `apt-get install %s`", what, debianPkg)
	if os.Getenv(CIEnv) != "" {
		t.Fatalf("%s (%s is set: CI must not pass by skipping)", msg, CIEnv)
	}
	t.Skipf("\n**********\n*** SKIPPED: %s\n*** this test did NOT run; set %s=1 to make this a failure\n**********", msg, CIEnv)
}

// Tool returns the path of the executable name, found in PATH, or calls
// Missing.
func Tool(t testing.TB, name, debianPkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		Missing(t, fmt.Sprintf("%q (%v)", name, err), debianPkg)
	}
	return path
}

// Start starts memcached (found in PATH) on 127.0.0.1 with a free port, no
// UDP, -t 2 and -m 64 (what the conformance suite assumes), then args. It
// returns "127.0.0.1:port" once memcached answers there; t's cleanup kills
// and reaps it.
func Start(t testing.TB, args ...string) string {
	t.Helper()
	bin := Tool(t, "memcached", "memcached")
	// The free port is found by listening on :0 and closing again, so another
	// process may take it before memcached binds it; then memcached exits at
	// once and we try again with a new port.
	var lastErr error
	for range 3 {
		addr, err := tryStart(t, bin, args)
		if err == nil {
			return addr
		}
		lastErr = err
	}
	t.Fatalf("starting memcached: %v", lastErr)
	return ""
}

// tryStart makes one attempt of Start.
func tryStart(t testing.TB, bin string, extra []string) (string, error) {
	t.Helper()
	port, err := freePort()
	if err != nil {
		return "", err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "0", "-t", "2", "-m", "64"}
	if os.Geteuid() == 0 {
		// memcached refuses to run as root unless told which user to be.
		args = append(args, "-u", "root")
	}
	args = append(args, extra...)
	cmd := exec.Command(bin, args...)
	var out lockedBuffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}

	deadline := time.Now().Add(startTimeout)
	for {
		if IsMemcached(addr) {
			select {
			case <-exited: // someone else's server answered on our port
			default:
				t.Cleanup(stop)
				return addr, nil
			}
		}
		select {
		case <-exited:
			return "", fmt.Errorf("memcached %v exited before accepting connections: %v; output: %s",
				args, waitErr, out.String())
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return "", fmt.Errorf("memcached %v did not answer on %s within %v; output: %s",
				args, addr, startTimeout, out.String())
		}
	}
}

// IsMemcached reports whether a memcached answers "version" at addr (or
// asks to be authenticated first). A
// bare successful dial is not enough: on a busy machine another test may
// have taken the port between freePort and memcached's bind, and its
// listener would accept the dial while memcached exits.
func IsMemcached(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
	if err != nil {
		return false
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return false
	}
	if _, err := conn.Write([]byte("version\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	// One started with -Y answers that it wants authentication first.
	return err == nil && (strings.HasPrefix(line, "VERSION ") || line == "CLIENT_ERROR unauthenticated\r\n")
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	tcp, ok := ln.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("listener address is not TCP")
	}
	return tcp.Port, nil
}

// lockedBuffer collects a child's output; exec copies into it from its own
// goroutine while a failing start reads it.
type lockedBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
