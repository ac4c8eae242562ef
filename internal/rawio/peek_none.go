//go:build !unix

package rawio

import "syscall"

// PeekFD is not there to call on a system without Unix sockets' recv.
func PeekFD(uintptr, []byte) (int, syscall.Errno) { return 0, syscall.EINVAL }
