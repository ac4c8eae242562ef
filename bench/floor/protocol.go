package main

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Limits: a command line without its newline may not grow past maxLine,
// a key past maxKey (memcached's), a value past maxValue (a floor for
// small values: one get line of a thousand keys then answers at most
// 64 MiB). handle stops at maxOut bytes of answers, to be written before
// it answers more.
const (
	maxLine  = 2048
	maxKey   = 250
	maxValue = 64 << 10
	maxOut   = 64 << 10
)

// item is a stored value and the flags it was set with.
type item struct {
	flags uint32
	cas   uint64
	data  []byte
}

type shard struct {
	mu sync.RWMutex
	m  map[string]item
}

// store is a map split into shards, so that the loops' reads seldom wait
// for each other's locks.
type store struct {
	seed   maphash.Seed
	shards [256]shard
	cas    atomic.Uint64 // the last CAS unique given
}

func newStore() *store {
	s := &store{seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].m = make(map[string]item)
	}
	return s
}

func (s *store) shard(key []byte) *shard { return &s.shards[maphash.Bytes(s.seed, key)&255] }

// counters are the stats the load generators read.
type counters struct {
	gets, sets, hits, conns atomic.Uint64
	started                 time.Time
}

// handler answers requests. Both models call it on what a connection has
// read so far.
type handler struct {
	st *store
	n  *counters
}

func newHandler() *handler {
	return &handler{st: newStore(), n: &counters{started: time.Now()}}
}

// handle answers the whole requests in in, appending the replies to out,
// until none is left or out holds maxOut bytes. It returns the bytes of in
// it used, and quit when the connection must close once out is written
// (quit, or a request that cannot be framed).
func (h *handler) handle(in, out []byte) (used int, _ []byte, quit bool) {
	for len(out) < maxOut {
		rest := in[used:]
		nl := bytes.IndexByte(rest, '\n')
		if nl < 0 {
			if len(rest) > maxLine {
				return used, append(out, "CLIENT_ERROR line too long\r\n"...), true
			}
			return used, out, false
		}
		line := bytes.TrimSuffix(rest[:nl], []byte("\r"))
		cmd, args, _ := bytes.Cut(line, []byte(" "))
		switch string(cmd) {
		case "get", "gets":
			if len(bytes.TrimSpace(args)) == 0 {
				out = append(out, "ERROR\r\n"...)
				break
			}
			out = h.get(out, args, len(cmd) == 4)
		case "set":
			n, o, ok := h.set(out, args, rest[nl+1:])
			if !ok {
				// The block has not all come yet, or an error: then
				// what follows cannot be framed, and the connection
				// closes once the error is written.
				return used, o, len(o) > len(out)
			}
			out = o
			used += n
		case "stats":
			out = h.stats(out)
		case "version":
			out = append(out, "VERSION floor\r\n"...)
		case "quit":
			return used + nl + 1, out, true
		default:
			out = append(out, "ERROR\r\n"...)
		}
		used += nl + 1
	}
	return used, out, false
}

// get answers get, or gets with withCAS.
func (h *handler) get(out, keys []byte, withCAS bool) []byte {
	for k := range bytes.FieldsSeq(keys) {
		h.n.gets.Add(1)
		sh := h.st.shard(k)
		sh.mu.RLock()
		it, ok := sh.m[string(k)]
		sh.mu.RUnlock()
		if !ok {
			continue
		}
		h.n.hits.Add(1)
		out = append(out, "VALUE "...)
		out = append(out, k...)
		out = append(out, ' ')
		out = strconv.AppendUint(out, uint64(it.flags), 10)
		out = append(out, ' ')
		out = strconv.AppendInt(out, int64(len(it.data)), 10)
		if withCAS {
			out = append(out, ' ')
			out = strconv.AppendUint(out, it.cas, 10)
		}
		out = append(out, "\r\n"...)
		out = append(out, it.data...)
		out = append(out, "\r\n"...)
	}
	return append(out, "END\r\n"...)
}

// set stores "<key> <flags> <exptime> <bytes> [noreply]" with the data
// block that starts block. It returns the block's length with its
// newline, or ok false: then out either is unchanged (the block has not
// all come yet) or ends with an error after which the connection closes
// (its bytes cannot be framed).
func (h *handler) set(out, args, block []byte) (n int, _ []byte, ok bool) {
	var f [6][]byte
	nf := 0
	for a := range bytes.FieldsSeq(args) {
		if nf == len(f) {
			nf++
			break
		}
		f[nf] = a
		nf++
	}
	if nf != 4 && (nf != 5 || string(f[4]) != "noreply") {
		return 0, append(out, "ERROR\r\n"...), false
	}
	flags, err1 := strconv.ParseUint(string(f[1]), 10, 32)
	_, err2 := strconv.ParseInt(string(f[2]), 10, 64)
	size, err3 := strconv.ParseUint(string(f[3]), 10, 31)
	if len(f[0]) > maxKey || err1 != nil || err2 != nil || err3 != nil || size > maxValue {
		// memcached answers a value too large with SERVER_ERROR and
		// skips it; the floor has no need to, and closes.
		return 0, append(out, "CLIENT_ERROR bad command line format\r\n"...), false
	}
	if uint64(len(block)) < size+2 {
		return 0, out, false
	}
	data := block[:size]
	if !bytes.HasPrefix(block[size:], []byte("\r\n")) {
		return 0, append(out, "CLIENT_ERROR bad data chunk\r\n"...), false
	}
	h.n.sets.Add(1)
	sh := h.st.shard(f[0])
	sh.mu.Lock()
	sh.m[string(f[0])] = item{flags: uint32(flags), cas: h.st.cas.Add(1), data: append([]byte(nil), data...)}
	sh.mu.Unlock()
	if nf == 4 {
		out = append(out, "STORED\r\n"...)
	}
	return int(size) + 2, out, true
}

// stats are the fields bench and memcaslap read, memcached's names.
func (h *handler) stats(out []byte) []byte {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	tv := func(t syscall.Timeval) string { return fmt.Sprintf("%d.%06d", t.Sec, t.Usec) }
	gets, hits := h.n.gets.Load(), h.n.hits.Load()
	return fmt.Appendf(out, "STAT pid %d\r\nSTAT uptime %d\r\nSTAT rusage_user %s\r\nSTAT rusage_system %s\r\n"+
		"STAT curr_connections %d\r\nSTAT cmd_get %d\r\nSTAT cmd_set %d\r\nSTAT get_hits %d\r\nSTAT get_misses %d\r\nEND\r\n",
		os.Getpid(), int(time.Since(h.n.started).Seconds()), tv(ru.Utime), tv(ru.Stime),
		h.n.conns.Load(), gets, h.n.sets.Load(), hits, gets-hits)
}
