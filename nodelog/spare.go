package nodelog

import (
	"fmt"
	"os"
	"path/filepath"
)

// spareFile is the next segment's file while it is made ready: once the
// active segment is half full, a committer zero-fills it after its own
// commit, so that starting the next segment is a rename, not a stall of
// every group's appends while 16 MiB are written.
const spareFile = "next-segment.tmp"

// createSegment returns the file of a new segment at path: the spare,
// renamed, when one is ready, else a new file zero-filled now.
func (l *Log) createSegment(path string) (*os.File, error) {
	l.mu.Lock()
	f := l.spare
	l.spare = nil
	l.mu.Unlock()
	if f != nil {
		if err := os.Rename(filepath.Join(l.dir, spareFile), path); err != nil {
			f.Close()
			return nil, err
		}
		return f, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := zeroFill(f, l.opts.SegmentBytes); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// prepareSpare zero-fills the spare when the active segment is half full
// and none is ready or being made. mu held, released meanwhile.
func (l *Log) prepareSpare() {
	active := l.segs[len(l.segs)-1]
	if l.err != nil || l.closed || l.spare != nil || l.spareBusy || active.end < l.opts.SegmentBytes/2 {
		return
	}
	l.spareBusy = true
	l.mu.Unlock()
	path := filepath.Join(l.dir, spareFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err == nil {
		if err = zeroFill(f, l.opts.SegmentBytes); err == nil {
			l.syncs.Add(1)
			err = fdatasync(f)
		}
		if err != nil {
			f.Close()
		}
	}
	l.mu.Lock()
	l.spareBusy = false
	l.cond.Broadcast()
	if err != nil {
		l.logger.Warn("nodelog: cannot make the next segment ready; it will be made when needed", "file", path, "error", err)
		return
	}
	l.spare = f
}

// zeroFill writes n zero bytes to the new file f: appends then overwrite
// written blocks, and their fdatasync has no file size or block
// allocation to record, only the data. The scan takes zeros after the
// last record for the end of the segment.
func zeroFill(f *os.File, n int64) error {
	zeros := make([]byte, min(n, 1<<20))
	for off := int64(0); off < n; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), n-off)], off); err != nil {
			return err
		}
	}
	return nil
}
