//go:build !race

package server

// raceEnabled shortens the history checker's loads under the race
// detector, which slows a cluster tenfold; the checks stay the same.
const raceEnabled = false
