//go:build !linux

package testenv

import "os/exec"

func bindToParent(cmd *exec.Cmd) {}

// Freeze needs SIGSTOP, which this system does not have.
func (s *RedisServer) Freeze() { s.t.Fatalf("testenv: Freeze needs SIGSTOP (Linux)") }

// Thaw needs SIGCONT, which this system does not have.
func (s *RedisServer) Thaw() { s.t.Fatalf("testenv: Thaw needs SIGCONT (Linux)") }
