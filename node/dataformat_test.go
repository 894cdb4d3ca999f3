package node_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/internal/replica"
)

// earlierBuildDir lays out dir as an earlier build of Quorate left it: its
// node-id, and a meta group replica in the store layout named.
func earlierBuildDir(tb testing.TB, dir, layout string) {
	tb.Helper()
	files := map[string]string{"node-id": "n1\n"}
	switch layout {
	case "raft-wal":
		files["raft/wal/wal-meta.db"] = ""
		files["raft/wal/00000000000000000001-0000000000000000.wal"] = "\x00"
	case "bolt":
		if err := os.MkdirAll(filepath.Join(dir, "raft"), 0o750); err != nil {
			tb.Fatal(err)
		}
		s, err := raftboltdb.NewBoltStore(filepath.Join(dir, "raft", "raft.db"))
		if err != nil {
			tb.Fatal(err)
		}
		if err := errors.Join(s.SetUint64([]byte("CurrentTerm"), 3), s.Close()); err != nil {
			tb.Fatal(err)
		}
	case "shared log with its own stable.db":
		files["log/stable.db"] = ""
		files["log/00000001.seg"] = "\x00"
		files["raft/shared-log"] = "this replica's Raft log is in the node's shared log, <data-dir>/log\n"
	}
	for name, body := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o640); err != nil {
			tb.Fatal(err)
		}
	}
}

// dirList is every path under dir.
func dirList(tb testing.TB, dir string) []string {
	tb.Helper()
	var out []string
	if err := filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		out = append(out, path)
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	return out
}

func formatConfig(dir string) node.Config {
	cfg := node.DefaultConfig()
	cfg.ID, cfg.DataDir, cfg.Bootstrap = "n1", dir, true
	cfg.APIAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.LogLevel = "error"
	return cfg
}

// A data directory an earlier build left (a raft-wal or bolt replica, a
// shared log with its own stable.db), or one marked with another data
// format, is refused: the error names the directory and says to move it
// away and start afresh, or restore a backup; the directory is left as
// it was.
func TestEarlierDataDirIsRefused(t *testing.T) {
	for _, layout := range []string{"raft-wal", "bolt", "shared log with its own stable.db", "another format"} {
		t.Run(layout, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if layout == "another format" {
				if err := os.MkdirAll(dir, 0o750); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "data-format"), []byte("quorate-data-format 1\n"), 0o640); err != nil {
					t.Fatal(err)
				}
			} else {
				earlierBuildDir(t, dir, layout)
			}
			before := dirList(t, dir)
			n, err := node.New(formatConfig(dir))
			if err == nil {
				_ = n.Close()
				t.Fatal("the node started")
			}
			if !errors.Is(err, replica.ErrDataFormat) {
				t.Fatalf("%v, want replica.ErrDataFormat", err)
			}
			for _, want := range []string{dir, "move it away", "start this node afresh", "restore a backup"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q: %v", want, err)
				}
			}
			if after := dirList(t, dir); strings.Join(after, "\n") != strings.Join(before, "\n") {
				t.Fatalf("the directory changed: %v, was %v", after, before)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// A node's first start marks its data directory (empty, or the root of a
// file system made for it, holding only lost+found) with data format 0,
// and it starts again from it.
func TestDataFormatMarkedAtFirstStart(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "lost+found"), 0o700); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		n, err := node.New(formatConfig(dir))
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "data-format"))
		if err != nil || string(b) != "quorate-data-format 0\n" {
			t.Fatalf("data-format: %q, %v", b, err)
		}
	}
}
