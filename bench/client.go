package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"spillway/protocol"
)

// The client speaks the memcached text protocol directly rather than through
// gomemcache, whose calls are one request and one reply at a time: here a
// worker writes up to Pipeline requests before reading, so the depth is real.
// Each connection has one reader goroutine that matches replies to requests
// in order (memcached answers in order on a connection).

// Error kinds, the keys of Report.Errors.
const (
	kindTimeout   = "timeout"      // no reply within Config.Timeout
	kindConn      = "conn"         // dial, read or write failed
	kindServer    = "server_error" // SERVER_ERROR reply
	kindClient    = "client_error" // CLIENT_ERROR reply
	kindError     = "error"        // ERROR reply
	kindNotStored = "not_stored"   // set answered NOT_STORED
	kindProtocol  = "protocol"     // a reply that makes no sense; the connection is dropped
	kindCorrupt   = "corrupt"      // a value this tool did not write for the key; fails the run
	kindUnsent    = "unsent"       // open loop: scheduled but not sent before the hard stop
)

// errProtocol is a well-formed reply that does not answer the request;
// protocol.ErrBadReply, a malformed one. Either drops the connection.
var errProtocol = errors.New("unexpected reply")

// maxValue bounds the values this tool accepts from a server.
const maxValue = 64 << 20

// op is one request in flight. A worker owns Pipeline of them and recycles
// them through its free channel.
type op struct {
	kind   opKind
	key    []byte        // the key's name
	index  int           // the key's index
	server int           // the index in Config.Servers of the server it was sent to
	start  time.Duration // issued (closed loop) or scheduled (open loop), since engine.base
}

// tally is what a worker's readers count. Guarded by worker.mu.
type tally struct {
	gets, sets, hits, misses int64
	// entryGets counts the gets sent to each server (by index in
	// Config.Servers), whatever became of them: the reads it took as
	// entry node. Grown as needed.
	entryGets    []int64
	errors       map[string]int64
	hist         *hdrhistogram.Histogram // nanoseconds
	firstCorrupt error
}

// maxLatency is the largest latency the histogram tracks (larger values are
// clamped): an open-loop run against a stalled server can queue for long.
const maxLatency = int64(time.Hour)

func newTally() *tally {
	return &tally{errors: make(map[string]int64), hist: hdrhistogram.New(1, maxLatency, 3)}
}

func (t *tally) record(d time.Duration) {
	v := int64(d)
	if v < 1 {
		v = 1
	} else if v > maxLatency {
		v = maxLatency
	}
	_ = t.hist.RecordValue(v) // in range by construction
}

func (t *tally) addEntryGets(server int, n int64) {
	if server >= len(t.entryGets) {
		t.entryGets = append(t.entryGets, make([]int64, server+1-len(t.entryGets))...)
	}
	t.entryGets[server] += n
}

func (t *tally) merge(o *tally) {
	for i, n := range o.entryGets {
		t.addEntryGets(i, n)
	}
	t.gets += o.gets
	t.sets += o.sets
	t.hits += o.hits
	t.misses += o.misses
	for k, v := range o.errors {
		t.errors[k] += v
	}
	t.hist.Merge(o.hist)
	if t.firstCorrupt == nil {
		t.firstCorrupt = o.firstCorrupt
	}
}

// conn is one connection to one server. The worker writes; the reader
// goroutine reads. When the reader sees a transport error it closes dead and
// fails every op still queued until the worker closes pending.
type conn struct {
	w       *worker
	nc      net.Conn
	bw      *bufio.Writer
	br      *bufio.Reader
	pending chan *op // requests written, replies not yet read, in order
	dead    chan struct{}
	exited  chan struct{}
	dirty   bool                 // bw holds unflushed requests (worker only)
	rr      protocol.ReplyReader // reader only
}

func dial(w *worker, addr string, depth int, timeout time.Duration) (*conn, error) {
	nc, err := dialServer(context.Background(), addr, timeout, w.e.cfg.TLS)
	if err != nil {
		return nil, err
	}
	c := &conn{
		w:       w,
		nc:      nc,
		bw:      bufio.NewWriterSize(nc, 16<<10),
		br:      bufio.NewReaderSize(nc, 64<<10),
		rr:      protocol.ReplyReader{MaxValue: maxValue},
		pending: make(chan *op, depth),
		dead:    make(chan struct{}),
		exited:  make(chan struct{}),
	}
	go c.readLoop()
	return c, nil
}

func (c *conn) isDead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

// retire stops the reader once it has failed whatever is still queued.
// Worker only; call once.
func (c *conn) retire() {
	_ = c.nc.Close()
	close(c.pending)
}

// send queues o and writes its request. A write error closes the
// connection, so the reader fails o; the worker notices through dead.
func (c *conn) send(o *op, val []byte, timeout time.Duration) {
	c.pending <- o // never blocks: capacity is the worker's op count
	if !c.dirty {
		_ = c.nc.SetWriteDeadline(time.Now().Add(timeout))
		c.dirty = true
	}
	var err error
	if o.kind == opGet {
		c.bw.WriteString("get ")
		c.bw.Write(o.key)
		_, err = c.bw.WriteString("\r\n")
	} else {
		c.bw.WriteString("set ")
		c.bw.Write(o.key)
		c.bw.WriteString(" 0 0 ")
		var num [20]byte
		c.bw.Write(strconv.AppendInt(num[:0], int64(len(val)), 10))
		c.bw.WriteString("\r\n")
		c.bw.Write(val)
		_, err = c.bw.WriteString("\r\n")
	}
	if err != nil {
		_ = c.nc.Close()
	}
}

