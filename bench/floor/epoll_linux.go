package main

import (
	"errors"
	"net"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"spillway/internal/rawio"
)

// epoll serves connections on event loops, memcached's way: each loop has
// its own epoll set and runs on a thread of its own; it waits for
// sockets with something to read, reads each once, answers what it read,
// and writes the answers, all before it waits again. Its sockets are
// level-triggered, so a read need not be repeated until it returns
// EAGAIN: what is left is reported at the next wait.
//
// Every system call of a loop is a raw one, its wait included: Go's
// scheduler is not told (entersyscall), so it neither hands the loop's P
// to another thread while the loop waits nor wakes one to take it, and
// the loop's thread, when its wait ends, goes on at once. Measured on a
// 2-core VM under bench/compare's first load, that took the loops from
// 0.86× memcached's requests per CPU-second (waiting with
// unix.EpollWait) to 1.0×, and context switches per request from 0.38 to
// 0.2. The price: a waiting loop keeps its P, so serveEpoll gives the
// runtime one P more than there are loops for everything else (the
// garbage collector, timers, Close); and a loop gives up its P only
// when the runtime preempts it with a signal, which interrupts its wait.
type epoll struct {
	lfd   int // the listening socket, in the first loop's set
	addr  net.Addr
	h     *handler
	loops []*loop
	next  int // the loop the next connection goes to; the first loop's
	wg    sync.WaitGroup

	mu  sync.Mutex
	fds map[int32]struct{} // guarded by mu: the connections open, for Close
}

// loop is one event loop.
type loop struct {
	e     *epoll
	epfd  int
	wake  int // an eventfd: written to stop the loop
	conns map[int32]*econn
}

// econn is a connection of a loop: what it read and not yet answered,
// and what it answered and could not write yet.
type econn struct {
	in   []byte
	have int
	out  []byte
	sent int  // out[:sent] is written
	quit bool // close once out is written
	// blocked is set while the socket had no room for out: the loop
	// then waits for room (EPOLLOUT) instead of for what to read.
	blocked bool
}

func serveEpoll(addr string, loops int) (_ server, err error) {
	if loops < 1 {
		return nil, errors.New("-loops: want 1 or more")
	}
	if runtime.GOMAXPROCS(0) < loops+1 {
		runtime.GOMAXPROCS(loops + 1) // see epoll's comment
	}
	tcp, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, err
	}
	e := &epoll{h: newHandler(), lfd: -1, fds: make(map[int32]struct{})}
	defer func() {
		if err != nil {
			e.closeFDs()
		}
	}()
	var sa unix.Sockaddr
	family := unix.AF_INET
	if ip4 := tcp.IP.To4(); ip4 != nil || tcp.IP == nil {
		s := &unix.SockaddrInet4{Port: tcp.Port}
		copy(s.Addr[:], ip4)
		sa = s
	} else {
		family = unix.AF_INET6
		s := &unix.SockaddrInet6{Port: tcp.Port}
		copy(s.Addr[:], tcp.IP.To16())
		sa = s
	}
	if e.lfd, err = unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0); err != nil {
		return nil, err
	}
	if err := unix.SetsockoptInt(e.lfd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return nil, err
	}
	if err := unix.Bind(e.lfd, sa); err != nil {
		return nil, err
	}
	if err := unix.Listen(e.lfd, 1024); err != nil {
		return nil, err
	}
	bound, err := unix.Getsockname(e.lfd)
	if err != nil {
		return nil, err
	}
	switch b := bound.(type) {
	case *unix.SockaddrInet4:
		e.addr = &net.TCPAddr{IP: net.IP(b.Addr[:]), Port: b.Port}
	case *unix.SockaddrInet6:
		e.addr = &net.TCPAddr{IP: net.IP(b.Addr[:]), Port: b.Port}
	}
	for range loops {
		l := &loop{e: e, epfd: -1, wake: -1, conns: make(map[int32]*econn)}
		e.loops = append(e.loops, l)
		if l.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
			return nil, err
		}
		if l.wake, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
			return nil, err
		}
		if err := l.add(l.wake); err != nil {
			return nil, err
		}
	}
	if err := e.loops[0].add(e.lfd); err != nil {
		return nil, err
	}
	for _, l := range e.loops {
		e.wg.Add(1)
		go l.run()
	}
	return e, nil
}

func (e *epoll) Addr() net.Addr { return e.addr }

// Close stops the loops, then closes every connection (those that never
// sent a byte, which no loop has met yet, included) and the listening
// socket.
func (e *epoll) Close() error {
	one := [8]byte{1}
	for _, l := range e.loops {
		unix.Write(l.wake, one[:])
	}
	e.wg.Wait()
	for fd := range e.fds {
		unix.Close(int(fd))
	}
	e.closeFDs()
	return nil
}

func (e *epoll) closeFDs() {
	for _, l := range e.loops {
		for _, fd := range []int{l.epfd, l.wake} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}
	if e.lfd >= 0 {
		unix.Close(e.lfd)
	}
}

func (l *loop) add(fd int) error {
	return unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)})
}

