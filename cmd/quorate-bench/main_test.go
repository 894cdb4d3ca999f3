package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestMain lets the test binary be the floor's echo process, as the
// program is (bench_floor_echo.go): the floor runs os.Executable again.
func TestMain(m *testing.M) {
	if os.Getenv(floorEchoEnv) != "" {
		if err := floorEcho(); err != nil {
			fmt.Fprintf(os.Stderr, "floor echo: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestFloorEcho: the floor's round trips go to another process, which
// echoes what it gets and reports its CPU when the connection closes.
func TestFloorEcho(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	echo, err := startEcho(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if echo.cmd.Process.Pid == os.Getpid() {
		t.Fatal("the echo runs in this process")
	}
	c, err := net.Dial("tcp", echo.addr)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte("a round trip of the floor")
	got := make([]byte, len(want))
	for range 3 {
		if _, err := c.Write(want); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("echoed %q, want %q", got, want)
		}
	}
	_ = c.Close()
	cpu, err := echo.finish()
	if err != nil || cpu < 0 {
		t.Fatalf("finish: %v, %v", cpu, err)
	}
}
