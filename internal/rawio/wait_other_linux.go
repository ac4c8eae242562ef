//go:build linux && !((amd64 || arm64) && go1.26 && !go1.27)

package rawio

import (
	"net"
	"unsafe"
)

// pollDesc finds no poll descriptor on this build (see wait_linux.go):
// ReadIdle reads first, as Read does.
func pollDesc(net.Conn, uintptr) unsafe.Pointer { return nil }

func waitReadable(unsafe.Pointer) {}

// waitsBeforeRead says this build reads first.
const waitsBeforeRead = false
