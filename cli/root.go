package cli

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/notifier/notifier/config"
)

// env is what a command needs from its process: streams and the environment.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
}

// run executes the command line args; main maps the error to an exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) error {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
	root := rootCmd(e)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return nil
	}
	var ue *usageError
	if !errors.As(err, &ue) && isCobraUsageError(err) {
		ue = &usageError{err: err}
		err = ue
	}
	if ue != nil && ue.cmd == "" && cmd != nil {
		ue.cmd = cmd.CommandPath()
	}
	return err
}

// rootCmd is the notifier command with every subcommand, on e's streams.
func rootCmd(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:           "notifier",
		Short:         "Dispatch notification jobs from NATS JetStream to providers, within per-user, fleet and provider rate limits",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err: err} })
	root.AddCommand(
		demoCmd(e),
		devCmd(e),
		runCmd(e),
		withNATSFlag(e, statusCmd, false),
		topCmd(e),
		publishCmd(e),
		checkCmd(e),
		versionCmd(e),
		benchCmd(e),
		withNATSFlag(e, deadCmd, true),
		resumeCmd(e),
		withNATSFlag(e, gatewayCmd, false),
		withNATSFlag(e, explainCmd, false),
		suppressionCmd(e),
		sandboxCmd(e),
		healthcheckCmd(e),
	)
	return root
}

// isCobraUsageError tells cobra's own argument errors (unknown command,
// wrong number of arguments) from a command's runtime failure.
func isCobraUsageError(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "accepts ", "requires at least", "requires at most", "unknown flag", "unknown shorthand flag", "invalid argument"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// configFlag adds --config (default config.yaml) to c.
func configFlag(c *cobra.Command) *string {
	return c.Flags().String("config", "config.yaml", "YAML configuration file (SPEC §4); every key can be overridden by NOTIFIER_<KEY_PATH>")
}

// natsURLVar is the variable that overrides the configuration's nats.url.
const natsURLVar = "NOTIFIER_NATS_URL"

// withNATSFlag builds a command with --nats URL, which replaces the
// configuration's nats.url as NOTIFIER_NATS_URL does (the flag wins over
// the variable): the command reads its configuration through the env
// given to build. persistent gives the flag to its subcommands too (dead
// list, dead show, dead replay).
func withNATSFlag(e *env, build func(*env) *cobra.Command, persistent bool) *cobra.Command {
	var url string
	ne := *e
	ne.getenv = func(k string) string {
		if k == natsURLVar && url != "" {
			return url
		}
		return e.getenv(k)
	}
	c := build(&ne)
	fl := c.Flags()
	if persistent {
		fl = c.PersistentFlags()
	}
	fl.StringVar(&url, "nats", "", "NATS server URL, in place of the configuration's nats.url (as "+natsURLVar+"; notifier dev prints its URL)")
	return c
}

// loadConfig loads the configuration cmd's --config names (path). With
// --nats and no --config, a default file that does not exist is no error:
// the defaults, with the server --nats names, as `publish --nats` reads
// them (beside a notifier dev, outside the repository).
func loadConfig(cmd *cobra.Command, path string, e *env) (config.Config, error) {
	if f := cmd.Flags().Lookup("nats"); f != nil && f.Changed && !cmd.Flags().Changed("config") {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return config.NATSOnly(f.Value.String(), e.getenv)
		}
	}
	return config.Load(path, e.getenv)
}

// loadRedis loads the configuration as loadConfig does and connects to
// the Redis it names, with a pool for an operator's read (4 connections).
// The caller closes the client.
func loadRedis(cmd *cobra.Command, path string, e *env) (config.Config, redis.UniversalClient, error) {
	cfg, err := loadConfig(cmd, path, e)
	if err != nil {
		return cfg, nil, err
	}
	rdb, err := config.ConnectRedis(cmd.Context(), cfg.Redis, 4)
	if err != nil {
		return cfg, nil, err
	}
	return cfg, rdb, nil
}
