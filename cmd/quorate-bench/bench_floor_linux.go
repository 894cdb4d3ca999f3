package main

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// fdatasync flushes f's data to its disk, as the nodes' log does.
func fdatasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

// threadCPU is the user + system CPU time of the calling thread (the
// caller has locked its goroutine to it).
func threadCPU() (time.Duration, bool) { return rusageCPU(unix.RUSAGE_THREAD) }

// selfCPU is the user + system CPU time of this whole process, to the
// microsecond (processCPU reads /proc's 10 ms ticks: too coarse for 200
// round trips).
func selfCPU() (time.Duration, bool) { return rusageCPU(unix.RUSAGE_SELF) }

// rusageCPU is the user + system CPU time getrusage reports for who.
func rusageCPU(who int) (time.Duration, bool) {
	var ru unix.Rusage
	if err := unix.Getrusage(who, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
