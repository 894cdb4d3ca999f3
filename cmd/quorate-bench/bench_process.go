package main

// The servers bench compare starts as child processes (redis-server,
// gubernator), and the polling and port helpers they share with the other
// commands that start processes.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/quorate/quorate/devcluster"
)

// serverStopWait is how long stop waits for a server to exit after SIGTERM
// before it kills it.
const serverStopWait = 10 * time.Second

// serverProcess is a server this program started as a child process: its
// output is kept for error messages, and it ends with the context it was
// started with or with stop.
type serverProcess struct {
	name    string // for errors, e.g. "redis-server on 127.0.0.1:6379"
	cmd     *exec.Cmd
	log     *devcluster.Output // its output
	exited  chan struct{}
	waitErr error // set before exited is closed
}

// startServerProcess starts bin with args; env, when not nil, is the
// child's whole environment (nil: this process's); configure functions may
// set up the command further before it starts. It returns once the process
// has started; readiness is the caller's to poll (exited is closed if it
// ends first).
func startServerProcess(ctx context.Context, name, bin string, args, env []string, configure ...func(*exec.Cmd)) (*serverProcess, error) {
	p := &serverProcess{name: name, log: &devcluster.Output{}, exited: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, bin, args...)
	p.cmd.Env = env
	for _, c := range configure {
		c(p.cmd)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.Cancel = func() error { return p.cmd.Process.Signal(syscall.SIGTERM) }
	p.cmd.WaitDelay = serverStopWait
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop asks the server to exit (SIGTERM), waits for it (killing it after
// serverStopWait) and returns an error if it did not exit cleanly.
func (p *serverProcess) stop() error {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(serverStopWait)
		defer t.Stop()
		select {
		case <-p.exited:
		case <-t.C:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	if p.waitErr != nil && !errors.Is(p.waitErr, context.Canceled) && !errors.Is(p.waitErr, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %v: %s", p.name, p.waitErr, lastLines(p.log.String(), 5))
	}
	return nil
}

// pollUntil calls try every 100ms until it reports done (then it returns
// try's error), the deadline passes (then an error with try's last
// problem), ctx ends or exited is closed.
func pollUntil(ctx context.Context, deadline time.Time, exited <-chan struct{}, try func(context.Context) (done bool, problem error)) error {
	err := devcluster.Poll(ctx, 100*time.Millisecond, 5*time.Second, deadline, exited, try)
	var st devcluster.PollStopped
	if errors.As(err, &st) {
		return fmt.Errorf("exited: %v", st.Problem)
	}
	return err
}

// freeLoopbackPortRange returns the first of n consecutive TCP ports on
// 127.0.0.1 that were free a moment ago.
func freeLoopbackPortRange(n int) (int, error) {
	for attempt := 0; attempt < 100; attempt++ {
		base, err := freeLoopbackPort()
		if err != nil {
			return 0, err
		}
		ok := base+n-1 <= 65535
		var lns []net.Listener
		for i := 1; ok && i < n; i++ {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				ok = false
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if ok {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no %d consecutive free ports found on 127.0.0.1", n)
}

// muteWriter passes the nodes' log lines on to w until muted. Safe for
// concurrent use.
type muteWriter struct {
	mu    sync.Mutex
	w     io.Writer
	muted bool
}

func (m *muteWriter) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.muted {
		return len(p), nil
	}
	return m.w.Write(p)
}

func (m *muteWriter) mute() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.muted = true
}

// freeLoopbackPort returns a TCP port on 127.0.0.1 that was free a moment
// ago.
func freeLoopbackPort() (int, error) { return freePortOn("127.0.0.1") }

// freePortOn returns a TCP port on the address ip (of this machine) that was
// free a moment ago.
func freePortOn(ip string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
