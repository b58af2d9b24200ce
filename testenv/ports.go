package testenv

import (
	"fmt"
	"net"
	"testing"
	"time"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
// Another process may take it before the caller binds it; the server helpers
// retry with a new port when a start fails.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitFor polls cond every 10ms until it returns nil or timeout passes, and
// returns the last error.
func waitFor(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WaitFor polls cond until it is true or timeout passes, and fails the test
// with msg if it never becomes true. Tests wait on conditions, never on fixed
// sleeps.
func WaitFor(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	err := waitFor(timeout, func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf("%s", msg)
	})
	if err != nil {
		t.Fatalf("testenv: waited %s for: %s", timeout, msg)
	}
}
