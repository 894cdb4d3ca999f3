//go:build !linux

package nodelog

import "os"

// fdatasync is fsync where fdatasync is not available.
func fdatasync(f *os.File) error { return f.Sync() }
