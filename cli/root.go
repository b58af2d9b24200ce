package cli

import (
	"context"
	"errors"
	"io"
	"strings"

	"github.com/spf13/cobra"
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
	root := &cobra.Command{
		Use:           "notifier",
		Short:         "Dispatch notification jobs from NATS JetStream to providers, within per-user, fleet and provider rate limits",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err: err} })
	root.AddCommand(
		demoCmd(e),
		devCmd(e),
		runCmd(e),
		statusCmd(e),
		topCmd(e),
		publishCmd(e),
		checkCmd(e),
		versionCmd(e),
		benchCmd(e),
		deadCmd(e),
		resumeCmd(e),
		gatewayCmd(e),
		explainCmd(e),
	)
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
