package localenv

import (
	"fmt"
	"os/exec"
	"syscall"
)

// BindToParent makes a child process die with this one (on Linux; a
// no-op elsewhere), so a test binary killed by a timeout, or a bench
// interrupted, leaves no redis-server or `notifier run` behind.
func BindToParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// Freeze stops the server process (SIGSTOP) without closing its port: the
// kernel still accepts connections, and every command times out, as on a
// host that hangs or a network that drops packets. Thaw resumes it.
func (s *RedisServer) Freeze() error { return s.signal(syscall.SIGSTOP) }

// Thaw resumes a Frozen server (SIGCONT), its state intact.
func (s *RedisServer) Thaw() error { return s.signal(syscall.SIGCONT) }

func (s *RedisServer) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return fmt.Errorf("signal %v to a stopped redis-server", sig)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v to redis-server: %w", sig, err)
	}
	return nil
}
