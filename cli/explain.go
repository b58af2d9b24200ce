package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/internal/text"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/worker"
)

func explainCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "explain",
		Short: "Say why a user's, a provider's or a job's next step is what it is, from the fleet's live state",
		Long: `Explain reads the fleet's live state from Redis (and, for a job, the dead-letter
stream) and changes nothing. Ask one question:

  --user U --channel C  the channel's per-user cap: its rule, how much of the window
                        U used, when U's next job would be allowed, and the cap's
                        denials of U this hour and over the last 24 hours; with
                        --category, the cap of that category's jobs (its own, or
                        the channel's when it has none)
  --provider P          P's contract and effective rate, its queue's depth and delay,
                        the next free send slot, a pause and why, each instance's
                        circuit breaker, and the tenants with jobs waiting
  --job ID              the job's ledger record (lease, sent, attempts, how it ended
                        unsent) and its dead letters, never its recipient or text

--json prints the answer as JSON, as the metrics port's /explain serves it.`,
		Args: cobra.NoArgs,
	}
	path := configFlag(c)
	user := c.Flags().String("user", "", "a user id (with --channel)")
	channel := c.Flags().String("channel", "", "sms, push or email (with --user)")
	category := c.Flags().String("category", "", "transactional or marketing (with --user; default: the channel's category)")
	provider := c.Flags().String("provider", "", "a provider name from the configuration")
	job := c.Flags().String("job", "", "a job id")
	asJSON := c.Flags().Bool("json", false, "print as JSON")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		q := inspect.Query{User: *user, Channel: *channel, Category: *category, Provider: *provider, Job: *job}
		if err := q.Check(); err != nil {
			return &usageError{err: err}
		}
		cfg, err := config.Load(*path, e.getenv)
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		rdb, err := config.ConnectRedis(ctx, cfg.Redis, 4)
		if err != nil {
			return err
		}
		defer rdb.Close()
		var dead *queue.DeadLetters
		if q.Job != "" {
			nc, r, err := openDeadLetters(ctx, cfg, "notifier explain")
			if err != nil {
				return err
			}
			defer nc.Close()
			dead = r
		}
		in, err := worker.NewInspector(rdb, dead, cfg)
		if err != nil {
			return err
		}
		answer, err := q.Ask(ctx, in)
		if errors.Is(err, inspect.ErrInvalid) || errors.Is(err, inspect.ErrUnknownProvider) {
			return &usageError{err: err}
		}
		if err != nil {
			return hintStream(err)
		}
		if *asJSON {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(answer)
		}
		writeExplain(e.stdout, answer)
		return nil
	}
	return c
}

// writeExplain prints an answer for a reader.
func writeExplain(w io.Writer, answer any) {
	switch a := answer.(type) {
	case inspect.UserAnswer:
		writeUser(w, a)
	case inspect.ProviderAnswer:
		writeProvider(w, a)
	case inspect.JobAnswer:
		writeJob(w, a)
	}
}

func writeUser(w io.Writer, a inspect.UserAnswer) {
	fmt.Fprintf(w, "user %s on %s (%s jobs) — %s\n", text.Printable(a.User), a.Channel, a.Category, a.At.Format("2006-01-02 15:04:05.000 UTC"))
	if !a.Capped {
		fmt.Fprintf(w, "  no per-user cap on %s: every job is allowed\n", a.Channel)
	} else {
		r := a.Rule
		mode := "on_exceed " + r.OnExceed
		if r.Mode == "shadow" {
			mode = "shadow mode: counted, not enforced"
		}
		fmt.Fprintf(w, "  cap          %d per %s (%s, %s)\n", r.Limit, inspect.FormatDuration(time.Duration(r.WindowSeconds*float64(time.Second))), r.Algorithm, mode)
		fmt.Fprintf(w, "  window       %d used, %d left\n", a.Used, a.Remaining)
		verdict := "allowed"
		switch {
		case a.Allowed:
		case r.Mode == "shadow":
			verdict = "sent, counted as a shadow denial (the cap would refuse it)"
		case r.OnExceed == "defer":
			verdict = "denied: it would wait (deferred)"
		default:
			verdict = "denied: it would be suppressed (user_limit)"
		}
		fmt.Fprintf(w, "  a job now    %s\n", verdict)
		fmt.Fprintf(w, "  next allowed %s\n", a.NextAllowed)
	}
	shadow := ""
	if a.Rule != nil && a.Rule.Mode == "shadow" {
		shadow = " (would-be: the cap is in shadow mode)"
	}
	fmt.Fprintf(w, "  denials      %d this hour, %d in the last 24 h%s\n", a.Denials.ThisHour, a.Denials.Last24h, shadow)
}

