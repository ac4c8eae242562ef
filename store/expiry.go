package store

import (
	"sync/atomic"
	"time"
)

// maxRelativeExptime is memcached's REALTIME_MAXDELTA: exptimes up to 30
// days are relative to now, larger ones are absolute Unix times.
const maxRelativeExptime = 60 * 60 * 24 * 30

// ExpiresAt converts a memcached exptime (seconds) into an expiry time, the
// way memcached's realtime() does: 0 never expires (zero Time); a negative
// value has already expired; up to 30 days (2592000 s) is relative to now;
// anything larger is an absolute Unix time, already expired if not after
// now.
func ExpiresAt(exptime int64, now time.Time) time.Time {
	switch {
	case exptime == 0:
		return time.Time{}
	case exptime < 0:
		return now.Add(-time.Second)
	case exptime <= maxRelativeExptime:
		return now.Add(time.Duration(exptime) * time.Second)
	}
	return time.Unix(exptime, 0)
}

// flusher implements flush_all. Its zero value is ready: nothing flushed.
//
// Entries carry the store sequence number of the write that made them.
// flush_all without a delay raises the watermark to the current sequence,
// so everything stored before it vanishes while a write in the same
// nanosecond, but after the flush, survives; a clock alone could not tell
// the two apart. flush_all with a delay arms a deadline instead; the first
// operation that sees the clock past it converts it into a watermark, which
// invalidates exactly the writes ordered before that moment, including
// those made between the command and the deadline, as memcached does.
type flusher struct {
	watermark atomic.Uint64           // entries with seq <= watermark are flushed
	due       atomic.Pointer[delayed] // pending delayed flush; nil none
	// seq is the store sequence (Store.seq), raised past a flush's mark
	// once the watermark is raised to it; nil in tests of the flusher
	// alone.
	seq *atomic.Uint64
}

// delayed is a pending delayed flush.
type delayed struct {
	at int64 // Unix nanoseconds
	// mark is the watermark it sets: the store sequence read by the first
	// operation to fix it, once the flush is due; 0 until then.
	mark atomic.Uint64
}

// flush schedules a flush at now+delay; seq reads the store sequence
// (Store.seq, without moving it), called only for a flush that takes
// effect now. A new flush replaces a pending delayed one, as in
// memcached; one that is already due takes effect first, since the time
// it named has passed.
func (f *flusher) flush(now int64, delay time.Duration, seq func() uint64) {
	f.advance(now, seq)
	if delay <= 0 {
		f.raise(seq())
		f.due.Store(nil)
		return
	}
	f.due.Store(&delayed{at: now + int64(delay)})
}

// advance applies a delayed flush whose deadline has passed. seq is read
// after the deadline is seen due, so that writes that come after this
// observation (and so take later sequence numbers) survive.
//
// The watermark is raised before the flush is cleared: a read that finds
// no flush pending must find its watermark in place. (Cleared first, a
// read running while another goroutine, the sweeper say, applied the
// flush saw neither and served a flushed item.)
//
// Operations that see the same flush due at once all raise the watermark,
// but to one mark, the first one fixed (p.mark): each raising a mark of
// its own, one that saw the deadline and was preempted before reading the
// sequence raised the watermark, later, past writes made after another
// had applied the flush and cleared it, and those writes, answered STORED
// and read back, vanished (TestDueFlushAppliedOnce). The mark is fixed
// before the flush is cleared, so every write made after it is cleared has
// a greater sequence.
func (f *flusher) advance(now int64, seq func() uint64) {
	p := f.due.Load()
	if p == nil || now < p.at {
		return
	}
	if p.mark.Load() == 0 {
		p.mark.CompareAndSwap(0, seq())
	}
	f.raise(p.mark.Load())
	f.due.CompareAndSwap(p, nil)
}

// raise raises the watermark to mark, then the store sequence above it:
// in that order, so that a write that reads a sequence above mark
// (Store.begin) and then checks its key's item finds the watermark raised
// (TestFlushDuringReadModifyWrite). mark is a sequence read, not
// incremented, so that a write that read the same value is flushed too.
func (f *flusher) raise(mark uint64) {
	for {
		old := f.watermark.Load()
		if mark <= old || f.watermark.CompareAndSwap(old, mark) {
			break
		}
	}
	if f.seq == nil {
		return
	}
	for {
		old := f.seq.Load()
		if old > mark || f.seq.CompareAndSwap(old, mark+1) {
			return
		}
	}
}

func (f *flusher) pending() bool { return f.due.Load() != nil }
