//go:build linux && (amd64 || arm64) && go1.26 && !go1.27

package rawio

import (
	"net"
	"unsafe"
)

// A read that finds the socket empty costs a system call that returns
// EAGAIN before the goroutine parks in the poller. Go's net package makes
// one each time a request has been answered and the next one is awaited:
// its Read (and syscall.RawConn's) first clears the poller's record of
// readiness, so must look at the socket itself before it may wait. On
// this VM that call is a quarter of a node's system calls at pipeline 1,
// and a third of a cluster's.
//
// A read that took less than its buffer held took everything the socket
// had; whatever arrives after it is recorded by the poller, so the next
// read between messages (ReadIdle) may wait first and read once. That takes the poller's wait without
// its reset, runtime_pollWait, reached by linkname, on the socket's poll
// descriptor, found in the net package's unexported fields. Both are
// internals of the Go release this file builds for: it builds for one
// release at a time (go1.26 && !go1.27), on 64-bit layouts, and checks
// what it finds against the socket's descriptor (pollDesc), which the
// tests hold to (TestPollDescFound). On any other build, or a connection
// it does not know, ReadIdle reads first, as Read always does.

//go:linkname pollWait internal/poll.runtime_pollWait
func pollWait(pd unsafe.Pointer, mode int) int

// Offsets, in Go 1.26 on 64-bit platforms: net's conn holds a *netFD,
// whose first field is an internal/poll.FD: a fdMutex (16 bytes), Sysfd
// (int), SysFile (one pointer), then pd, whose runtimeCtx is the
// runtime's *pollDesc; that starts with link (a pointer), then fd.
const (
	offSysfd    = 16
	offPollDesc = 32
	offPollFD   = 8
)

// pollDesc returns the runtime's poll descriptor of nc, a socket whose
// descriptor is fd, or nil if nc is not one it knows or what it finds
// there is not fd's.
func pollDesc(nc net.Conn, fd uintptr) unsafe.Pointer {
	var netFD unsafe.Pointer
	switch c := nc.(type) {
	case *net.TCPConn:
		netFD = *(*unsafe.Pointer)(unsafe.Pointer(c))
	case *net.UnixConn:
		netFD = *(*unsafe.Pointer)(unsafe.Pointer(c))
	}
	if netFD == nil || *(*int)(unsafe.Add(netFD, offSysfd)) != int(fd) {
		return nil
	}
	pd := *(*unsafe.Pointer)(unsafe.Add(netFD, offPollDesc))
	if pd == nil || *(*uintptr)(unsafe.Add(pd, offPollFD)) != fd {
		return nil
	}
	return pd
}

// waitReadable parks until the poller has seen the socket become readable
// since the last read, its deadline passes or it is closed; the read that
// follows finds out which. It runs under RawConn.Control, whose reference
// to the socket keeps pd valid: Close wakes it, and frees pd only after.
func waitReadable(pd unsafe.Pointer) { pollWait(pd, 'r') }

// waitsBeforeRead says this build waits before it reads a drained socket.
const waitsBeforeRead = true
