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

// Freeze stops the server process (SIGSTOP) without closing its port: the
// kernel still accepts connections, and every command times out, as on a
// host that hangs or a network that drops packets. Thaw resumes it.
func (s *RedisServer) Freeze() { s.signal(syscall.SIGSTOP) }

// Thaw resumes a Frozen server (SIGCONT), its state intact.
func (s *RedisServer) Thaw() { s.signal(syscall.SIGCONT) }

func (s *RedisServer) signal(sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Fatalf("testenv: signal %v to a stopped redis-server", sig)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("testenv: signal %v to redis-server: %v", sig, err)
	}
}
