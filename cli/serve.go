package cli

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/notifier/notifier/config"
)

// logOptions are the --log-level and --log-format flags.
type logOptions struct {
	level  string
	format string
}

func logFlags(c *cobra.Command) *logOptions {
	o := &logOptions{}
	c.Flags().StringVar(&o.level, "log-level", "info", "debug, info, warn or error")
	c.Flags().StringVar(&o.format, "log-format", "json", "json or text")
	return o
}

// readableDurations writes durations as Go duration strings ("1.5s"), not
// the JSON handler's raw nanoseconds.
func readableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// logger builds the structured logger on w.
func (o *logOptions) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.level)); err != nil {
		return nil, &usageError{err: fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", o.level)}
	}
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: readableDurations}
	switch strings.ToLower(o.format) {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, &usageError{err: fmt.Errorf("--log-format: %q is not one of json, text", o.format)}
}

// start loads the configuration at path, has need check it (nil: nothing
// to check), then builds the logger on e's stderr: how a long-running
// command (run, gateway) starts.
func (o *logOptions) start(path string, e *env, need func(config.Config) error) (config.Config, *slog.Logger, error) {
	cfg, err := config.Load(path, e.getenv)
	if err != nil {
		return cfg, nil, err
	}
	if need != nil {
		if err := need(cfg); err != nil {
			return cfg, nil, err
		}
	}
	log, err := o.logger(e.stderr)
	if err != nil {
		return cfg, nil, err
	}
	return cfg, log, nil
}
