//go:build !linux

package localenv

import (
	"errors"
	"os/exec"
)

// BindToParent would make cmd die with this process; this system cannot.
func BindToParent(cmd *exec.Cmd) {}

// Freeze needs SIGSTOP, which this system does not have.
func (s *RedisServer) Freeze() error { return errors.New("Freeze needs SIGSTOP (Linux)") }

// Thaw needs SIGCONT, which this system does not have.
func (s *RedisServer) Thaw() error { return errors.New("Thaw needs SIGCONT (Linux)") }
