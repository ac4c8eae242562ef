//go:build linux && !race && !msan && !asan

package rawio

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ReadFD and WriteFD are the raw calls, for a non-blocking fd (neither
// waits, so the scheduler need not know of them) and a b that is not
// empty. bench/floor's event loops make theirs with them too.
func ReadFD(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

func WriteFD(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

// PeekFD copies what a socket has to read into b without taking it, and
// without waiting (recv with MSG_PEEK and MSG_DONTWAIT): 0 at the end of
// the stream, EAGAIN if there is nothing yet. b must not be empty.
func PeekFD(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}
