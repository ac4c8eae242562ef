// Package server runs one Spillway node: it accepts memcached-protocol
// connections, executes requests against the local store and, in a cluster,
// routes reads through the bounded-load ring to the node that should serve
// them and writes to the key's owner, keeping the coherence contract of
// ARCHITECTURE.md (ownership checked on every hit and write, fenced
// hand-off, fenced fills; see ownership.go and fence.go).
package server
