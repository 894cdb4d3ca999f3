package nodelog

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
)

// crashDirEnv makes TestCrashChild the child of TestKill9: it appends to
// the log in that directory and prints each acknowledgement, until killed.
const crashDirEnv = "NODELOG_CRASH_DIR"

const (
	crashGroups = 8
	crashOpts   = 8 << 10 // segment bytes: rollovers and deletions while killed
	crashKeep   = 20      // the child truncates heads to this far below its last entry
)

func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("run by TestKill9 only")
	}
	// Two commits syncing at once: the hardest case for what a crash leaves.
	l, err := Open(dir, Options{SegmentBytes: crashOpts, SyncsInFlight: 2})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	var out sync.Mutex
	var wg sync.WaitGroup
	for g := uint32(1); g <= crashGroups; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, _ := l.Group(g)
			last, _ := s.LastIndex() // the killed child before left it so
			for i := last + 1; ; i++ {
				logs := []*raft.Log{entry(g, i)}
				if i%3 == 0 { // a batch of two
					i++
					logs = append(logs, entry(g, i))
				}
				if err := s.StoreLogs(logs); err != nil {
					fmt.Println("store:", err)
					os.Exit(2)
				}
				out.Lock()
				fmt.Fprintf(os.Stdout, "ack %d %d\n", g, i)
				out.Unlock()
				if i%25 == 0 && i > crashKeep {
					if err := s.DeleteRange(1, i-crashKeep); err != nil {
						fmt.Println("delete:", err)
						os.Exit(2)
					}
				}
			}
		}()
	}
	wg.Wait()
}

// TestKill9 kills a process appending to the log with SIGKILL mid-write,
// then checks that every entry it acknowledged is there and intact.
func TestKill9(t *testing.T) {
	if os.Getenv(crashDirEnv) != "" {
		t.Skip("in the child")
	}
	dir := t.TempDir()
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		acked := map[uint32]uint64{}
		sc := bufio.NewScanner(stdout)
		n := 0
		for sc.Scan() {
			var g uint32
			var i uint64
			if _, err := fmt.Sscanf(sc.Text(), "ack %d %d", &g, &i); err != nil {
				t.Errorf("child: %s", sc.Text())
				continue
			}
			acked[g] = max(acked[g], i)
			if n++; n == 400*(round+1) {
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("child ended without being killed: %v", err)
		}
		before, files := dirBytes(t, dir)
		l := openT(t, dir, Options{SegmentBytes: crashOpts})
		for g := uint32(1); g <= crashGroups; g++ {
			s := groupT(t, l, g)
			first, _ := s.FirstIndex()
			last, _ := s.LastIndex()
			top := acked[g]
			if top == 0 {
				continue
			}
			if last < top || first > top-crashKeep+1 && top > crashKeep {
				t.Fatalf("round %d group %d: range [%d, %d], acknowledged up to %d", round, g, first, last, top)
			}
			for i := first; i <= last; i++ {
				checkEntry(t, s, g, i)
			}
		}
		t.Logf("round %d: %d acknowledgements, %d bytes in %d segments", round, n, before, files)
		// The next child appends after what this one left.
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
