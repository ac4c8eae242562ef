//go:build race

package ring

// raceEnabled shrinks the heavy property tests under the race detector,
// which slows them tenfold; their assertions stay the same.
const raceEnabled = true
