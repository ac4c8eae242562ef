package main

import (
	"errors"
	"net"
	"sync"

	"spillway/internal/rawio"
)

// goroutines serves a goroutine per connection, as Spillway does: read
// what has come, answer it, write the answers, read again; raw reads and
// writes (internal/rawio), as Spillway's. When nothing has come, Go's
// poller parks the goroutine after a read that returned EAGAIN.
type goroutines struct {
	ln net.Listener
	h  *handler

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // guarded by mu
	closed bool                  // guarded by mu
	wg     sync.WaitGroup
}

func serveGoroutines(addr string) (server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	g := &goroutines{ln: ln, h: newHandler(), conns: make(map[net.Conn]struct{})}
	g.wg.Add(1)
	go g.accept()
	return g, nil
}

func (g *goroutines) Addr() net.Addr { return g.ln.Addr() }

// Close stops accepting, closes every connection and waits for their
// goroutines.
func (g *goroutines) Close() error {
	err := g.ln.Close()
	g.mu.Lock()
	g.closed = true
	for c := range g.conns {
		c.Close()
	}
	g.mu.Unlock()
	g.wg.Wait()
	return err
}

func (g *goroutines) accept() {
	defer g.wg.Done()
	for {
		c, err := g.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue // out of file descriptors, say: the next may work
		}
		c = rawio.Wrap(c) // the map holds what serve deletes
		g.mu.Lock()
		if g.closed { // accepted as Close ran
			g.mu.Unlock()
			c.Close()
			return
		}
		g.conns[c] = struct{}{}
		g.wg.Add(1)
		g.mu.Unlock()
		go g.serve(c)
	}
}

func (g *goroutines) serve(c net.Conn) {
	defer g.wg.Done()
	g.h.n.conns.Add(1)
	defer g.h.n.conns.Add(^uint64(0))
	defer func() {
		g.mu.Lock()
		delete(g.conns, c)
		g.mu.Unlock()
		c.Close()
	}()
	in := make([]byte, 16<<10)
	out := make([]byte, 0, 16<<10)
	have := 0
	for {
		if have == len(in) {
			in = append(in, make([]byte, len(in))...) // a value larger than the buffer
		}
		n, err := c.Read(in[have:])
		if err != nil {
			return
		}
		have += n
		// Answer what came, maxOut bytes of answers at a time.
		for {
			used, o, quit := g.h.handle(in[:have], out[:0])
			out = o
			if len(out) > 0 {
				if _, err := c.Write(out); err != nil {
					return
				}
			}
			if quit {
				return
			}
			have = copy(in, in[used:have])
			if len(out) < maxOut {
				break // all answered; what is left is not a whole request
			}
		}
	}
}
