package bench

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// Sample is the throughput of one sampling interval of the measured phase.
type Sample struct {
	// At is the end of the interval, in seconds since the phase started.
	At        float64 `json:"at"`
	Ops       int64   `json:"ops"`    // requests finished in the interval, errors included
	Errors    int64   `json:"errors"` // of which errors
	OpsPerSec float64 `json:"ops_per_sec"`
}

// sampleUntil samples the workers' counters every Interval until wg is done,
// writing the progress line if one was asked for.
func (e *engine) sampleUntil(wg *sync.WaitGroup, start time.Duration) []Sample {
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		close(finished)
	}()
	tick := time.NewTicker(e.cfg.Interval)
	defer tick.Stop()
	var samples []Sample
	var lastOps, lastErrs int64
	var lastAt, lastFrom time.Duration // end of the last look; start of the last sample
	take := func(final bool) {
		at := e.since() - start
		var ops, errs int64
		for _, w := range e.workers {
			ops += w.done.Load()
			errs += w.errs.Load()
		}
		n := len(samples)
		switch dt := at - lastAt; {
		case final && n > 0 && dt < e.cfg.Interval/2:
			// A short tail would plot as a spike: fold it into the last
			// interval instead.
			last := &samples[n-1]
			last.Ops += ops - lastOps
			last.Errors += errs - lastErrs
			last.At = at.Seconds()
			last.OpsPerSec = float64(last.Ops) / (at - lastFrom).Seconds()
		case dt > 0:
			lastFrom = lastAt
			samples = append(samples, Sample{
				At:        at.Seconds(),
				Ops:       ops - lastOps,
				Errors:    errs - lastErrs,
				OpsPerSec: float64(ops-lastOps) / dt.Seconds(),
			})
		}
		e.progress(at, ops, errs, samples)
		lastOps, lastErrs, lastAt = ops, errs, at
	}
	for {
		select {
		case <-tick.C:
			take(false)
		case <-finished:
			take(true)
			if e.cfg.Progress != nil {
				fmt.Fprintln(e.cfg.Progress)
			}
			return samples
		}
	}
}

// progress rewrites the progress line: elapsed, completion, totals, and the
// last interval's rate.
func (e *engine) progress(at time.Duration, ops, errs int64, samples []Sample) {
	if e.cfg.Progress == nil {
		return
	}
	cfg := e.cfg
	pct := -1.0
	switch {
	case cfg.Rate > 0 && cfg.Requests > 0:
		pct = 100 * float64(ops) / float64(cfg.Requests)
	case cfg.Rate > 0:
		pct = 100 * float64(ops) / (cfg.Rate * cfg.Duration.Seconds())
	case cfg.Requests > 0:
		pct = 100 * float64(ops) / float64(cfg.Requests)
	}
	if cfg.Duration > 0 {
		if p := 100 * at.Seconds() / cfg.Duration.Seconds(); p > pct {
			pct = p
		}
	}
	rate := 0.0
	if n := len(samples); n > 0 {
		rate = samples[n-1].OpsPerSec
	}
	bar := ""
	if pct >= 0 {
		if pct > 100 {
			pct = 100
		}
		const width = 20
		full := int(pct / 100 * width)
		bar = fmt.Sprintf("[%-*s] %3.0f%% ", width, strings.Repeat("#", full), pct)
	}
	fmt.Fprintf(cfg.Progress, "\r%s%6.1fs %12d ops %10.0f ops/s %8d errors ", bar, at.Seconds(), ops, rate, errs)
}
