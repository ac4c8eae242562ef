package server

import (
	"bytes"
	"io"
	"math"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"spillway/ring"
)

// allocsPerRequest sends req on a fresh connection to addr and reads a
// reply of exactly len(want) bytes, many times, and returns the mean
// allocations per round trip. The client side allocates nothing (fixed
// buffers, no bufio), so what is counted is the server's.
//
// The mean is exact, not testing.AllocsPerRun's, which rounds down: one
// allocation every few requests (a 16 KiB chunk carved into values, say)
// is a cost per request that it reports as 0. The server's background
// goroutines may allocate a little meanwhile: callers allow for it
// (maxAllocs).
func allocsPerRequest(t *testing.T, addr string, req, want string) float64 {
	t.Helper()
	if raceEnabled {
		t.Skip("the race detector allocates, and empties sync.Pools at random")
	}
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	reqb := []byte(req)
	got := make([]byte, len(want))
	round := func() {
		if _, err := nc.Write(reqb); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(nc, got); err != nil {
			t.Fatal(err)
		}
	}
	round()
	if !bytes.Equal(got, []byte(want)) {
		t.Fatalf("%q: got %q, want %q", req, got, want)
	}
	const runs = 2000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		round()
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / runs
}

// maxAllocs is the most allocations per request allocsPerRequest may
// find on a path that allocates none: what the server's timers and
// background goroutines may allocate in the meantime (fewer than 10 in
// 2,000 requests).
const maxAllocs = 0.005

// maxAllocsCluster is maxAllocs for a cluster node, which allocates more
// in the background: memberlist's gossip and probes, and the copy store,
// which reads touch (ristretto hands a full 64-entry access buffer over
// and allocates the next). Less than one allocation per request, as
// testing.AllocsPerRun would report 0.
const maxAllocsCluster = 0.5

func TestHotPathAllocs(t *testing.T) {
	addr, _ := startServer(t, Config{})
	setup := dialRaw(t, addr)
	setup.send("set key:000001 5 0 3\r\nabc\r\n")
	setup.expect("STORED\r\n")
	// A value of 1,000 bytes: carved from a new 16 KiB chunk every 16
	// reads unless it is read into the connection's buffer.
	big := strings.Repeat("v", 1000)
	setup.send("set key:000003 0 0 1000\r\n" + big + "\r\n")
	setup.expect("STORED\r\n")
	cases := []struct{ name, req, want string }{
		{"get hit", "get key:000001\r\n", "VALUE key:000001 5 3\r\nabc\r\nEND\r\n"},
		{"get hit, 1000 bytes", "get key:000003\r\n", "VALUE key:000003 0 1000\r\n" + big + "\r\nEND\r\n"},
		{"get miss", "get key:000002\r\n", "END\r\n"},
		{"set", "set key:000001 5 0 3\r\nabc\r\n", "STORED\r\n"},
		{"mg", "mg key:000001 v f\r\n", "VA 3 f5\r\nabc\r\n"},
		{"ms", "ms key:000001 3 F5\r\nabc\r\n", "HD\r\n"},
		{"delete miss", "delete key:000002\r\n", "NOT_FOUND\r\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if n := allocsPerRequest(t, addr, tc.req, tc.want); n > maxAllocs {
				t.Errorf("%q: %.3f allocations per request, want 0", tc.req, n)
			}
		})
	}
}

// TestHotPathAllocsCluster counts a cluster node's allocations for a key
// it owns and for one it forwards to the owner (the hop), with bounded
// loads off so the owner answers every request.
func TestHotPathAllocsCluster(t *testing.T) {
	// A short owner grace: a write in the grace after a view change also
	// clears the key at its previous owner, which is not the steady state.
	nodes := startCluster(t, 2, clusterOpts{picker: ring.PickerConfig{Epsilon: math.Inf(1)},
		tune: func(_ string, cfg *Config) { cfg.Cluster.OwnerGrace = time.Millisecond }})
	entry := nodes[0]
	own := keyOwnedBy(t, entry, "own:", entry.srv.ID())
	other := keyOwnedBy(t, entry, "fwd:", nodes[1].srv.ID())
	setup := dialRaw(t, entry.addr)
	for _, k := range []string{own, other} {
		setup.send("set " + k + " 5 0 3\r\nabc\r\n")
		setup.expect("STORED\r\n")
	}
	// A write at its owner opens a write round (holders.begin), reused
	// from the rounds that ended; a forwarded write's reply is read into
	// the connection's buffer (wire.Client.ExchangeAppend).
	cases := []struct {
		name, req, want string
	}{
		{"owned get", "get " + own + "\r\n", "VALUE " + own + " 5 3\r\nabc\r\nEND\r\n"},
		{"owned set", "set " + own + " 5 0 3\r\nabc\r\n", "STORED\r\n"},
		{"forwarded get", "get " + other + "\r\n", "VALUE " + other + " 5 3\r\nabc\r\nEND\r\n"},
		{"forwarded set", "set " + other + " 5 0 3\r\nabc\r\n", "STORED\r\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if n := allocsPerRequest(t, entry.addr, tc.req, tc.want); n > maxAllocsCluster {
				t.Errorf("%q: %.3f allocations per request, want 0", tc.req, n)
			}
		})
	}
}
