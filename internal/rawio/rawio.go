// Package rawio reads and writes sockets with raw system calls, out of the
// Go scheduler's sight.
//
// A socket of Go's net package is non-blocking: its read and write return
// at once, with bytes or with EAGAIN. Go still makes them as calls that
// might block (entersyscall): if one lasts longer than the runtime's
// monitor takes to look (20 µs to 10 ms), the monitor gives the thread's
// P to another thread, waking or starting one, and the thread, once its
// call returns, finds its P gone and must find another or sleep. On a
// virtual machine whose system calls and wake-ups are dear, a write to a
// loopback socket, which also runs the receiver's side of TCP and wakes
// it, lasts that long often enough to make those hand-offs a large part
// of a server's context switches. A raw call keeps the P; the net
// package's poller still parks the goroutine when a call would block
// (syscall.RawConn), and deadlines and Close work as on the net.Conn.
//
// A call that might block also wakes the monitor. When every P of the
// process is idle, which a node between requests often is, the monitor
// sleeps until the next timer; such a call wakes it and resets its
// interval to 20 µs, and it looks that often for as long as any P stays
// busy, slowing down only after 50 looks that found nothing to take
// back. One such call per forwarded write (the peer client's check of a
// pooled connection, now PeekFD) made the monitor's sleeps 43 % of a
// 3-node cluster's context switches under writes, and TLS's calls did
// the same on every connection under TLS until it ran over a wrapped
// socket (Listener, and Wrap under tls.Client) (README, "What a write
// cost was Go's monitor waking").
//
// Its ReadIdle, for the wait between messages, waits before it reads
// after a read that took all the socket held, on Linux with the Go release
// the package knows (wait_linux.go): Go's own Read must read first, and on
// a connection answered one request at a time that read finds nothing,
// EAGAIN, every time — one system call in three of a node's at pipeline 1.
//
// It suits calls that copy what the socket holds or has room for, and no
// more: reads, writes and peeks of a non-blocking socket. On a 2-core
// VM, 50 connections at pipeline 1, it took a Spillway node's CPU per
// request down by 2 to 11 % and its context switches from 0.18 to
// 0.06–0.15 per request (README, "Raw socket calls").
package rawio

import "net"

// Wrap returns c with Read and Write made raw where it can (a TCP or Unix
// socket on Linux), else c itself. Everything else — deadlines, Close,
// addresses — is c's, and the wrapped conn's NetConn method returns c.
//
// To make a TLS connection's socket calls raw, wrap the socket and run
// TLS over it (tls.Client(Wrap(c), cfg), or Listener for a server):
// Wrap leaves a *tls.Conn as it is.
func Wrap(c net.Conn) net.Conn {
	if w := wrap(c); w != nil {
		return w
	}
	return c
}

// ReadIdle reads into b as c.Read does, for a read that waits for the
// first bytes of the next message: where c is a conn Wrap wrapped whose
// last read took all its socket held (less than its buffer), it waits for
// the poller before it reads, rather than read once to find nothing and
// then wait — one system call less per message, where the Go release and
// platform allow (wait_linux.go). On any other conn it is c.Read.
//
// The cost is an end of stream or a reset that came with the last bytes
// read: the poller reported it with them, so the wait is not woken for
// it, and lasts until more comes, the deadline passes or the conn is
// closed. A caller that waits so without a deadline looks for that now
// and then (EndPending) and ends the wait itself. So it suits only the
// wait between messages: a read in the middle of one must see the end at
// once (found by review: a client that closed halfway through a request
// left it open for good), and Read does. TCP urgent data, which stops a
// read short of the bytes behind it, stalls it the same way.
func ReadIdle(c net.Conn, b []byte) (int, error) { return readIdle(c, b) }

// EndPending reports whether c, a conn Wrap wrapped whose ReadIdle may be
// waiting, holds an end of stream or an error in its socket, which that
// wait would not be woken for. It looks with one system call (a peek), and
// is false for every other conn.
func EndPending(c net.Conn) bool { return endPending(c) }

// Listener returns ln with every connection it accepts wrapped (Wrap): on
// Linux, a TLS listener over it (tls.NewListener) reads and writes its
// sockets raw.
func Listener(ln net.Listener) net.Listener { return listener{ln} }

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(c), nil
}

// Unwrap returns the connection under c's wrappings — Wrap's, and TLS's or
// any other that has a NetConn method — for what only the socket itself
// offers (SetLinger, SyscallConn).
func Unwrap(c net.Conn) net.Conn {
	for {
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return c
		}
		c = u.NetConn()
	}
}
