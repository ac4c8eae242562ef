package server

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// TestFlushAllAbsoluteTime: flush_all's delay is an exptime, as memcached
// reads it (realtime()): up to 30 days it is relative, above that a Unix
// time. Spillway took every value as seconds from now, so "flush_all
// <now+10 as a Unix time>" scheduled a flush some 56 years away (and
// replaced any flush pending): an item set before it was still served
// after the time named had passed. memcached 1.6.18 served no item set
// before it, 3.5 s after "flush_all <now+3>".
func TestFlushAllAbsoluteTime(t *testing.T) {
	var ns atomic.Int64
	ns.Store(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, ns.Load()) }
	addr, _ := startServer(t, Config{Now: now})
	c := dialRaw(t, addr)

	at := now().Unix() + 10
	c.send("set before 0 0 1\r\nx\r\nflush_all " + strconv.FormatInt(at, 10) + "\r\nget before\r\n")
	c.expect("STORED\r\nOK\r\nVALUE before 0 1\r\nx\r\nEND\r\n") // not due yet
	ns.Add(int64(11 * time.Second))
	c.send("get before\r\n")
	c.expect("END\r\n")

	// A Unix time already past flushes now.
	c.send("set old 0 0 1\r\nx\r\nflush_all " + strconv.FormatInt(now().Unix()-100, 10) + "\r\nget old\r\n")
	c.expect("STORED\r\nOK\r\nEND\r\n")
}
