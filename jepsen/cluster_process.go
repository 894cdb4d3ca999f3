package jepsen

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The control of a node's process: signals, stops (graceful or killed),
// restarts, pauses and the clock offset it starts with.

// errKilledAfterTimeout is StopNode's error when a node had to be killed.
var errKilledAfterTimeout = errors.New("jepsen: killed")

func (c *Cluster) signal(i int, sig syscall.Signal) error {
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return fmt.Errorf("jepsen: %s not started", n.ID)
	}
	return n.cmd.Process.Signal(sig)
}

func (c *Cluster) wait(i int, d time.Duration) error {
	n := c.Nodes[i]
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-time.After(d):
		return fmt.Errorf("jepsen: %s did not exit within %v", n.ID, d)
	}
}

// Kill sends SIGKILL to node i and waits for it to exit.
func (c *Cluster) Kill(i int) error {
	if !c.Running(i) {
		return nil
	}
	if err := c.signal(i, syscall.SIGKILL); err != nil {
		return err
	}
	return c.wait(i, 10*time.Second)
}

// StopNode stops node i gracefully: SIGTERM (a paused node is resumed
// first), SIGKILL after 10 s. It stays a member: Heal or Restart starts it.
func (c *Cluster) StopNode(i int) error {
	if !c.Running(i) {
		return nil
	}
	_ = c.signal(i, syscall.SIGCONT)
	if err := c.signal(i, syscall.SIGTERM); err != nil {
		return err
	}
	c.Nodes[i].mu.Lock()
	c.Nodes[i].paused = false
	c.Nodes[i].mu.Unlock()
	if err := c.wait(i, 10*time.Second); err != nil {
		_ = c.Kill(i)
		return fmt.Errorf("%w: %s did not stop on SIGTERM within 10 s", errKilledAfterTimeout, c.Nodes[i].ID)
	}
	return nil
}

// Restart starts node i again with the same data dir and ports; it kills it first if running.
func (c *Cluster) Restart(i int) error {
	if err := c.Kill(i); err != nil {
		return err
	}
	return c.start(i)
}

// RestartWithClockOffset restarts node i with its clock shifted by offset
// (through the hidden --debug-clock-file of quorate serve): the times it
// stamps into the log when it leads jump forward or backward. SetClockOffset
// does the same without a restart.
func (c *Cluster) RestartWithClockOffset(i int, offset time.Duration) error {
	c.Nodes[i].mu.Lock()
	c.Nodes[i].offset = offset
	c.Nodes[i].mu.Unlock()
	return c.Restart(i)
}

// SetClockOffset shifts node i's clock by offset while it runs: the times
// it stamps into the log when it leads jump forward or backward. It writes
// the node's --debug-clock-file (atomically) and sends SIGUSR1, which makes
// quorate serve read it again; the offset also holds across restarts of the
// node until changed. A stopped node takes it when it starts; a paused one
// when it resumes.
func (c *Cluster) SetClockOffset(i int, offset time.Duration) error {
	n := c.Nodes[i]
	n.mu.Lock()
	n.offset = offset
	err := writeClockFile(n.clockFile, offset)
	n.mu.Unlock()
	if err != nil {
		return err
	}
	if !c.Running(i) {
		return nil
	}
	if err := c.waitSignalHandler(i, 10*time.Second); err != nil {
		return err
	}
	return c.signal(i, syscall.SIGUSR1)
}

func writeClockFile(path string, offset time.Duration) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(offset.String()+"\n"), 0o644); err != nil {
		return fmt.Errorf("jepsen: clock file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("jepsen: clock file: %w", err)
	}
	return nil
}

// waitSignalHandler waits until node i's process catches SIGUSR1, i.e. it is
// the Go binary with its runtime up (a Go program ignores a SIGUSR1 it did
// not ask for, while the default action — still in force between fork and
// exec, or in `ip netns exec` — kills). Where /proc is missing it cannot
// tell and returns at once.
func (c *Cluster) waitSignalHandler(i int, d time.Duration) error {
	n := c.Nodes[i]
	n.mu.Lock()
	pid := n.cmd.Process.Pid
	n.mu.Unlock()
	if _, err := os.Stat("/proc/self/status"); err != nil {
		return nil
	}
	deadline := time.Now().Add(d)
	for {
		if catches, err := catchesSignal(pid, syscall.SIGUSR1); err == nil && catches {
			return nil
		}
		if !c.Running(i) {
			return fmt.Errorf("jepsen: %s exited", n.ID)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("jepsen: %s does not handle SIGUSR1 after %v", n.ID, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// catchesSignal reads the SigCgt mask of /proc/<pid>/status.
func catchesSignal(pid int, sig syscall.Signal) (bool, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if mask, ok := strings.CutPrefix(line, "SigCgt:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64)
			if err != nil {
				return false, err
			}
			return m&(1<<(uint(sig)-1)) != 0, nil
		}
	}
	return false, errors.New("jepsen: no SigCgt in /proc status")
}

// Pause stops node i with SIGSTOP.
func (c *Cluster) Pause(i int) error {
	if err := c.signal(i, syscall.SIGSTOP); err != nil {
		return err
	}
	c.Nodes[i].mu.Lock()
	c.Nodes[i].paused = true
	c.Nodes[i].mu.Unlock()
	return nil
}

// Resume continues node i with SIGCONT.
func (c *Cluster) Resume(i int) error {
	if err := c.signal(i, syscall.SIGCONT); err != nil {
		return err
	}
	c.Nodes[i].mu.Lock()
	c.Nodes[i].paused = false
	c.Nodes[i].mu.Unlock()
	return nil
}
