package localenv

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
// Another process may take it before the caller binds it; the starters
// here retry with a new port when a start fails.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// WaitFor polls cond every 10 ms until it returns nil or timeout passes,
// and then returns cond's last error, wrapped with the time waited.
func WaitFor(timeout time.Duration, cond func() error) error {
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

// PortTakenError is a listen address another process holds.
type PortTakenError struct {
	What, Addr, Flag string
	Err              error
}

func (e *PortTakenError) Error() string {
	return fmt.Sprintf("%s %s is already in use (another process listens there); stop it, or give %s another address, such as %s, or port 0 for any free one",
		e.What, e.Addr, e.Flag, nextPort(e.Addr))
}

func (e *PortTakenError) Unwrap() error { return e.Err }

// nextPort is addr with its port plus one: a suggestion.
func nextPort(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	n, perr := strconv.Atoi(port)
	if err != nil || perr != nil || n <= 0 || n >= 65535 {
		return "127.0.0.1:4223"
	}
	return net.JoinHostPort(host, strconv.Itoa(n+1))
}

// CheckFree fails with a *PortTakenError, naming what listens there (what)
// and the flag that moves it, when addr cannot be listened on because
// another process holds it. nats-server binds its port only once started,
// and then only logs the failure: this check turns it into an error at
// once.
func CheckFree(what, addr, flag string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return &PortTakenError{What: what, Addr: addr, Flag: flag, Err: syscall.EADDRINUSE}
		}
		return fmt.Errorf("listen for %s on %s (%s): %w", what, addr, flag, err)
	}
	return ln.Close()
}
