// Command notifier dispatches notification jobs from NATS JetStream to SMS,
// push and email providers through three rate limits: a per-user cap, a
// fleet-wide worker-protection bucket and a per-provider leaky bucket shared
// through Redis. See README.md for the commands and SPEC.md for the contract.
//
// The commands live in package cli; main gives them the process: its
// arguments, streams, environment and signals, and its exit code.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/notifier/notifier/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
