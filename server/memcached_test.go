package server

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"spillway/internal/memcachedtest"
)

// The real memcached is the reference the conformance suite is proven
// against; other tests (memccapable, pymemcache) reuse the same helpers,
// which follow internal/memcachedtest's policy: a missing tool skips the
// test loudly on a developer's machine, but fails it when SPILLWAY_CI is
// set.

// missingTool skips or fails t according to the SPILLWAY_CI policy.
func missingTool(t testing.TB, what, debianPkg string) {
	t.Helper()
	memcachedtest.Missing(t, what, debianPkg)
}

// requireTool returns the path of the executable name, found in PATH.
func requireTool(t testing.TB, name, debianPkg string) string {
	t.Helper()
	return memcachedtest.Tool(t, name, debianPkg)
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

// startMemcached starts memcached on a free loopback port with the settings
// the conformance suite assumes (memcachedtest.Start), plus args.
func startMemcached(t testing.TB, args ...string) string {
	t.Helper()
	return memcachedtest.Start(t, args...)
}
