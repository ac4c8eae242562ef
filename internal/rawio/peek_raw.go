//go:build linux && !386 && !s390x

package rawio

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PeekFD copies what socket fd has to read into b without taking it, and
// without waiting (recv with MSG_PEEK and MSG_DONTWAIT): the count, 0 at
// the end of the stream, or EAGAIN if there is nothing yet. An empty b is
// EINVAL: its 0 would read as the end.
//
// On Linux the call is raw, as Read's and Write's, in every build: it
// writes only into b, which the race detector need not be told of
// (syscall's Recvfrom does not tell it either). But 386 and s390x have
// recvfrom as a system call of its own only since Linux 4.3 (before it,
// through socketcall), so there it is syscall's (peek_unix.go).
func PeekFD(fd uintptr, b []byte) (int, syscall.Errno) {
	if len(b) == 0 {
		return 0, syscall.EINVAL
	}
	n, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	return count(n, e), e
}
