package main

// The floor's round trip goes to another process, as a decision's do (the
// client's to its node, the leader's to a follower): quorate-bench runs
// itself again as an echo server, told so by floorEchoEnv. Waking another
// process costs more than waking a goroutine of one's own (on the 2-vCPU
// machine of docs/BENCHMARKS.md, after 1 ms of quiet: ~145 µs against
// ~37 µs), and a one-client decision pays the former.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// floorEchoEnv, set in a quorate-bench process's environment, makes it the
// floor's echo server instead of anything its arguments say.
const floorEchoEnv = "QUORATE_BENCH_FLOOR_ECHO"

// floorEcho is the echo process: it listens on a loopback port, writes the
// address on standard output, echoes the first connection it accepts until
// that connection's writes end, then writes the CPU time (nanoseconds; 0:
// unknown) the echoing took and returns.
func floorEcho() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	if _, err := fmt.Println(ln.Addr().String()); err != nil {
		return err
	}
	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(time.Minute))
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	cpu0, ok0 := selfCPU()
	if _, err := io.Copy(c, c); err != nil {
		return err
	}
	var cpu time.Duration
	if cpu1, ok := selfCPU(); ok && ok0 {
		cpu = cpu1 - cpu0
	}
	_, err = fmt.Println(cpu.Nanoseconds())
	return err
}

// echoProcess is a running echo process.
type echoProcess struct {
	cmd  *exec.Cmd
	out  *bufio.Reader
	addr string
}

// startEcho runs this program again as an echo process and reads its
// address.
func startEcho(ctx context.Context) (*echoProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), floorEchoEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	e := &echoProcess{cmd: cmd, out: bufio.NewReader(out)}
	line, err := e.out.ReadString('\n')
	if err != nil {
		e.kill()
		return nil, fmt.Errorf("the echo process said no address: %w", err)
	}
	e.addr = strings.TrimSpace(line)
	return e, nil
}

// kill ends the echo process without waiting for its connection.
func (e *echoProcess) kill() {
	_ = e.cmd.Process.Kill()
	_ = e.cmd.Wait()
}

// finish reads the CPU time the echo process says its echoing took (the
// caller has closed its connection) and waits for it to end.
func (e *echoProcess) finish() (time.Duration, error) {
	line, readErr := e.out.ReadString('\n')
	if err := e.cmd.Wait(); err != nil {
		return 0, fmt.Errorf("the echo process: %w", err)
	}
	if readErr != nil {
		return 0, fmt.Errorf("the echo process said no CPU time: %w", readErr)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the echo process's CPU time %q: %w", line, err)
	}
	return time.Duration(ns), nil
}
