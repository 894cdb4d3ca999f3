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
func threadCPU() (time.Duration, bool) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// selfCPU is the user + system CPU time of this whole process.
func selfCPU() (time.Duration, bool) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
