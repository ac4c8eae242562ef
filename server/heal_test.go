package server

import (
	"testing"
	"testing/synctest"
	"time"
)

// A partition that outlasted failure detection heals, and gossip brings
// the other side back to the nodes of one side first. Each side had
// declared the other dead and owned all the keys meanwhile, so a node of
// either side may hold a value the other side has overwritten since. The
// contract: once a node routes with the healed view, it serves none of
// it.
func TestHealedPartitionServesNothingOverwritten(t *testing.T) {
	tests := []struct {
		name  string
		first []string // the nodes whose gossip heals first
	}{
		{"the lone node hears of the others first", []string{"node0"}},
		{"the others hear of the lone node first", []string{"node1", "node2"}},
		{"all at once", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n, nodes := startFakeCluster(t, 3, nil)
				key := ownedBy(nodes[0], "node0", "heal", 1)[0]
				c0 := dialPipe(t, n, nodes[0].client())
				c0.send("set " + key + " 0 0 3\r\nold\r\n")
				c0.expect("STORED\r\n")

				n.split("node0")
				synctest.Wait()
				// Past the owner grace, the new owners no longer clear what
				// the old one holds on each write (they could not reach it
				// across a real partition anyway).
				time.Sleep(nodes[1].srv.cl.cfg.OwnerGrace + time.Second)
				if got := nodes[1].srv.cl.view.Load().ring.Len(); got != 2 {
					t.Fatalf("node1's view has %d members during the split, want 2", got)
				}
				c1 := dialPipe(t, n, nodes[1].client())
				c1.send("set " + key + " 0 0 3\r\nnew\r\n")
				c1.expect("STORED\r\n")

				n.heal(tt.first...)
				synctest.Wait()
				for _, nd := range nodes {
					if v := nd.srv.cl.view.Load(); v.ring.Len() != 3 {
						continue // its gossip still lags: split brain, as during the cut
					}
					c := dialPipe(t, n, nd.client())
					if v, hit := rawGetValue(t, c, key); hit && v == "old" {
						t.Errorf("%s serves %q, overwritten during the partition, once its view healed", nd.name, v)
					}
				}

				n.heal()
				synctest.Wait()
				for _, nd := range nodes {
					c := dialPipe(t, n, nd.client())
					if v, hit := rawGetValue(t, c, key); hit && v == "old" {
						t.Errorf("%s serves %q after the heal", nd.name, v)
					}
					if nd.srv.counters[ctrDeclaredDead].Load() == 0 {
						t.Errorf("%s never learned it had been declared dead", nd.name)
					}
				}
			})
		})
	}
}
