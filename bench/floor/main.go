// Command floor is a reference point for bench/compare, not a cache: about
// the least a Go server of memcached's text protocol can do per request.
// It keeps values in a map (no expiry, eviction, memory limit or CAS) and
// answers get, gets, set, stats, version and quit, served one of two ways:
//
//   - -model goroutine: a goroutine per connection over net.Conn, the way
//     Spillway serves its clients;
//   - -model epoll: the way memcached's worker threads serve theirs — an
//     event loop per core, each on a thread of its own, level-triggered
//     epoll, read and write on non-blocking sockets, so that a request
//     costs one read and one write, and not the extra read that returns
//     EAGAIN before Go's poller parks a goroutine; every system call of
//     a loop raw, out of the scheduler's sight (epoll_linux.go).
//
// bench/compare loads it as it loads memcached, so that its table shows
// how much of a node's cost per request is Go's networking and runtime,
// which no work of Spillway's can remove, and how much is Spillway's own.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"
)

func main() {
	listen := flag.String("l", "127.0.0.1:11211", "address to listen on (host:port)")
	model := flag.String("model", "goroutine", "how connections are served: goroutine or epoll")
	loops := flag.Int("loops", runtime.GOMAXPROCS(0), "event loops of -model epoll")
	flag.Parse()
	srv, err := start(*model, *listen, *loops)
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	srv.Close()
}

// server is a running floor server.
type server interface {
	Addr() net.Addr
	Close() error
}

// start serves the model's way on addr.
func start(model, addr string, loops int) (server, error) {
	switch model {
	case "goroutine":
		return serveGoroutines(addr)
	case "epoll":
		return serveEpoll(addr, loops)
	}
	return nil, fmt.Errorf("-model %q: want goroutine or epoll", model)
}
