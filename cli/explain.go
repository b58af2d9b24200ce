package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/internal/service"
	"github.com/notifier/notifier/internal/text"
	"github.com/notifier/notifier/limits/ledger"
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
  --job ID              the job's state and why: sent, under way, waiting for its send
                        slot, put off (by the per-user cap, a paused provider, a spent
                        quota...) and until when, retrying, waiting in the stream not
                        taken yet, or dead; its ledger record and dead letters, never
                        its recipient or text; --tenant T for a tenant's job (ids are
                        unique within a tenant). A job the ledger does not place is
                        looked for in the job stream: --scan messages at most

--json prints the answer as JSON, as the metrics port's /explain serves it.`,
		Args: cobra.NoArgs,
	}
	path := configFlag(c)
	user := c.Flags().String("user", "", "a user id (with --channel)")
	channel := c.Flags().String("channel", "", "sms, push or email (with --user)")
	category := c.Flags().String("category", "", "transactional or marketing (with --user; default: the channel's category)")
	provider := c.Flags().String("provider", "", "a provider name from the configuration")
	job := c.Flags().String("job", "", "a job id")
	tenant := c.Flags().String("tenant", "", "with --job: the job's tenant (a job id is unique within its tenant; default: the default tenant)")
	scan := c.Flags().Int("scan", inspect.DefaultScan, "with --job: read at most this many messages of the job stream looking for the job (0: all)")
	asJSON := c.Flags().Bool("json", false, "print as JSON")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		q := inspect.Query{User: *user, Channel: *channel, Category: *category, Provider: *provider, Job: *job, Tenant: *tenant, Scan: *scan}
		if *scan == 0 {
			q.Scan = -1 // the whole stream
		}
		if err := q.Check(); err != nil {
			return &usageError{err: err}
		}
		if *scan < 0 {
			return &usageError{err: fmt.Errorf("--scan %d: a number of messages, 0 for all", *scan)}
		}
		if c.Flags().Changed("scan") && *job == "" {
			return &usageError{err: errors.New("--scan goes with --job")}
		}
		cfg, rdb, err := loadRedis(cmd, *path, e)
		if err != nil {
			return err
		}
		defer rdb.Close()
		ctx := cmd.Context()
		var js jetstream.JetStream
		if q.Job != "" {
			nc, j, err := config.ConnectJetStream(ctx, cfg, "notifier explain", false)
			if err != nil {
				return err
			}
			defer nc.Close()
			js = j
		}
		in, err := service.NewInspector(rdb, js, cfg)
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
		hintIfNoInstance(ctx, e.stdout, rdb, cfg)
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
		case r.OnExceed == "digest":
			verdict = "denied: it would be held for the user's next digest"
		default:
			verdict = "denied: it would be suppressed (user_limit)"
		}
		fmt.Fprintf(w, "  a job now    %s\n", verdict)
		fmt.Fprintf(w, "  next allowed %s\n", a.NextAllowed)
		if a.DigestDue != nil {
			fmt.Fprintf(w, "  digest       %d held, digest due %s\n", a.Held, *a.DigestDue)
		}
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
	name := a.Job
	if a.Tenant != "" {
		name += " of tenant " + a.Tenant
	}
	fmt.Fprintf(w, "job %s — %s: %s\n", name, a.At.Format("2006-01-02 15:04:05.000 UTC"), a.State)
	if a.Why != "" {
		fmt.Fprintf(w, "  why          %s\n", whyLine(a))
	}
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
	if s := a.Stream; s != nil {
		switch {
		case s.Job != nil:
			fmt.Fprintf(w, "  stream       waiting since %s (%s) on %s, stream sequence %d\n", s.Job.Stored.UTC().Format("2006-01-02 15:04:05.000"),
				inspect.FormatDuration(a.At.Sub(s.Job.Stored).Truncate(time.Second)), s.Job.Subject, s.Job.Seq)
		case s.Complete:
			fmt.Fprintf(w, "  stream       not in the job stream (all %d messages read)\n", s.Scanned)
		default:
			fmt.Fprintf(w, "  stream       not in the first %d of %d messages of the job stream (--scan 0 reads them all)\n", s.Scanned, s.InStream)
		}
	}
	if p := a.Provider; p != nil {
		fmt.Fprintf(w, "  provider     %s\n", senderLine(p))
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

// senderLine sums up the state of the provider a waiting job waits for.
func senderLine(p *inspect.ProviderAnswer) string {
	parts := []string{p.Provider}
	if ps := p.Pause; ps != nil {
		parts = append(parts, fmt.Sprintf("paused until %s (%s)", ps.Until.Format("15:04:05.000"), ps.Reason))
	}
	q := fmt.Sprintf("queue %.1fs deep", p.Queue.DelaySeconds)
	if p.Queue.Full {
		q += ", full"
	}
	parts = append(parts, q)
	if !p.NextFreeSlot.Now {
		parts = append(parts, "next free slot in "+inspect.FormatDuration(time.Duration(p.NextFreeSlot.InSeconds*float64(time.Second)).Round(time.Millisecond)))
	}
	for _, qu := range p.Quotas {
		if qu.Left == 0 {
			parts = append(parts, fmt.Sprintf("quota of %d per %s spent, resets in %.0fs", qu.Limit, qu.Per, qu.ResetsInSeconds))
		}
	}
	open := 0
	for _, b := range p.Breakers {
		if b.State == "open" {
			open++
		}
	}
	if open > 0 {
		parts = append(parts, fmt.Sprintf("circuit open on %d of %d instances", open, len(p.Breakers)))
	}
	return strings.Join(parts, "; ")
}

// whyPhrases say what each of the dispatcher's deferral words means.
var whyPhrases = map[string]string{
	ledger.DeferUserLimit:          "put off by the per-user cap (on_exceed: defer)",
	ledger.DeferDigest:             "held for the user's next digest (on_exceed: digest)",
	ledger.DeferDigestUnpublished:  "its digest is due but could not be published yet",
	ledger.DeferCircuitOpen:        "put off: the provider's circuit breaker is open",
	ledger.DeferRecipientThrottled: "put off: the provider throttles this recipient",
	ledger.DeferQuota:              "put off: the provider's quota is spent until its next window",
	ledger.DeferProviderPaused:     "put off: the provider is paused (notifier explain --provider says why)",
	ledger.WaitSlot:                "waiting in the provider's queue for its send slot",
}

// whyLine says why a waiting job waits.
func whyLine(a inspect.JobAnswer) string {
	l := a.Ledger
	switch a.Why {
	case inspect.WhyRetry:
		return fmt.Sprintf("retrying after %d transient provider failures (the last: %s)", l.Attempts, orDash(l.LastError))
	case inspect.WhyStream:
		return "in the job stream, not taken yet: the backlog waits for the global bucket, its channel's budget and its tenant's share"
	}
	s, ok := whyPhrases[a.Why]
	if !ok {
		s = "put off (" + text.Printable(a.Why) + ")"
	}
	if l.DueAt != nil {
		if in := l.DueAt.Sub(a.At); in > 0 {
			s += fmt.Sprintf(" until %s (in %s)", l.DueAt.Format("15:04:05.000"), inspect.FormatDuration(in.Round(time.Second)))
		} else {
			s += fmt.Sprintf(" until %s: due, it waits for a worker to take it again", l.DueAt.Format("15:04:05.000"))
		}
	}
	if l.Deferrals > 1 {
		s += fmt.Sprintf("; put off %d times", l.Deferrals)
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
