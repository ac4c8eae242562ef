package rawio

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// conn is a net.Conn whose Read and Write are raw.
//
// The functions RawConn calls are made once, in wrap, and take their
// buffers and give their results through the conn (under rmu and wmu:
// net.Conn allows concurrent Reads, and concurrent Writes): a closure per
// call would be two allocations per Read and per Write.
type conn struct {
	net.Conn
	rc syscall.RawConn

	rmu    sync.Mutex
	rbuf   []byte        // guarded by rmu: Read's buffer
	rn     int           // guarded by rmu: what the read returned
	rerr   syscall.Errno // guarded by rmu
	readFn func(fd uintptr) bool
	// drained is set when the last read took less than its buffer, all
	// the socket held: a ReadIdle next waits before it reads
	// (wait_linux.go). Guarded by rmu.
	drained bool
	// pd is the runtime's poll descriptor, on a build that finds it; else
	// nil, and ReadIdle reads first as Read does.
	pd     unsafe.Pointer
	waitFn func(fd uintptr)

	wmu     sync.Mutex
	wbuf    []byte        // guarded by wmu: what is left to write
	wn      int           // guarded by wmu: bytes written
	werr    syscall.Errno // guarded by wmu
	writeFn func(fd uintptr) bool
}

func wrap(nc net.Conn) net.Conn {
	switch nc.(type) {
	case *net.TCPConn, *net.UnixConn:
	default:
		return nil // TLS, pipes, test doubles: theirs are not a socket's calls
	}
	rc, err := nc.(syscall.Conn).SyscallConn()
	if err != nil {
		return nil
	}
	// A raw call must never block: only a non-blocking stream socket
	// (a datagram's empty read is not the end of a stream).
	ok := false
	var pd unsafe.Pointer
	rc.Control(func(fd uintptr) {
		fl, err1 := unix.FcntlInt(fd, unix.F_GETFL, 0)
		typ, err2 := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TYPE)
		ok = err1 == nil && err2 == nil && fl&unix.O_NONBLOCK != 0 && typ == unix.SOCK_STREAM
		if ok {
			pd = pollDesc(nc, fd)
		}
	})
	if !ok {
		return nil
	}
	c := &conn{Conn: nc, rc: rc, pd: pd}
	c.readFn, c.writeFn = c.readOnce, c.writeAll
	c.waitFn = func(uintptr) { waitReadable(c.pd) }
	return c
}

// Read reads as net.Conn's Read does: at least one byte, io.EOF at the
// end, errors as *net.OpError.
func (c *conn) Read(b []byte) (int, error) { return c.read(b, false) }

// readIdle is ReadIdle.
func readIdle(nc net.Conn, b []byte) (int, error) {
	if c, ok := nc.(*conn); ok {
		return c.read(b, true)
	}
	return nc.Read(b)
}

// read is Read, waiting first if idle and the last read drained the
// socket (ReadIdle).
func (c *conn) read(b []byte, idle bool) (int, error) {
	if len(b) == 0 {
		// Nothing to read, but a closed conn says so, as net's does.
		if err := c.rc.Control(noop); err != nil {
			return 0, c.opError("read", err)
		}
		return 0, nil
	}
	c.rmu.Lock()
	if idle && c.drained {
		// Under Control: its reference keeps the socket, and pd, open.
		c.rc.Control(c.waitFn)
	}
	c.rbuf, c.rn, c.rerr = b, 0, 0
	err := c.rc.Read(c.readFn)
	n, errno := c.rn, c.rerr
	c.drained = c.pd != nil && err == nil && errno == 0 && n > 0 && n < len(b)
	c.rbuf = nil
	c.rmu.Unlock()
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func noop(uintptr) {}

// count is a raw call's result as a count: 0 on an error, where the
// kernel's result is -1.
func count(n uintptr, e syscall.Errno) int {
	if e != 0 {
		return 0
	}
	return int(n)
}

// readOnce reads once into rbuf, or reports false for the poller to wait
// for more.
func (c *conn) readOnce(fd uintptr) bool {
	for {
		n, e := ReadFD(fd, c.rbuf)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		c.rn, c.rerr = n, e
		return true
	}
}

// Write writes all of b, or fails as net.Conn's Write does.
func (c *conn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	c.wbuf, c.wn, c.werr = b, 0, 0
	err := c.rc.Write(c.writeFn)
	n, errno := c.wn, c.werr
	c.wbuf = nil
	c.wmu.Unlock()
	switch {
	case err != nil:
		return n, c.opError("write", err)
	case errno != 0:
		return n, c.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

// writeAll writes what is left of wbuf, or reports false for the poller
// to wait for room.
func (c *conn) writeAll(fd uintptr) bool {
	for c.wn < len(c.wbuf) {
		n, e := WriteFD(fd, c.wbuf[c.wn:])
		switch e {
		case 0:
			c.wn += n
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			c.werr = e
			return true
		}
	}
	return true
}

// endPending peeks at a wrapped conn's socket for an end of stream or an
// error (EndPending).
func endPending(nc net.Conn) bool {
	c, ok := nc.(*conn)
	if !ok || c.pd == nil {
		return false
	}
	var b [1]byte
	end := false
	c.rc.Control(func(fd uintptr) {
		n, e := PeekFD(fd, b[:])
		end = e == 0 && n == 0 || e != 0 && e != unix.EAGAIN && e != unix.EINTR
	})
	return end
}

// NetConn returns the conn Wrap wrapped.
func (c *conn) NetConn() net.Conn { return c.Conn }

// opError is err as net's Read and Write report it. An error of the
// RawConn itself (closed, deadline) is already a *net.OpError, of its
// "raw-read" or "raw-write": it is renamed, not wrapped again.
func (c *conn) opError(op string, err error) error {
	if oe, ok := errors.AsType[*net.OpError](err); ok {
		oe.Op = op
		return oe
	}
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
