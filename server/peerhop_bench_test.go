//go:build unix

package server

import (
	"math"
	"syscall"
	"testing"
	"time"

	"spillway/ring"
)

// BenchmarkPeerHop measures what the messages between two nodes cost, in
// CPU time of the whole process per client request: both nodes, on real
// loopback connections, and the client. Wall time on a shared machine
// says little; the CPU is what a cluster pays per request against one
// node or a proxy (issue "the hop and the node", README Benchmarks). Each
// case is one client request at a time, so nothing is batched.
//
//   - local get: the key is owned by the node asked; no message (the
//     baseline).
//   - forwarded get: the node asked sends the read to the owner on a
//     connection its reads share (hld): one round trip.
//   - set at the owner, then get at a holder: the set invalidates the
//     copy the other node holds (one round trip), whose next read reads
//     the key through again (hgt, one more) and keeps it.
func BenchmarkPeerHop(b *testing.B) {
	for _, bc := range []struct {
		name      string
		hotCopies int
		run       func(b *testing.B, entry, owner *testNode, key string)
	}{
		{"local get", -1, func(b *testing.B, _, owner *testNode, key string) {
			c := dialRaw(b, owner.addr)
			for b.Loop() {
				c.send("get " + key + "\r\n")
				c.expect("VALUE " + key + " 0 1\r\nv\r\nEND\r\n")
			}
		}},
		{"forwarded get", -1, func(b *testing.B, entry, _ *testNode, key string) {
			c := dialRaw(b, entry.addr)
			for b.Loop() {
				c.send("get " + key + "\r\n")
				c.expect("VALUE " + key + " 0 1\r\nv\r\nEND\r\n")
			}
		}},
		{"set at the owner, then get at a holder", 1, func(b *testing.B, entry, owner *testNode, key string) {
			w, r := dialRaw(b, owner.addr), dialRaw(b, entry.addr)
			for b.Loop() {
				w.send("set " + key + " 0 0 1\r\nv\r\n")
				w.expect("STORED\r\n")
				r.send("get " + key + "\r\n")
				r.expect("VALUE " + key + " 0 1\r\nv\r\nEND\r\n")
			}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			nodes := startCluster(b, 2, clusterOpts{picker: ring.PickerConfig{Epsilon: math.Inf(1)},
				tune: func(_ string, cfg *Config) { cfg.Cluster.HotCopies = bc.hotCopies }})
			entry, owner := nodes[0], nodes[1]
			key := keyOwnedBy(b, entry, "hop:", owner.srv.ID())
			w := dialRaw(b, owner.addr)
			w.send("set " + key + " 0 0 1\r\nv\r\n")
			w.expect("STORED\r\n")
			start := processCPU()
			bc.run(b, entry, owner, key)
			b.ReportMetric(float64(processCPU()-start)/float64(b.N)/1e3, "cpu-µs/op")
		})
	}
}

// processCPU is the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
