package main

import (
	"os"
	"os/exec"
	"syscall"
)

// withHostname returns the command line and the set-up that run bin with
// args under its own host name: in a UTS namespace of its own (a user
// namespace too when this process is not root), whose host name /bin/sh
// sets before it executes bin. Gubernator's memberlist gossip names each
// node by its host name, so nodes on one machine need one each.
func withHostname(hostname, bin string, args []string) (string, []string, func(*exec.Cmd)) {
	shArgs := append([]string{"-c", `echo "$0" > /proc/sys/kernel/hostname && exec "$@"`, hostname, bin}, args...)
	return "/bin/sh", shArgs, func(cmd *exec.Cmd) {
		attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUTS}
		if os.Geteuid() != 0 {
			attr.Cloneflags |= syscall.CLONE_NEWUSER
			attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
			attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
		}
		cmd.SysProcAttr = attr
	}
}