func (c *conn) flush() {
	if !c.dirty {
		return
	}
	c.dirty = false
	if err := c.bw.Flush(); err != nil {
		_ = c.nc.Close()
	}
}

func (c *conn) readLoop() {
	defer close(c.exited)
	failKind := ""
	for o := range c.pending {
		if failKind != "" {
			c.w.finish(o, failKind, nil)
			continue
		}
		_ = c.nc.SetReadDeadline(time.Now().Add(c.w.e.cfg.Timeout))
		kind, hit, detail, err := c.readReply(o)
		if err != nil {
			failKind = kindConn
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				failKind = kindTimeout
			case errors.Is(err, errProtocol), errors.Is(err, protocol.ErrBadReply), errors.Is(err, protocol.ErrValueTooLarge):
				failKind = kindProtocol
			}
			_ = c.nc.Close()
			close(c.dead)
			c.w.finish(o, failKind, nil)
			continue
		}
		if kind == "" && o.kind == opGet {
			if hit {
				kind = "hit"
			} else {
				kind = "miss"
			}
		}
		c.w.finish(o, kind, detail)
	}
}

// readReply reads the reply to o. kind is "" on success (for a get, hit says
// whether it was one) or a non-fatal error kind with detail; err is a
// transport or framing error after which the connection is unusable.
//
// Replies, one shape per line:
//
//	get: VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\nEND\r\n | END\r\n
//	set: STORED\r\n | NOT_STORED\r\n
//	any: SERVER_ERROR <msg>\r\n | CLIENT_ERROR <msg>\r\n | ERROR\r\n
func (c *conn) readReply(o *op) (kind string, hit bool, detail, err error) {
	line, data, err := c.rr.Read(c.br)
	if err != nil {
		return "", false, nil, err
	}
	switch {
	case bytes.HasPrefix(line, []byte("SERVER_ERROR")):
		return kindServer, false, nil, nil
	case bytes.HasPrefix(line, []byte("CLIENT_ERROR")):
		return kindClient, false, nil, nil
	case string(line) == "ERROR":
		return kindError, false, nil, nil
	}
	if o.kind == opSet {
		switch string(line) {
		case "STORED":
			return "", false, nil, nil
		case "NOT_STORED":
			return kindNotStored, false, nil, nil
		}
		return "", false, nil, errProtocol
	}
	if string(line) == "END" {
		return "", false, nil, nil
	}
	v, ok := protocol.ParseValueLine(line)
	if !ok {
		return "", false, nil, errProtocol
	}
	// line and data are the ReplyReader's until the next Read: judge them
	// before reading END.
	var corrupt error
	if !bytes.Equal(v.Key, o.key) {
		corrupt = errCorruptKey(o.key, string(v.Key))
	} else {
		corrupt = checkValue(o.key, data, c.w.e.run, c.w.e.versions[o.index].Load())
	}
	end, _, err := c.rr.Read(c.br)
	if err != nil {
		return "", false, nil, err
	}
	if string(end) != "END" {
		return "", false, nil, errProtocol
	}
	if corrupt != nil {
		return kindCorrupt, false, corrupt, nil
	}
	return "", true, nil, nil
}

func errCorruptKey(want []byte, got string) error {
	return fmt.Errorf("%w: get %s answered VALUE %s", errCorrupt, want, got)
}

// finish records o's outcome and returns o to the worker. Called by readers
// (and by the worker for ops that never reached a connection).
func (w *worker) finish(o *op, kind string, detail error) {
	// Once the run is being cancelled, closed connections are our doing.
	if (kind != kindConn && kind != kindTimeout) || !w.e.isCancelled() {
		w.record(o, kind, detail)
	}
	w.free <- o
}

func (e *engine) isCancelled() bool {
	select {
	case <-e.cancelled:
		return true
	default:
		return false
	}
}

func (w *worker) record(o *op, kind string, detail error) {
	lat := w.e.since() - o.start
	w.mu.Lock()
	t := w.t
	if o.kind == opGet {
		t.addEntryGets(o.server, 1)
	}
	switch kind {
	case "", "hit", "miss":
		t.record(lat)
		if o.kind == opSet {
			t.sets++
		} else {
			t.gets++
			if kind == "hit" {
				t.hits++
			} else {
				t.misses++
			}
		}
	default:
		t.errors[kind]++
		if kind == kindCorrupt && t.firstCorrupt == nil {
			t.firstCorrupt = detail
		}
		w.errs.Add(1)
	}
	w.mu.Unlock()
	w.done.Add(1)
	if w.e.observe != nil {
		w.e.observe(Observation{Server: o.server, Key: o.index, Set: o.kind == opSet, Result: kind,
			Start: w.e.base.Add(o.start), Latency: lat})
	}
}
