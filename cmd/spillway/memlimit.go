package main

import (
	"os"
	"runtime/debug"
)

// A node's memory, as README "Operations" states it for sizing a
// container: -m + --copy-memory + overheadBytes + idleConnBytes per
// connection (--conn-limit at most). The owned items live off the Go heap
// (the store maps its own memory, every byte of it counted in -m); the
// copies, the registry of copy holders (both within --copy-memory), the
// connections and the runtime live on it.
const (
	// overheadBytes is the Go runtime, gossip, the request path's shared
	// buffers and the binary's own pages.
	overheadBytes = 64 << 20
	// binaryPages is the part of overheadBytes that the binary's file
	// pages take (16.5 MiB measured, README "Memory"): resident, but not
	// memory the Go runtime counts towards its limit.
	binaryPages = 16 << 20
	// idleConnBytes is what an open client connection costs: its
	// goroutine and a few hundred bytes while it waits (15 KiB measured,
	// TestIdleConnectionMemory), rounded up.
	idleConnBytes = 20 << 10
)

// goMemoryLimit is the Go runtime's soft memory limit for a node run with
// f: the part of the sizing formula that lives on the Go heap. It leaves
// -m out, for the store's memory is off the heap: counting it would have
// the collector run without pause on a full node (the heap would never
// get under the limit).
func (f *serveFlags) goMemoryLimit() int64 {
	var copies int64
	if f.gossip != "" { // a node alone keeps no copies
		copies = f.copyMemory
	}
	return copies + overheadBytes - binaryPages + int64(f.connLimit)*idleConnBytes
}

// setMemoryLimit sets the Go runtime's soft memory limit to goMemoryLimit,
// unless GOMEMLIMIT is set (the runtime has applied it already: an
// operator's explicit choice wins), and returns the limit in force and
// where it came from.
func (f *serveFlags) setMemoryLimit() (limit int64, from string) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1), "GOMEMLIMIT"
	}
	limit = f.goMemoryLimit()
	debug.SetMemoryLimit(limit)
	return limit, "flags"
}
