// Command notifier dispatches notification jobs from NATS JetStream to SMS,
// push and email providers through three rate limits: a per-user cap, a
// fleet-wide worker-protection bucket and a per-provider leaky bucket shared
// through Redis. See README.md for the commands and SPEC.md for the contract.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/notifier/notifier/config"
)

// Exit codes (SPEC §5).
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// usageError is a bad command line: exit code 2. cmd is the command's
// path ("notifier top"), for the hint that follows the error.
type usageError struct {
	err error
	cmd string
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// exitCode prints err (once) and maps it to SPEC §5's exit codes. A bad
// command line is one line, "Error: ...", and a pointer to the command's
// help (not the help itself: the error would drown in it).
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(stderr, "Error:", err)
		if ue.cmd != "" {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", ue.cmd)
		}
		return exitUsage
	}
	fmt.Fprintln(stderr, "notifier:", err)
	var ce *config.Error
	if errors.As(err, &ce) {
		return exitUsage
	}
	return exitFailure
}
