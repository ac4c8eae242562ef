package server

import (
	"context"
	"time"
)

// Shutdown stops accepting connections, lets every connection finish the
// requests it has already received, and returns when all have closed or ctx
// is done; then it closes the remaining connections and the store.
//
// A cluster node first owns nothing and leaves; it closes its client port
// at once, tells the nodes that took its keys which ones it holds so that
// they warm them from it (handover.go), and keeps its peer port open for
// ClusterConfig.Drain more (or until ctx ends, or peers stop asking): the
// nodes that took its keys warm them from it meanwhile instead of loading
// them from the origin.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.cl != nil {
		// Own nothing from now on (writes here are refused, reads go to
		// the others), then leave, so the others route around this node
		// while it finishes what it has.
		s.cl.leave()
		s.cl.peers.Leave(s.cfg.LeaveTimeout)
	}
	err := s.stopPort(ctx, false)
	if s.cl != nil && err == nil && s.cl.cfg.Drain > 0 {
		end := time.Now().Add(s.cl.cfg.Drain)
		hctx, cancel := context.WithDeadline(ctx, end)
		s.cl.handover(hctx, nil)
		cancel()
		s.drain(ctx, end)
	}
	if perr := s.stopPort(ctx, true); err == nil {
		err = perr
	}
	s.release()
	return err
}

// stopPort stops the client port, or the peer port: no new connections,
// idle ones interrupted, busy ones left to answer what they have read;
// when ctx ends first, the rest are closed.
func (s *Server) stopPort(ctx context.Context, peer bool) error {
	s.mu.Lock()
	if peer {
		s.peersClosing.Store(true)
	} else {
		s.closing.Store(true)
	}
	for ln, p := range s.listeners {
		if p == peer {
			ln.Close()
		}
	}
	for c := range s.conns {
		if c.peer == peer {
			c.interruptIdle()
		}
	}
	s.mu.Unlock()
	wg := &s.clientWG
	if peer {
		wg = &s.peerWG
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.closeConns(peer)
		<-done
		return ctx.Err()
	}
}

// drain waits, after a leave, while peers may still warm this node's
// keys from it: until end, ctx ends, or no peer has asked to warm a key
// for drainIdle (other requests, reads routed here by views that have
// not caught up, do not hold the node back).
func (s *Server) drain(ctx context.Context, end time.Time) {
	t := time.NewTimer(min(drainIdle, time.Until(end)))
	defer t.Stop()
	last := s.warmReads.Load()
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n := s.warmReads.Load()
		if n == last {
			return
		}
		last = n
		t.Reset(min(drainIdle, time.Until(end)))
	}
}

// drainIdle ends a drain early: peers that have asked nothing for this
// long have warmed what they wanted.
const drainIdle = 500 * time.Millisecond

// release frees what New made, once.
func (s *Server) release() {
	s.releaseOnce.Do(func() {
		if s.cl != nil {
			s.cl.close()
		}
		s.store.Close()
	})
}

// Close closes every listener and connection at once and releases the store.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closing.Store(true)
	s.peersClosing.Store(true)
	for ln := range s.listeners {
		ln.Close()
	}
	s.mu.Unlock()
	s.closeConns(false)
	s.closeConns(true)
	s.clientWG.Wait()
	s.peerWG.Wait()
	s.release()
	return nil
}

// closeConns closes the connections of the peer port, or of the client
// port.
func (s *Server) closeConns(peer bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.peer == peer {
			c.gone.Store(true)
			c.nc.Close()
		}
	}
}
