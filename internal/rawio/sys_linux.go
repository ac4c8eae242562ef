//go:build linux && !race && !msan && !asan

package rawio

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ReadFD and WriteFD are the raw calls, for a non-blocking fd (neither
// waits, so the scheduler need not know of them) and a b that is not
// empty. bench/floor's event loops make theirs with them too. On an error
// the count is 0, as PeekFD's and as under the race detector (the kernel's
// -1 is not a count).
func ReadFD(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return count(n, e), e
}

func WriteFD(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return count(n, e), e
}
