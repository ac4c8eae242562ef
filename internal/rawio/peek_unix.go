//go:build unix && !aix && !(linux && !386 && !s390x)

package rawio

import "syscall"

// PeekFD is peek_raw.go's, through syscall's Recvfrom.
func PeekFD(fd uintptr, b []byte) (int, syscall.Errno) {
	if len(b) == 0 {
		return 0, syscall.EINVAL
	}
	n, _, err := syscall.Recvfrom(int(fd), b, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	if err != nil {
		if e, ok := err.(syscall.Errno); ok {
			return 0, e
		}
		return 0, syscall.EINVAL
	}
	return n, 0
}
