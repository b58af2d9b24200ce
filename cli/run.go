package cli

import (
	"github.com/spf13/cobra"

	"github.com/notifier/notifier/internal/service"
)

func runCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "run",
		Short: "Run the dispatch workers until SIGINT or SIGTERM",
		Long: `Run consumes jobs from the NOTIFY stream and dispatches them through the per-user cap,
the fleet bucket and each provider's leaky queue. Start as many processes as you like,
on as many machines: they share the durable consumers and the limits in Redis.

On SIGINT or SIGTERM it stops taking jobs, hands the ones still waiting back to
JetStream at once, lets the sends already at a provider finish, and exits 0.`,
		Args: cobra.NoArgs,
	}
	path := configFlag(c)
	logf := logFlags(c)
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, log, err := logf.start(*path, e, nil)
		if err != nil {
			return err
		}
		return service.Run(cmd.Context(), cfg, service.Options{Path: *path, Version: version, Logger: log, Stdout: e.stdout, Getenv: e.getenv})
	}
	return c
}