// waitMillis bounds a loop's wait (rawWait).
const waitMillis = 10

func (l *loop) run() {
	defer l.e.wg.Done()
	// The loop keeps its thread: every wait and every call of a turn
	// is made by one thread, as in memcached's workers.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	events := make([]unix.EpollEvent, 128)
	for {
		n, err := rawWait(l.epfd, events)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			panic("floor: epoll_wait: " + err.Error())
		}
		for _, ev := range events[:n] {
			switch int(ev.Fd) {
			case l.wake:
				return // Close closes the connections
			case l.e.lfd:
				l.e.accept()
			default:
				l.ready(ev.Fd, ev.Events)
			}
		}
	}
}

// accept takes every connection waiting, handing them to the loops in
// turn. Only the first loop calls it.
func (e *epoll) accept() {
	for {
		fd, _, err := unix.Accept4(e.lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err != nil {
			return // EAGAIN: none left; any other error: try at the next wake
		}
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		l := e.loops[e.next]
		e.next = (e.next + 1) % len(e.loops)
		// A loop learns of its connection at its first event: the
		// map is the loop's own, and a new fd number cannot be one of
		// its live connections (closed ones are deleted before close).
		e.mu.Lock()
		e.fds[int32(fd)] = struct{}{}
		e.mu.Unlock()
		e.h.n.conns.Add(1) // before the loop can see it, and drop it
		if err := l.add(fd); err != nil {
			// Not l.drop: that is for l's own thread.
			e.mu.Lock()
			delete(e.fds, int32(fd))
			e.mu.Unlock()
			unix.Close(fd)
			e.h.n.conns.Add(^uint64(0))
		}
	}
}

// ready serves a connection the loop's wait reported.
func (l *loop) ready(fd int32, events uint32) {
	c := l.conns[fd]
	if c == nil {
		c = &econn{in: make([]byte, 16<<10), out: make([]byte, 0, 16<<10)}
		l.conns[fd] = c
	}
	if c.sent < len(c.out) {
		// Waiting to write: the rest of the answers first, reading
		// nothing meanwhile (a client that does not read its answers
		// is not sent more), then the requests read and not answered.
		if events&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 && l.flush(fd, c) {
			l.answer(fd, c)
		}
		return
	}
	if c.have == len(c.in) {
		c.in = append(c.in, make([]byte, len(c.in))...) // a value larger than the buffer
	}
	r, errno := rawio.ReadFD(uintptr(fd), c.in[c.have:])
	if errno == unix.EAGAIN {
		return
	}
	if errno != 0 || r == 0 {
		l.drop(fd)
		return
	}
	c.have += r
	l.answer(fd, c)
}

// answer answers what c has read, maxOut bytes of answers at a time,
// until all is answered or the socket has no room for more.
func (l *loop) answer(fd int32, c *econn) {
	for {
		used, out, quit := l.e.h.handle(c.in[:c.have], c.out[:0])
		c.out, c.sent, c.quit = out, 0, quit
		c.have = copy(c.in, c.in[used:c.have])
		if !l.flush(fd, c) || len(out) < maxOut {
			return
		}
	}
}

// flush writes c's answers; if the socket takes only part, it waits for
// room (EPOLLOUT) instead of what to read. It reports whether c is still
// open with everything written.
func (l *loop) flush(fd int32, c *econn) bool {
	for c.sent < len(c.out) {
		w, errno := rawio.WriteFD(uintptr(fd), c.out[c.sent:])
		if errno == unix.EAGAIN {
			if !c.blocked {
				c.blocked = true
				unix.EpollCtl(l.epfd, unix.EPOLL_CTL_MOD, int(fd), &unix.EpollEvent{Events: unix.EPOLLOUT, Fd: fd})
			}
			return false
		}
		if errno != 0 {
			l.drop(fd)
			return false
		}
		c.sent += w
	}
	if c.quit {
		l.drop(fd)
		return false
	}
	c.out, c.sent = c.out[:0], 0
	if c.blocked { // back to reading
		c.blocked = false
		unix.EpollCtl(l.epfd, unix.EPOLL_CTL_MOD, int(fd), &unix.EpollEvent{Events: unix.EPOLLIN, Fd: fd})
	}
	return true
}

func (l *loop) drop(fd int32) {
	unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	delete(l.conns, fd)
	// Out of fds before the close: once closed, its number may be
	// accepted again.
	l.e.mu.Lock()
	_, open := l.e.fds[fd]
	delete(l.e.fds, fd)
	l.e.mu.Unlock()
	if open {
		unix.Close(int(fd))
		l.e.h.n.conns.Add(^uint64(0))
	}
}

// rawWait waits for events on epfd with a raw system call (see epoll),
// at most waitMillis: the runtime stops a loop that holds its P with a
// signal, which ends the wait, but not with asynchronous preemption
// turned off (GODEBUG=asyncpreemptoff=1); then a garbage collection
// would wait for a loop's next event, forever on an idle server, were
// the wait not bounded.
func rawWait(epfd int, events []unix.EpollEvent) (int, error) {
	n, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), waitMillis, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
