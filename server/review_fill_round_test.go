package server

import (
	"math"
	"testing"
	"testing/synctest"

	"spillway/ring"
)

// An owned fill that a write fenced answers the key's current item
// (keepOwned): the write's value, which it must not hand out before the
// write's invalidations end. Here the owner lost the key (evicted) while
// a holder keeps its copy; a get at the owner fills from the origin, a
// set stores v2 meanwhile and waits for the holder; the fill then finds
// v2 and answers it at once, and the holder, which answers the
// invalidation within the timeout (nothing counted as lost), serves v1
// to a later read: new, then old.
func TestReviewFencedOwnedFillWaitsForWriteRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := gateOrigin{make(chan struct{})}
		n, owner, holder, key, w := withCopy(t, "f", func(c *Config) {
			c.Origin = o
			c.Cluster.Picker = ring.PickerConfig{Epsilon: math.Inf(1)} // the owner reads its keys itself
		})
		// Memory pressure evicts the key at the owner only.
		if err := owner.srv.store.Delete(key); err != nil {
			t.Fatal(err)
		}

		r := dialPipe(t, n, owner.client())
		r.send("get " + key + "\r\n")
		synctest.Wait() // the get misses and waits in the origin

		n.hang(holder.peer())
		w.send("set " + key + " 0 0 2\r\nv2\r\n")
		synctest.Wait() // v2 stored; the write waits for the holder

		close(o.release)
		synctest.Wait()
		got := ""
		if l := r.line(); l != "END" {
			got = r.line()
			r.line()
		}
		later, _ := rawGetValue(t, dialPipe(t, n, holder.client()), key)
		n.resume(holder.peer())
		w.expect("STORED\r\n")
		lost := owner.srv.counters[ctrLostInvalidations].Load()
		t.Logf("got %q later %q lost %d", got, later, lost)
		if got == "v2" && later == "v1" && lost == 0 {
			t.Errorf("a fenced fill at the owner answered %q during the write's round, then the holder served %q; no invalidation counted as lost", got, later)
		}
	})
}
