//go:build unix

package store

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// cpuTime is the CPU time the process has used, user and system: on a
// machine shared with other work, the steadier measure of what a parallel
// benchmark costs.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// threadCPUTime is the CPU time of the calling thread: a stall measured
// with it leaves out the time the thread waited for a core.
func threadCPUTime() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
