//go:build !unix

package store

// Without mmap the memory comes from the Go heap: it still holds no
// pointers, so the collector does not scan it, but it counts towards the
// heap the runtime paces its cycles by.

func mapMem(n int) ([]byte, error) { return make([]byte, n), nil }

func unmapMem([]byte) {}

func dropMem(b []byte) { clear(b) }
