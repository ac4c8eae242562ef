//go:build linux && (race || msan || asan)

package rawio

import "syscall"

// Under the race detector (and the sanitizers) ReadFD and WriteFD are
// syscall's: those tell the detector what the kernel wrote and read, and
// that a write happens before the read that sees its bytes, which a raw
// call does not. The code around them, all that rawio adds, is the same.
func ReadFD(fd uintptr, b []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), b)
	return max(n, 0), errno(err)
}

func WriteFD(fd uintptr, b []byte) (int, syscall.Errno) {
	n, err := syscall.Write(int(fd), b)
	return max(n, 0), errno(err)
}

func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	return err.(syscall.Errno)
}
