//go:build linux && !race && !msan && !asan

package rawio

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// read and write are the raw calls: fd is non-blocking, so neither
// waits, and the scheduler need not know of them.
func read(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

func write(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}
