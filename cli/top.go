package cli

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/notifier/notifier/gateway"
	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/userlimit"
)

func topCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "top",
		Short: "List the users hitting their per-user cap most (--gateway: the API keys rejected most)",
		Long: `Top lists the users whose jobs the per-user cap of a channel denied most often over a
window (whole UTC hours, at most 8 days). A user at the top all the time is either
abusing the service or has outgrown their plan; both are worth knowing. The counts
live in Redis, never in a metric label.

With --shadow it lists the denials a cap in shadow mode (user_limits.<channel>.mode:
shadow) would have made: the jobs it let through that it would have refused. Try a
new cap that way on live traffic, read top --shadow, then enforce it with a hot reload.

With --gateway it lists instead the gateway's API keys by requests rejected over the
window: answered 429 over the key's limit, and, as "unauthenticated", requests
without a valid key (401, and 429 over gateway.auth_failures). Every gateway instance
adds its counts to Redis every 5 s.`,
		Args: cobra.NoArgs,
	}
	path := configFlag(c)
	channel := c.Flags().String("channel", "", "sms, push or email (required)")
	window := c.Flags().Duration("window", 24*time.Hour, "how far back, in whole hours (at most 192h)")
	limit := c.Flags().Int("limit", 20, "how many users")
	asJSON := c.Flags().Bool("json", false, "print as JSON")
	gw := c.Flags().Bool("gateway", false, "the gateway's API keys rejected most, instead of users")
	shadow := c.Flags().Bool("shadow", false, "the denials a cap in shadow mode would have made (it let the jobs through)")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if *gw {
			if *channel != "" || *shadow {
				return &usageError{err: fmt.Errorf("--channel and --shadow are for the per-user cap, not --gateway")}
			}
			return topGateway(cmd, e, *path, *window, *limit, *asJSON)
		}
		if *channel == "" {
			return &usageError{err: fmt.Errorf("--channel is required: sms, push or email")}
		}
		if !queue.IsChannel(*channel) {
			return &usageError{err: fmt.Errorf("--channel must be sms, push or email, got %q", *channel)}
		}
		// Whole hours: the counts are per UTC hour, and 90m read one of them
		// while the header said "last 1h30m".
		if *window < time.Hour || *window > limits.TopRetention || *window%time.Hour != 0 || *limit < 1 {
			return &usageError{err: fmt.Errorf("--window must be whole hours from 1h to %s and --limit at least 1", inspect.FormatDuration(limits.TopRetention))}
		}
		// The read sizes itself by 10 × --limit and 4 × --limit, which
		// wrapped past the largest int (a panic, or "nobody"); an hour keeps
		// limits.TopMaxUsers users, so a longer top has nothing to rank.
		if *limit > limits.TopMaxUsers {
			return &usageError{err: fmt.Errorf("--limit must be from 1 to %d (an hour keeps the %d users denied most), got %d", limits.TopMaxUsers, limits.TopMaxUsers, *limit)}
		}
		cfg, rdb, err := loadRedis(cmd, *path, e)
		if err != nil {
			return err
		}
		defer rdb.Close()
		ctx := cmd.Context()
		top := limits.NewDenials(rdb, cfg.Redis.KeyPrefix).Top
		if *shadow {
			top = limits.NewDenials(rdb, cfg.Redis.KeyPrefix).TopShadow
		}
		rows, err := top(ctx, *channel, *window, *limit)
		if err != nil {
			return err
		}
		if *asJSON {
			type row struct {
				User    string `json:"user"`
				Denials int64  `json:"denials"`
			}
			out := []row{}
			for _, r := range rows {
				out = append(out, row{r.User, r.Denials})
			}
			return json.NewEncoder(e.stdout).Encode(out)
		}
		caps := cfg.Caps()
		rule, capped, _ := caps.CapFor(*channel, caps.ChannelCategory(*channel), "")
		what := "users denied by the " + *channel + " cap"
		if *shadow {
			what = "users the " + *channel + " cap in shadow mode would have denied (all sent)"
		}
		switch {
		case capped && *shadow && rule.Mode != userlimit.Shadow:
			fmt.Fprintf(e.stdout, "%s (the cap is enforced now: %d per %s), last %s\n", what, rule.Limit, inspect.FormatDuration(rule.Window), inspect.FormatDuration(*window))
		case capped:
			fmt.Fprintf(e.stdout, "%s (%d per %s), last %s\n", what, rule.Limit, inspect.FormatDuration(rule.Window), inspect.FormatDuration(*window))
		default:
			fmt.Fprintf(e.stdout, "%s (no cap configured now), last %s\n", what, inspect.FormatDuration(*window))
		}
		if len(rows) == 0 {
			fmt.Fprintln(e.stdout, "  nobody")
		}
		for i, r := range rows {
			fmt.Fprintf(e.stdout, "%4d. %-40s %8d\n", i+1, r.User, r.Denials)
		}
		return nil
	}
	return c
}

// topGateway is `notifier top --gateway`: the API keys with the most
// rejected requests over window, from the counts gateways keep in Redis.
func topGateway(cmd *cobra.Command, e *env, path string, window time.Duration, limit int, asJSON bool) error {
	if window < time.Hour || window > gateway.RejectionRetention || window%time.Hour != 0 || limit < 1 {
		return &usageError{err: fmt.Errorf("--window must be whole hours from 1h to %s and --limit at least 1", inspect.FormatDuration(gateway.RejectionRetention))}
	}
	cfg, rdb, err := loadRedis(cmd, path, e)
	if err != nil {
		return err
	}
	defer rdb.Close()
	ctx := cmd.Context()
	rows, err := gateway.TopRejected(ctx, rdb, cfg.Redis.KeyPrefix, time.Now(), window, limit)
	if err != nil {
		return err
	}
	if asJSON {
		type row struct {
			Key      string `json:"key"`
			Rejected int64  `json:"rejected"`
		}
		out := []row{}
		for _, r := range rows {
			out = append(out, row{r.Key, r.Rejected})
		}
		return json.NewEncoder(e.stdout).Encode(out)
	}
	fmt.Fprintf(e.stdout, "gateway API keys by requests rejected (429 over the key's limit; unauthenticated: 401 and 429 over auth_failures), last %s\n", inspect.FormatDuration(window))
	if len(rows) == 0 {
		fmt.Fprintln(e.stdout, "  none")
	}
	limits := map[string]string{}
	if cfg.Gateway != nil {
		for _, k := range cfg.Gateway.Keys {
			limits[k.Name] = fmt.Sprintf("%g/s, burst %d", k.Rate, k.Burst)
		}
	}
	for i, r := range rows {
		fmt.Fprintf(e.stdout, "%4d. %-40s %8d  %s\n", i+1, r.Key, r.Rejected, limits[r.Key])
	}
	return nil
}
