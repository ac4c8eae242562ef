//go:build !linux

package rawio

import (
	"net"
	"syscall"
)

// wrap makes nothing raw but on Linux.
func wrap(net.Conn) net.Conn { return nil }

// PeekFD is syscall's recv with MSG_PEEK and MSG_DONTWAIT where calls are
// not made raw.
func PeekFD(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, err := syscall.Recvfrom(int(fd), b, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	if err == nil {
		return n, 0
	}
	if e, ok := err.(syscall.Errno); ok {
		return 0, e
	}
	return 0, syscall.EINVAL
}
