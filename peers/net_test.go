package peers

import (
	"strings"
	"testing"
)

// TestEncryptedGossip runs real UDP+TCP gossip on 127.0.0.1 (port 0) with a
// secret key: two nodes with the same key form a cluster; a node with another
// key, or with none, cannot join it.
func TestEncryptedGossip(t *testing.T) {
	key := [][]byte{[]byte("0123456789abcdef0123456789abcdef")}
	start := func(name string, keys [][]byte, seeds ...string) (*Peers, error) {
		p, err := Join(Config{
			Name:       name,
			BindAddr:   "127.0.0.1",
			Join:       seeds,
			SecretKeys: keys,
			Meta:       Meta{Peer: "127.0.0.1:1", Weight: 1},
			Logger:     quietLogger(t),
			Profile:    Local,
			Tune:       fastTimings,
		}, nil)
		if err == nil {
			t.Cleanup(func() { _ = p.Shutdown() })
		}
		return p, err
	}
	a, err := start("a", key)
	if err != nil {
		t.Fatal(err)
	}
	seed := a.GossipAddr()
	if !strings.HasPrefix(seed, "127.0.0.1:") || strings.HasSuffix(seed, ":0") {
		t.Fatalf("GossipAddr = %q, want 127.0.0.1 and the port picked", seed)
	}
	b, err := start("b", key, seed)
	if err != nil {
		t.Fatalf("same key: %v", err)
	}
	eventually(t, "encrypted pair converges", func() string {
		for _, p := range []*Peers{a, b} {
			if got := ringString(p.Ring()); got != "a/1 b/1" {
				return p.Self() + " has ring " + got
			}
		}
		return ""
	})

	for _, tt := range []struct {
		name string
		key  [][]byte
	}{
		{"other key", [][]byte{[]byte("fedcba9876543210")}},
		{"no key", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Its seed does not answer it: it runs alone (and retries).
			p, err := start("intruder", tt.key, seed)
			if err != nil {
				t.Fatal(err)
			}
			if got := ringString(p.Ring()); got != "intruder/1" {
				t.Fatalf("joined with %s; ring %s", tt.name, got)
			}
			if got := a.Ring().Len(); got != 2 {
				t.Errorf("a's ring has %d nodes after the failed join", got)
			}
		})
	}
}
