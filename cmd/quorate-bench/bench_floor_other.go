//go:build !linux

package main

import (
	"os"
	"time"
)

// fdatasync flushes f's data to its disk: an fsync where the system has
// no fdatasync.
func fdatasync(f *os.File) error { return f.Sync() }

// threadCPU is unknown here.
func threadCPU() (time.Duration, bool) { return 0, false }

// selfCPU is unknown here.
func selfCPU() (time.Duration, bool) { return 0, false }
