// Package server runs one Spillway node: it accepts memcached-protocol
// connections, executes requests against the local store and, in a cluster,
// routes reads through the bounded-load ring to the node that should serve them.
package server
