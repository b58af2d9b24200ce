// Package cli is the notifier command line: its cobra commands, their
// flags and help, and what each prints. Every command calls the library
// packages (worker, inspect, bench, demo, gateway, queue, config) and
// prints what they return; none holds logic of its own. cmd/notifier's
// main is Main with the process's signals, streams and environment, the
// way river keeps rivercli apart from its main.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/notifier/notifier/config"
)

// Exit codes (SPEC §5).
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// Main runs the command line args (without the program name) and returns
// the process's exit code (SPEC §5): 0 success, 1 a runtime failure, 2 a
// bad command line or configuration. The error, if any, is printed to
// stderr. ctx ends the long-running commands (run, dev, gateway, demo)
// cleanly: cmd/notifier cancels it on SIGINT and SIGTERM.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	return exitCode(run(ctx, args, stdin, stdout, stderr, getenv), stderr)
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
