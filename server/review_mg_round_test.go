package server

import (
	"testing"
	"testing/synctest"
)

// A client's mg at the owner must not answer the value of a write whose
// invalidations are still under way: a holder that has not dropped its
// copy yet would serve the value before it to a later read (new, then
// old), and the invalidation, answered in time, is not counted as lost.
// get waits for the write's round (cluster.held); mg of a key the owner
// holds reads the store directly (metaGet, c.owns).
func TestReviewMetaGetAtOwnerWaitsForWriteRound(t *testing.T) {
	for _, cmd := range []string{"get", "mg"} {
		t.Run(cmd, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n, owner, holder, key, w := withCopy(t, "m", nil)

				// The write stores v2 and waits for the holder's answer.
				n.hang(holder.peer())
				w.send("set " + key + " 0 0 2\r\nv2\r\n")
				synctest.Wait()

				// A client reads v2 at the owner while the round is open...
				r := dialPipe(t, n, owner.client())
				got := ""
				if cmd == "mg" {
					r.send("mg " + key + " v\r\n")
					if l := r.line(); l == "VA 2" {
						got = r.line()
					}
				} else {
					r.send("get " + key + "\r\n")
					if l := r.line(); l != "END" {
						got = r.line()
						r.line()
					}
				}
				synctest.Wait()
				// ... and then at the holder, before the holder answers the
				// invalidation (within the invalidation timeout).
				later, _ := rawGetValue(t, dialPipe(t, n, holder.client()), key)
				n.resume(holder.peer())
				w.expect("STORED\r\n")
				if got == "" {
					// The owner's read waited for the round: nothing to
					// compare. Read the rest of it.
					if cmd == "mg" {
						r.line()
					} else {
						r.line()
						r.line()
						r.line()
					}
					return
				}
				lost := owner.srv.counters[ctrLostInvalidations].Load()
				if got == "v2" && later == "v1" && lost == 0 {
					t.Errorf("%s at the owner read %q during the write's round, then the holder served %q; no invalidation counted as lost", cmd, got, later)
				}
			})
		})
	}
}
