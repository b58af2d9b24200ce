package testenv

import (
	"os/exec"
	"syscall"
)

// bindToParent makes the child die with the test process, so a test binary
// killed by a timeout leaves no redis-server behind.
func bindToParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
