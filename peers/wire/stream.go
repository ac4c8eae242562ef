package wire

import (
	"errors"
	"sync"
	"time"
)

// Stream is one request's reads from a peer, on a connection of its own
// while the stream lasts: Send queues an mg, Next returns the replies in
// the order they were sent.
//
// Requests are written by a goroutine of the stream's, so the reads and
// the writes never wait for each other: a batch whose replies fill the
// socket buffers before all its requests are written cannot deadlock.
// Replies are read only when the caller asks for them, so a caller that
// stops asking (its own client is slow) holds back only its own
// connection, and what waits for it waits in the socket buffers, not in
// memory.
//
// A Stream is used by one goroutine; Close it when done.
type Stream struct {
	c       *Client
	pc      *conn
	timeout time.Duration

	mu     sync.Mutex
	queue  [][]byte // guarded by mu: requests the writer has yet to write
	closed bool     // guarded by mu
	wake   chan struct{}

	wrote    sync.WaitGroup
	writeErr error // the writer's, read after wrote

	sent, read int
	err        error // sticky: once a read fails, every later Next does
}

// Open starts a stream; timeout bounds the dial and each reply's wait.
func (c *Client) Open(timeout time.Duration) (*Stream, error) {
	pc, err := c.get(timeout)
	if err != nil {
		return nil, err
	}
	s := &Stream{c: c, pc: pc, timeout: timeout, wake: make(chan struct{}, 1)}
	s.wrote.Add(1)
	go s.write()
	return s, nil
}

// write sends the queued requests, flushing whenever the queue runs dry,
// until Close. After an error it only drops them: Next fails on its own.
func (s *Stream) write() {
	defer s.wrote.Done()
	var batch [][]byte
	for {
		s.mu.Lock()
		batch, s.queue = s.queue, batch[:0]
		closed := s.closed
		s.mu.Unlock()
		for _, line := range batch {
			if s.writeErr == nil {
				s.pc.nc.SetWriteDeadline(time.Now().Add(s.timeout))
				_, s.writeErr = s.pc.w.Write(line)
			}
		}
		clear(batch)
		if s.writeErr == nil {
			s.writeErr = s.pc.w.Flush()
		}
		if len(batch) == 0 && closed {
			return
		}
		if len(batch) == 0 {
			<-s.wake
		}
	}
}

// Send queues an mg of key with tag as its opaque token and extra flags.
// It never blocks: the queue is bounded by what the caller sends before
// it reads.
func (s *Stream) Send(key, tag, extra string) {
	line := AppendGet(make([]byte, 0, 24+len(key)*4/3+len(tag)+len(extra)), key, tag, extra)
	line = append(line, "\r\n"...)
	s.mu.Lock()
	s.queue = append(s.queue, line)
	s.mu.Unlock()
	s.signal()
	s.sent++
}

func (s *Stream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Next returns the reply to the oldest request not yet answered. Its Data
// is the stream's buffer, valid until the next call: copy what you keep.
func (s *Stream) Next() (Value, error) {
	if s.err != nil {
		return Value{}, s.err
	}
	if s.read >= s.sent {
		return Value{}, errNothingSent
	}
	s.pc.nc.SetReadDeadline(time.Now().Add(s.timeout))
	v, err := s.pc.readValue()
	if err != nil {
		s.err = err
		return Value{}, err
	}
	s.read++
	return v, nil
}

var errNothingSent = errors.New("wire: Next without a request")

// Close ends the stream. The connection goes back to the client's pool if
// every reply was read; otherwise it is closed, since the replies left in
// it would be taken for the next user's.
func (s *Stream) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.signal()
	if s.err != nil || s.read < s.sent {
		// The writer may be blocked on a peer that waits for these
		// replies to be read: end the connection rather than wait, and
		// let none of what it did not send reach the peer later.
		abort(s.pc.nc)
	}
	s.wrote.Wait()
	err := s.err
	if err == nil {
		err = s.writeErr
	}
	if err == nil && s.read < s.sent {
		err = errUnread
	}
	s.c.put(s.pc, err)
	if err == errUnread {
		return nil
	}
	return err
}

var errUnread = errors.New("wire: stream closed with replies unread")
