package testenv

import (
	"fmt"
	"testing"
	"time"

	"github.com/notifier/notifier/internal/localenv"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
// Another process may take it before the caller binds it; the server helpers
// retry with a new port when a start fails.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := localenv.FreePort()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return p
}

// WaitFor polls cond until it is true or timeout passes, and fails the test
// with msg if it never becomes true. Tests wait on conditions, never on fixed
// sleeps.
func WaitFor(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	err := localenv.WaitFor(timeout, func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf("%s", msg)
	})
	if err != nil {
		t.Fatalf("testenv: waited %s for: %s", timeout, msg)
	}
}
