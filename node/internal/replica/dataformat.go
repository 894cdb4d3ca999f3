package replica

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrDataFormat is wrapped by the error of a data directory this build
// cannot read: one an earlier build of Quorate left, without a data format
// marker, or one of another data format.
var ErrDataFormat = errors.New("node: data directory of another format")

const (
	// dataFormatFile marks a data directory with the format of the data in
	// it, written at the node's first start before anything else.
	dataFormatFile = "data-format"
	// dataFormat is the one data format this build reads and writes:
	// Quorate's version 0.
	dataFormat = "quorate-data-format 0"
)

// CheckDataFormat checks dir's data format marker, or writes it (synced,
// with dir) when dir is empty. A directory that holds anything else but
// no marker is an earlier build's, and one with another marker another
// format's: both are refused, with the way out.
func CheckDataFormat(dir string) error {
	advice := "move it away and start this node afresh with an empty --data-dir (it rejoins its cluster with --join and " +
		"receives its replicas' state from their peers), or restore a backup taken with this build"
	b, err := os.ReadFile(filepath.Join(dir, dataFormatFile))
	switch {
	case err == nil:
		if got := strings.TrimSpace(string(b)); got != dataFormat {
			return fmt.Errorf("%w: --data-dir %s holds data of format %q, and this build reads %q only: %s",
				ErrDataFormat, dir, got, dataFormat, advice)
		}
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("node: --data-dir: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("node: --data-dir: %w", err)
	}
	for _, e := range entries {
		if e.Name() != "lost+found" { // the root of a file system made for the node
			return fmt.Errorf("%w: --data-dir %s was written by an earlier build of Quorate (it has no %s file, "+
				"and holds %s), whose data this build cannot read: %s", ErrDataFormat, dir, dataFormatFile, e.Name(), advice)
		}
	}
	if err := writeSynced(filepath.Join(dir, dataFormatFile), []byte(dataFormat+"\n")); err != nil {
		return fmt.Errorf("node: --data-dir: %w", err)
	}
	return nil
}
