package store

import (
	"testing"
	"time"
)

// TestDueFlushAppliedOnce: a delayed flush that falls due is applied by
// whichever operation first sees it due; others may see it due at the same
// time. One that saw the deadline, then lost the processor before reading
// the store sequence for its mark, must not raise the watermark past
// writes made after another operation applied the flush: those writes
// come after the deadline and stay. Interleaving:
//
//	op X (any read or write)        op Y                  client
//	clock: past the deadline
//	load deadline: due
//	   (preempted)
//	                                advance: mark := Seq,
//	                                raise, clear deadline
//	                                                      set new: STORED
//	                                                      get new: hit
//	mark := Seq (after new's write)
//	raise: new is flushed
//	                                                      get new: miss
//
// The test plays X with a sequence function that waits.
func TestDueFlushAppliedOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T, eng Engine) {
		// The Segments sweeper may apply the flush itself (it reads the
		// clock once a second): then X never reads the sequence and the
		// interleaving did not happen; try again on a new store.
		for attempt := 0; ; attempt++ {
			if attempt == 5 {
				t.Fatal("the interleaving never happened")
			}
			if dueFlushAppliedOnce(t, eng) {
				return
			}
		}
	})
}

// dueFlushAppliedOnce plays the interleaving once; false if it could not.
func dueFlushAppliedOnce(t *testing.T, eng Engine) bool {
	s, clk := newTestStore(t, eng, 0)
	s.Set(Item{Key: "old", Value: []byte("1")})
	s.flush.flush(s.now(), time.Second, s.Seq) // Store.Flush, without kicking the sweeper
	clk.Advance(time.Second)

	entered, resume, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() { // X
		defer close(done)
		s.flush.advance(clk.Now().UnixNano(), func() uint64 {
			close(entered)
			<-resume
			return s.Seq()
		})
	}()
	select {
	case <-entered:
	case <-done:
		return false
	}
	mustMiss(t, s, "old") // Y applies the flush
	s.Set(Item{Key: "new", Value: []byte("2")})
	mustGet(t, s, "new")
	close(resume)
	<-done
	if it, ok := s.Get("new"); !ok || string(it.Value) != "2" {
		t.Fatalf(`Get("new") = %q, %v after a flush that took effect before it was set; want "2"`, it.Value, ok)
	}
	return true
}

// TestFlushDuringReadModifyWrite: a read-modify-write (Update, and so
// append, prepend, incr, the meta commands) checks that the key's item is
// live, then stores what it made of it with the store sequence read at
// the store. A flush_all that ran in between raised the watermark past
// the item it read but not past the sequence of the new one: the value
// set before the flush came back after it, modified. Interleaving:
//
//	Update of k (shard lock held)   flush_all
//	k live (watermark below it)
//	fn(cur) builds next from cur
//	                                mark := seq; seq++; watermark := mark
//	                                (returns: everything before is gone)
//	next stored with seq = mark+1
//	Get k: the pre-flush value, modified
//
// Either order is a valid outcome (Update first: its item is flushed;
// the flush first: Update finds no item), but not a mix. The test runs
// the flush from inside fn.
func TestFlushDuringReadModifyWrite(t *testing.T) {
	eachEngine(t, func(t *testing.T, eng Engine) {
		s, _ := newTestStore(t, eng, 0)
		s.Set(Item{Key: "k", Value: []byte("before")})
		_, err := s.Update("k", func(cur Item, ok bool) (Item, bool, error) {
			if !ok {
				return cur, false, nil
			}
			flushed := make(chan struct{})
			go func() { // another connection's flush_all
				defer close(flushed)
				s.Flush(0)
			}()
			<-flushed
			cur.Value = append(append([]byte(nil), cur.Value...), "+more"...)
			return cur, true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if it, ok := s.Get("k"); ok {
			t.Fatalf(`Get("k") = %q after a flush_all that completed: the item set before it came back`, it.Value)
		}
	})
}
