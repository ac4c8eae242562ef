// Package buildtest builds the binaries that tests start as processes
// (spillway serve nodes, make run's launcher), once per test binary, into
// a temporary directory that Cleanup removes. It is internal, for tests
// only.
package buildtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

var (
	mu    sync.Mutex        // guards what follows
	dir   string            // "" until the first build
	built map[string]string // package -> binary
)

// Binary returns the binary of the main package pkg (as go build takes it,
// e.g. "." or "../spillway"), building it on the first call for pkg.
func Binary(pkg string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if bin, ok := built[pkg]; ok {
		return bin, nil
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "spillway-test")
		if err != nil {
			return "", err
		}
		dir, built = d, make(map[string]string)
	}
	bin := filepath.Join(dir, fmt.Sprintf("bin%d", len(built)), filepath.Base(mustAbs(pkg)))
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	built[pkg] = bin
	return bin, nil
}

func mustAbs(pkg string) string {
	abs, err := filepath.Abs(pkg)
	if err != nil {
		return pkg
	}
	return abs
}

// Cleanup removes every binary Binary built. Call it from TestMain once
// the tests have run.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
		dir, built = "", nil
	}
}
