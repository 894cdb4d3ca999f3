//go:build !linux

package main

import "os"

// fdatasync flushes f's data to its disk: an fsync where the system has
// no fdatasync.
func fdatasync(f *os.File) error { return f.Sync() }
