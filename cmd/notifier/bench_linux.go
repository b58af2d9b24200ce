package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill a child the bench started (a
// redis-server, a `notifier run`) if the bench itself dies first.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