func writeProvider(w io.Writer, a inspect.ProviderAnswer) {
	c := a.Contract
	fmt.Fprintf(w, "provider %s (%s) — %s\n", a.Provider, a.Channel, a.At.Format("2006-01-02 15:04:05.000 UTC"))
	fmt.Fprintf(w, "  contract     %g %s/s, max_queue_delay %s (burst %g), headroom %.2f%%\n", c.Rate, c.Unit,
		inspect.FormatDuration(time.Duration(c.MaxQueueDelaySeconds*float64(time.Second))), c.Burst, 100*c.Headroom)
	if ad := c.Adaptive; ad != nil {
		fmt.Fprintf(w, "  adaptive     paced at %.1f/s now (min %g/s, ×%g per throttle, +%g/s per s after %s quiet)\n",
			a.EffectiveRate, ad.MinRate, ad.Decrease, ad.IncreasePerS, inspect.FormatDuration(time.Duration(ad.QuietSeconds*float64(time.Second))))
	}
	full := ""
	if a.Queue.Full {
		full = " — full: a job now waits for room"
	}
	fmt.Fprintf(w, "  queue        %.1f %s, %.3fs to drain%s\n", a.Queue.Depth, c.Unit, a.Queue.DelaySeconds, full)
	fmt.Fprintf(w, "  next slot    %s\n", a.NextFreeSlot)
	if p := a.Pause; p != nil {
		fmt.Fprintf(w, "  pause        %s, until %s (%.1fs)\n", p.Reason, p.Until.Format("15:04:05.000"), p.ForSeconds)
	} else {
		fmt.Fprintln(w, "  pause        none")
	}
	for _, q := range a.Quotas {
		fmt.Fprintf(w, "  quota        %d per %s: %d used, %d left, resets in %.0fs\n", q.Limit, q.Per, q.Used, q.Left, q.ResetsInSeconds)
	}
	if len(a.Breakers) == 0 {
		fmt.Fprintln(w, "  breakers     no live instance has called it lately")
	}
	for _, b := range a.Breakers {
		fmt.Fprintf(w, "  breaker      %-8s on %s\n", b.State, b.Instance)
	}
	if len(a.TenantsWaiting) == 0 {
		fmt.Fprintln(w, "  waiting      no jobs in the stream")
	}
	for _, t := range a.TenantsWaiting {
		fmt.Fprintf(w, "  waiting      %d jobs of tenant %s\n", t.Queued, t.Tenant)
	}
}

func writeJob(w io.Writer, a inspect.JobAnswer) {
	fmt.Fprintf(w, "job %s — %s: %s\n", a.Job, a.At.Format("2006-01-02 15:04:05.000 UTC"), a.State)
	l := a.Ledger
	switch {
	case !l.Found:
		fmt.Fprintln(w, "  ledger       no record (not claimed yet, ended before its claim, or forgotten after dedup_ttl)")
	default:
		var parts []string
		if l.Sent {
			s := "sent"
			if l.SentSeq > 0 {
				s += fmt.Sprintf(" (stream sequence %d)", l.SentSeq)
			}
			parts = append(parts, s)
		}
		if l.LastError != "" {
			parts = append(parts, fmt.Sprintf("%d failed attempts (the last: %s)", l.Attempts, l.LastError))
		} else {
			parts = append(parts, fmt.Sprintf("%d failed attempts", l.Attempts))
		}
		if l.LeaseOwner != "" && l.LeaseUntil != nil {
			parts = append(parts, fmt.Sprintf("leased to %s until %s", text.Printable(l.LeaseOwner), l.LeaseUntil.Format("15:04:05.000")))
		}
		if l.Outcome != "" {
			parts = append(parts, fmt.Sprintf("ended %s (%s)", l.Outcome, l.Reason))
		}
		fmt.Fprintf(w, "  ledger       %s; kept %s more\n", strings.Join(parts, ", "), inspect.FormatDuration(time.Duration(l.KeptForSeconds)*time.Second))
	}
	if len(a.DeadLetters) == 0 {
		fmt.Fprintln(w, "  dead letter  none")
	}
	for _, d := range a.DeadLetters {
		fmt.Fprintf(w, "  dead letter  #%d %s %s on %s: %s — %s\n", d.Seq, d.Stored.Format("2006-01-02 15:04:05"), d.Kind, d.Channel,
			text.Printable(d.Reason), text.Printable(d.Detail))
		if d.UserID != "" || d.Provider != "" || d.Tenant != "" {
			fmt.Fprintf(w, "               user %s, provider %s, tenant %s (recipient and text: notifier dead show %d)\n",
				orDash(text.Printable(d.UserID)), orDash(text.Printable(d.Provider)), orDash(text.Printable(d.Tenant)), d.Seq)
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
