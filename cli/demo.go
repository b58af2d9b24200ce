package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/notifier/notifier/internal/demo"
)

func demoCmd(e *env) *cobra.Command {
	f := &demo.Config{}
	c := &cobra.Command{
		Use:   "demo",
		Short: "A tour with nothing to set up: embedded NATS, in-memory limits, a sandbox provider, a burst of jobs",
		Long: `Demo starts an embedded NATS JetStream server, a sandbox provider that enforces
its contracts (and answers 429 over them), and a dispatcher on in-memory limits;
publishes a burst of jobs for a few hundred users (some over their per-user cap,
a few invalid, a few expired, some on the priority lane) as one tenant's blast;
a moment later another tenant's one-time codes arrive at a steady pace; shows a
live progress line; and ends with a report of what happened at each of the three
limits, and how long the late tenant's codes waited behind the blast.`,
		Args: cobra.NoArgs,
	}
	c.Flags().IntVar(&f.Jobs, "jobs", 2000, "jobs in all: the burst, and the late tenant's codes (1 in 50, 10 to 40)")
	c.Flags().IntVar(&f.Users, "users", 300, "users they are for")
	c.Flags().Uint64Var(&f.Seed, "seed", 1, "seed of the generated burst")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := f.Validate(); err != nil {
			return &usageError{err: err}
		}
		return runDemo(cmd.Context(), *f, e)
	}
	return c
}

// runDemo prints the banner, runs the demo with a live line on stderr
// (redrawn in place on a terminal, else a line every 2 s), and prints the
// report.
func runDemo(ctx context.Context, f demo.Config, e *env) error {
	demo.Banner(e.stdout, f)
	f.Version = version
	tty := isTerminal(e.stderr)
	var last time.Time
	f.Progress = func(p demo.Progress) {
		if !tty && time.Since(last) < 2*time.Second {
			return
		}
		// Read each time: the terminal may be resized. One column spare:
		// a line as wide as the terminal wraps on some, and \r would then
		// redraw only its end.
		line := p.Line(termWidth(e.stderr, e.getenv) - 1)
		if tty {
			fmt.Fprintf(e.stderr, "\r\033[K%s", line)
		} else {
			fmt.Fprintln(e.stderr, line)
		}
		last = time.Now()
	}
	res, err := demo.Run(ctx, f)
	if tty {
		fmt.Fprintln(e.stderr)
	}
	if err != nil {
		return err
	}
	demo.Print(e.stdout, res)
	return nil
}
