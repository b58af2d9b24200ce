package cli

import (
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/spf13/cobra"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/fleet"
)

func resumeCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "resume <provider>",
		Short: "Lift a provider's 429 pause fleet-wide, before its end",
		Long: `Resume lifts the pause a 429 set on a provider, for the whole fleet at once: every
notifier run hears it (Redis pub/sub) and takes the provider's jobs again. Its queue
restarts after the slots already handed out, so the contract holds and sends resume
within the provider's max_queue_delay. Who lifted it (user@host) is logged.

A pause is capped by providers[].max_pause (default 5m); resume is for when the provider
says it is back sooner.`,
		Args: cobra.ExactArgs(1),
	}
	path := configFlag(c)
	lo := logFlags(c)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		log, err := lo.logger(e.stderr)
		if err != nil {
			return &usageError{err: err}
		}
		cfg, err := config.Load(*path, e.getenv)
		if err != nil {
			return err
		}
		name := args[0]
		var contract leaky.Contract
		found := false
		for _, p := range cfg.Providers {
			if p.Name == name {
				contract, found = limits.Contract(p), true
			}
		}
		if !found {
			return &config.Error{File: *path, Problems: []error{fmt.Errorf("no provider named %q in the configuration", name)}}
		}
		ctx := cmd.Context()
		rdb, err := config.ConnectRedis(ctx, cfg.Redis, 2)
		if err != nil {
			return err
		}
		defer rdb.Close()
		lc := cfg.Limits()
		q, err := leaky.NewRedis(rdb, cfg.Redis.KeyPrefix, leaky.WithMaxCost(max(1, lc.MaxCost)))
		if err != nil {
			return err
		}
		reasons := fleet.RedisPauseReasons(rdb, cfg.Redis.KeyPrefix)
		why, err := reasons.Reason(ctx, name)
		if err != nil {
			return err
		}
		left, err := q.Resume(ctx, name, contract)
		if err != nil {
			return err
		}
		if err := reasons.Clear(ctx, name); err != nil {
			return err
		}
		if left <= 0 {
			fmt.Fprintf(e.stdout, "%s was not paused; nothing to lift\n", name)
			return nil
		}
		log.Warn("provider pause lifted by an operator", "provider", name, "reason", why, "left", left.Round(time.Second).String(), "by", operator())
		fmt.Fprintf(e.stdout, "%s: pause (%s) lifted (%s of it were left); sends resume within max_queue_delay (%s), jobs handed back during the pause within 10s\n",
			name, why, left.Round(time.Second), contract.MaxQueueDelay)
		return nil
	}
	return c
}

// operator names who ran a command: user@host, as far as known.
func operator() string {
	who := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		who = u.Username
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		who += "@" + h
	}
	return who
}
