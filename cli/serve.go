package cli

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
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
