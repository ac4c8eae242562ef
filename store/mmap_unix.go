//go:build unix

package store

import "golang.org/x/sys/unix"

// Segments and the index live in anonymous private mappings: memory the Go
// runtime neither scans nor counts, so a full node does not make the
// collector run without pause, and a freed segment goes back to the
// kernel at once (dropMem).

// mapMem maps n bytes of zeroed memory.
func mapMem(n int) ([]byte, error) {
	return unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
}

// unmapMem releases a mapping made by mapMem.
func unmapMem(b []byte) { _ = unix.Munmap(b) }

// dropMem gives b's pages back to the kernel, keeping the mapping: they
// read as zeros when next touched.
func dropMem(b []byte) { _ = unix.Madvise(b, unix.MADV_DONTNEED) }
