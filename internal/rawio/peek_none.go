//go:build windows || aix

package rawio

import "syscall"

// PeekFD cannot peek on this system (no recv with MSG_PEEK and
// MSG_DONTWAIT to call): it says ENOSYS, and its callers cannot tell.
func PeekFD(uintptr, []byte) (int, syscall.Errno) { return 0, syscall.ENOSYS }
