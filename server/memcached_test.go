package server

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

// The real memcached is the reference the conformance suite is proven
// against; other tests (memccapable, pymemcache) reuse the same helpers. A
// missing tool skips the test loudly on a developer's machine, but fails it
// when SPILLWAY_CI is set: CI must never turn green by skipping.

// ciEnv names the variable that turns every "tool missing" skip into a failure.
const ciEnv = "SPILLWAY_CI"

// memcachedStartTimeout bounds how long startMemcached waits for the child to
// accept connections. memcached is usually ready in a few milliseconds.
const memcachedStartTimeout = 5 * time.Second

// missingTool skips or fails t according to the SPILLWAY_CI policy.
func missingTool(t testing.TB, what, debianPkg string) {
	t.Helper()
	msg := fmt.Sprintf("%s is not available: install it with `apt-get install %s`", what, debianPkg)
	if os.Getenv(ciEnv) != "" {
		t.Fatalf("%s (%s is set: CI must not pass by skipping)", msg, ciEnv)
	}
	t.Skipf("\n**********\n*** SKIPPED: %s\n*** this test did NOT run; set %s=1 to make this a failure\n**********", msg, ciEnv)
}

// requireTool returns the path of the executable name, found in PATH. When it
// is missing the test is skipped with a message naming the Debian package
// that provides it, or fails if SPILLWAY_CI is set.
func requireTool(t testing.TB, name, debianPkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		missingTool(t, fmt.Sprintf("%q (%v)", name, err), debianPkg)
	}
	return path
}

// requirePythonModule returns the path of python3 after checking that it can
// import module; it follows the same skip/fail policy as requireTool.
// Example: requirePythonModule(t, "pymemcache", "python3-pymemcache").
func requirePythonModule(t testing.TB, module, debianPkg string) string {
	t.Helper()
	// Debian's python3-* packages install for Debian's own interpreter,
	// which a developer's PATH may shadow with another python3 (pyenv).
	var tried []string
	for _, python := range []string{"/usr/bin/python3", "python3"} {
		path, err := exec.LookPath(python)
		if err != nil {
			continue
		}
		out, err := exec.Command(path, "-c", "import "+module).CombinedOutput()
		if err == nil {
			return path
		}
		tried = append(tried, fmt.Sprintf("%s: %v: %s", path, err, bytes.TrimSpace(out)))
	}
	missingTool(t, fmt.Sprintf("python3 module %q (%s)", module, strings.Join(tried, "; ")), debianPkg)
	return ""
}

// startMemcached starts /usr/bin/memcached (found in PATH) on 127.0.0.1 with
// a free port and the settings the conformance suite assumes (-m 64, default
// item size max of 1 MiB, -t 2, no UDP), plus args. It returns "127.0.0.1:port"
// once the server accepts connections; the process is killed and reaped in
// t.Cleanup.
func startMemcached(t testing.TB, args ...string) string {
	t.Helper()
	bin := requireTool(t, "memcached", "memcached")
	// The free port is found by listening on :0 and closing again, so another
	// process may take it before memcached binds it; then memcached exits at
	// once and we try again with a new port.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		addr, err := tryStartMemcached(t, bin, args)
		if err == nil {
			return addr
		}
		lastErr = err
	}
	t.Fatalf("starting memcached: %v", lastErr)
	return ""
}

// tryStartMemcached makes one attempt of startMemcached.
func tryStartMemcached(t testing.TB, bin string, extra []string) (string, error) {
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
	var stderr lockedBuffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
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

	deadline := time.Now().Add(memcachedStartTimeout)
	for {
		if isMemcached(addr) {
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
				args, waitErr, stderr.String())
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return "", fmt.Errorf("memcached %v did not answer on %s within %v; output: %s",
				args, addr, memcachedStartTimeout, stderr.String())
		}
	}
}

// isMemcached reports whether a memcached answers "version" at addr. A bare
// successful dial is not enough: on a busy machine another test may have
// taken the port between freePort and memcached's bind, and its listener
// would accept the dial while memcached exits.
func isMemcached(addr string) bool {
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
	return err == nil && strings.HasPrefix(line, "VERSION ")
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
