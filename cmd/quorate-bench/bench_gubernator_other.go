//go:build !linux

package main

import (
	"errors"
	"os/exec"
)

// withHostname cannot give a process a host name of its own outside Linux:
// the command fails to start, and bench compare reports Gubernator as not
// run.
func withHostname(hostname, bin string, args []string) (string, []string, func(*exec.Cmd)) {
	return bin, args, func(cmd *exec.Cmd) {
		cmd.Err = errors.New("a Gubernator cluster on one machine needs Linux (a UTS namespace per node for its host name)")
	}
}
