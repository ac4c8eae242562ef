package server

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// A run of a node (one start of its process) is named by its boot ID: the
// time it started, in nanoseconds since 1970, then eight random bytes, in
// hex. The start orders two runs of one member, which membership needs:
// a fence or an answer can arrive after the run that sent it has crashed
// and a newer run of the member has taken its place (a crashed process's
// kernel still delivering what it had queued, after a partition healed),
// and the older run's word must not stand for the newer's.
//
// The order is only as good as the clocks of the member's hosts. A run
// started on a host whose clock is behind its predecessor's by more than
// the time between the two starts is taken for the older (found by
// review): the predecessor's late fence then stands in a node's view for
// it again, as before runs were ordered, and may make the node serve what
// it overwrote apart; and while a node's gossip still has the predecessor,
// each of the new run's fences is answered Dead, and it drops what it
// holds, until gossip catches up. Runs of one member on one host, or on
// hosts whose clocks agree to within a restart, are ordered right.
func newBoot(now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixNano()))
	rand.Read(b[8:])
	return hex.EncodeToString(b[:])
}

// runStart returns the start a boot ID carries. Boot IDs of Spillway
// before ordered runs are eight random bytes and carry none.
func runStart(boot string) (int64, bool) {
	if len(boot) != 32 {
		return 0, false
	}
	var b [8]byte
	if _, err := hex.Decode(b[:], []byte(boot[:16])); err != nil {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(b[:])), true
}

// newerRun reports whether run a of a member started after run b, as far
// as their boot IDs tell: false when either carries no start, or both
// started at the same time.
func newerRun(a, b string) bool {
	ta, okA := runStart(a)
	tb, okB := runStart(b)
	return okA && okB && ta > tb
}
