package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync flushes f's data to its disk, as the nodes' log does.
func fdatasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
