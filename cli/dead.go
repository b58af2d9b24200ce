package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/internal/text"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/queue"
)

// confirmAbove is the largest selection replay sends without asking.
const confirmAbove = 20

// listDetailRunes caps the detail column of `dead list`.
const listDetailRunes = 60

func deadCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "dead",
		Short: "List, show and replay dead-lettered and suppressed jobs",
		Long: `Jobs that were not sent wait in the dead-letter stream (nats.dead_stream, NOTIFY_DEAD)
for 7 days: failed ones on notify.dead.<channel>, jobs dropped on purpose on
notify.suppressed.<channel>, each with the reason (Notifier-Reason) and a
one-line detail (Notifier-Detail).

  notifier dead list   [filters] [--json]            what is there, and why
  notifier dead show   <seq|job-id> [--reveal]       one dead letter: headers and the job
  notifier dead replay [filters] [--dry-run] [--yes] [--keep]
                                                     send them again through NOTIFY

Filters: --kind dead|suppressed|all, --reason R, --channel C, --since 2h|7d|RFC3339,
--id JOB-ID, --user USER-ID, --tenant T, --limit N.`,
	}
	c.AddCommand(deadListCmd(e), deadShowCmd(e), deadReplayCmd(e))
	return c
}

// deadFilterFlags are the selection flags shared by list and replay.
type deadFilterFlags struct {
	kind, reason, channel, since, id, user, tenant string
	limit                                          int
}

func (f *deadFilterFlags) add(c *cobra.Command, kind string, limit int, limitHelp string) {
	fl := c.Flags()
	fl.StringVar(&f.kind, "kind", kind, "dead (failed), suppressed (dropped on purpose) or all")
	fl.StringVar(&f.reason, "reason", "", "only this Notifier-Reason (invalid, unknown_provider, rejected, max_attempts, user_limit, expired)")
	fl.StringVar(&f.channel, "channel", "", "only this channel (sms, push, email)")
	fl.StringVar(&f.since, "since", "", "only those stored since: a duration back from now (90m, 2h, 7d) or an RFC 3339 time")
	fl.StringVar(&f.id, "id", "", "only this job id")
	fl.StringVar(&f.user, "user", "", "only this user's jobs (user_id)")
	fl.StringVar(&f.tenant, "tenant", "", "only this tenant's jobs")
	fl.IntVar(&f.limit, "limit", limit, limitHelp)
}

// filter turns the flags into a queue.DeadFilter; a bad flag is a
// *usageError.
func (f *deadFilterFlags) filter(now time.Time) (queue.DeadFilter, error) {
	df := queue.DeadFilter{Reason: f.reason, Channel: f.channel, JobID: f.id, UserID: f.user, Tenant: f.tenant, Limit: f.limit}
	if f.tenant != "" && !queue.ValidTenant(f.tenant) {
		return df, &usageError{err: fmt.Errorf("--tenant: a tenant is 1 to %d of A-Z a-z 0-9 . _ -", queue.MaxTenantLen)}
	}
	switch f.kind {
	case "dead":
		df.Kind = queue.Dead
	case "suppressed":
		df.Kind = queue.Suppressed
	case "all", "":
	default:
		return df, &usageError{err: fmt.Errorf("--kind: %q is not one of dead, suppressed, all", f.kind)}
	}
	if f.since != "" {
		t, err := parseSince(f.since, now)
		if err != nil {
			return df, &usageError{err: fmt.Errorf("--since: %w", err)}
		}
		df.Since = t
	}
	if err := df.Validate(); err != nil {
		return df, &usageError{err: fmt.Errorf("filters: %w", err)}
	}
	return df, nil
}

var daysPattern = regexp.MustCompile(`^([0-9]{1,4})d$`)

// parseSince reads --since: a positive Go duration (90m, 2h, 1h30m) or a
// number of days (7d) back from now, or an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if m := daysPattern.FindStringSubmatch(s); m != nil {
		n, _ := strconv.Atoi(m[1])
		if n == 0 {
			return time.Time{}, fmt.Errorf("%q: must be more than 0 days", s)
		}
		return now.Add(-time.Duration(n) * 24 * time.Hour), nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("%q: a duration must be positive", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither a duration (90m, 2h, 7d) nor an RFC 3339 time (2026-01-02T15:04:05Z)", s)
	}
	switch {
	case t.After(time.Unix(0, math.MaxInt64)):
		// JetStream's start time is int64 nanoseconds: one past 2262 wrapped
		// round and selected every letter (a replay of all of them). One
		// ahead of now before that selects none, as it says.
		return time.Time{}, fmt.Errorf("%q is past 2262-04-11, the latest start a stream can be read from", s)
	case t.Before(time.Unix(0, 0)):
		// Before any letter, and before what a start time can say
		// (int64 nanoseconds wrapped round and selected none): every letter.
		return time.Time{}, nil
	}
	return t, nil
}

// openDeadLetters loads the configuration as loadConfig does and connects
// to NATS as name; the caller closes the connection.
func openDeadLetters(cmd *cobra.Command, path string, e *env, name string) (config.Config, *nats.Conn, *queue.DeadLetters, error) {
	cfg, err := loadConfig(cmd, path, e)
	if err != nil {
		return cfg, nil, nil, err
	}
	nc, js, err := config.ConnectJetStream(cmd.Context(), cfg, name, false)
	if err != nil {
		return cfg, nil, nil, err
	}
	return cfg, nc, queue.NewDeadLetters(js, cfg.NATS), nil
}

// hintStream adds what to do about a missing stream.
func hintStream(err error) error {
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("%w (the streams are created by `notifier run`)", err)
	}
	return err
}

// ---- list ----

func deadListCmd(e *env) *cobra.Command {
	f := &deadFilterFlags{}
	var asJSON bool
	c := &cobra.Command{
		Use:   "list",
		Short: "List dead-lettered and suppressed jobs, oldest first",
		Long: `List the dead letters the filters select, oldest first: the sequence in the
dead-letter stream, when it was stored, kind, channel, reason, job id and the
detail (cut to 60 characters; --json gives it whole). It never prints a job's
recipient, body, title or data: use 'notifier dead show' for one job.`,
		Args: cobra.NoArgs,
	}
	path := configFlag(c)
	f.add(c, "all", 100, "print at most this many (0: all)")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array (one object per dead letter)")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		df, err := f.filter(time.Now())
		if err != nil {
			return err
		}
		_, nc, r, err := openDeadLetters(cmd, *path, e, "notifier dead list")
		if err != nil {
			return err
		}
		defer nc.Close()
		letters, more, err := r.List(cmd.Context(), df)
		if err != nil {
			return hintStream(err)
		}
		if asJSON {
			if err := writeDeadJSON(e.stdout, letters); err != nil {
				return err
			}
			if more {
				fmt.Fprintf(e.stderr, "more dead letters match than the %d printed: raise --limit or narrow with --since\n", df.Limit)
			}
			return nil
		}
		return writeDeadTable(e.stdout, letters, more, df.Limit)
	}
	return c
}

func writeDeadJSON(w io.Writer, letters []*queue.DeadLetter) error {
	rows := make([]inspect.DeadRow, 0, len(letters))
	for _, d := range letters {
		rows = append(rows, inspect.RowOf(d))
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rows)
}

func writeDeadTable(w io.Writer, letters []*queue.DeadLetter, more bool, limit int) error {
	t := newDeadTable(w)
	for _, d := range letters {
		t.row(d)
	}
	if err := t.end(); err != nil {
		return err
	}
	if more {
		fmt.Fprintf(w, "more match than the %d printed: raise --limit or narrow with --since\n", limit)
	}
	return nil
}

// deadTable prints dead letters as they come, a row each, in blocks of
// deadTableBlock rows aligned together: a table of any length in constant
// memory (a dry run of a replay of a million letters).
type deadTable struct {
	w     io.Writer
	tw    *tabwriter.Writer
	n     int
	kinds map[queue.Outcome]int
}

const deadTableBlock = 1000

func newDeadTable(w io.Writer) *deadTable {
	return &deadTable{w: w, tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0), kinds: map[queue.Outcome]int{}}
}

func (t *deadTable) row(d *queue.DeadLetter) {
	if t.n == 0 {
		fmt.Fprintln(t.tw, "SEQ\tSTORED\tKIND\tCHANNEL\tREASON\tJOB ID\tDETAIL")
	}
	t.n++
	t.kinds[d.Kind]++
	id := d.JobID
	if id == "" {
		id = "-"
	}
	fmt.Fprintf(t.tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Seq, d.Stored.UTC().Format(time.RFC3339), d.Kind,
		text.Printable(d.Channel), text.Printable(d.Reason), id, text.Fit(text.Printable(d.Detail), listDetailRunes))
	if t.n%deadTableBlock == 0 {
		_ = t.tw.Flush()
	}
}

// end flushes the table and prints its count ("no dead letters match"
// when it has no row).
func (t *deadTable) end() error {
	if t.n == 0 {
		_, err := fmt.Fprintln(t.w, "no dead letters match")
		return err
	}
	if err := t.tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(t.w, "%d dead letters (%d dead, %d suppressed)\n", t.n, t.kinds[queue.Dead], t.kinds[queue.Suppressed])
	return err
}

// ---- show ----

func deadShowCmd(e *env) *cobra.Command {
	var reveal, asJSON, byID bool
	c := &cobra.Command{
		Use:   "show <seq|job-id>",
		Short: "Show one dead letter: its headers and the job, recipient masked",
		Long: `Show the dead letter at a sequence of the dead-letter stream, or every dead
letter of a job id (a job dead-lettered again after a replay has several): its
headers and the job, with the recipient masked. The body, title, data values
and unknown fields are shown only with --reveal; the recipient is masked even
then. An argument of digits only is read as a sequence first; --id reads it as
a job id.`,
		Args: cobra.ExactArgs(1),
	}
	path := configFlag(c)
	c.Flags().BoolVar(&reveal, "reveal", false, "show the body, title, data values and unknown fields (the recipient stays masked)")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().BoolVar(&byID, "id", false, "read the argument as a job id, even if it is all digits")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		cfg, nc, r, err := openDeadLetters(cmd, *path, e, "notifier dead show")
		if err != nil {
			return err
		}
		defer nc.Close()
		ctx := cmd.Context()
		letters, err := inspect.FindDead(ctx, r, args[0], byID)
		if err != nil {
			return hintStream(err)
		}
		if asJSON {
			views := make([]inspect.DeadView, 0, len(letters))
			for _, d := range letters {
				views = append(views, inspect.ViewOf(d, reveal))
			}
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(views)
		}
		for i, d := range letters {
			if i > 0 {
				fmt.Fprintln(e.stdout)
			}
			writeDeadShow(e.stdout, inspect.ViewOf(d, reveal), cfg.NATS.DeadStream, reveal)
		}
		return nil
	}
	return c
}

func writeDeadShow(w io.Writer, v inspect.DeadView, stream string, reveal bool) {
	id := v.JobID
	if id == "" {
		id = "- (none valid)"
	}
	fmt.Fprintf(w, "dead letter %d in %s, stored %s\n", v.Seq, stream, v.Stored.Format(time.RFC3339Nano))
	fmt.Fprintf(w, "  kind:      %s, channel %s\n", kindWords(v.Kind), v.Channel)
	fmt.Fprintf(w, "  reason:    %s\n", v.Reason)
	fmt.Fprintf(w, "  detail:    %s\n", v.Detail)
	fmt.Fprintf(w, "  job id:    %s\n", id)
	fmt.Fprintf(w, "  published: %s (a replay publishes to %s)\n", v.JobSubject, v.Replay)
	fmt.Fprintln(w, "headers")
	keys := make([]string, 0, len(v.Headers))
	for k := range v.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  %s: %s\n", k, v.Headers[k])
	}
	switch {
	case v.Job == nil && reveal:
		fmt.Fprintf(w, "job: not a JSON object (%d bytes); raw bytes as stored (--reveal: nothing could be masked):\n  %s\n", v.NotJSON, v.Raw)
		return
	case v.Job == nil:
		fmt.Fprintf(w, "job: not a JSON object (%d bytes); --reveal shows the raw bytes\n", v.NotJSON)
		return
	case reveal:
		fmt.Fprintln(w, "job (recipient masked; body, title, data and unknown fields shown: --reveal)")
	default:
		fmt.Fprintln(w, "job (recipient masked; body, title, data values and unknown fields hidden: --reveal shows them)")
	}
	for _, k := range v.Keys() {
		x := v.Job[k]
		var s string
		switch x := x.(type) {
		case string:
			s = x
		default:
			b, _ := json.Marshal(x)
			s = string(b)
		}
		fmt.Fprintf(w, "  %-11s %s\n", k+":", text.Printable(s))
	}
}

func kindWords(kind string) string {
	switch queue.Outcome(kind) {
	case queue.Dead:
		return "dead (failed)"
	case queue.Suppressed:
		return "suppressed (dropped on purpose)"
	}
	return "unknown"
}

// ---- replay ----

// replayFlags are the flags of `dead replay` beyond the filters.
type replayFlags struct {
	dryRun, yes, keep, includeInvalid, includeExpired bool
}

func deadReplayCmd(e *env) *cobra.Command {
	f := &deadFilterFlags{}
	rf := &replayFlags{}
	c := &cobra.Command{
		Use:   "replay",
		Short: "Send dead-lettered jobs again: republish them to NOTIFY",
		Long: `Replay republishes the selected dead letters' jobs to the NOTIFY stream, on the
subject they were first published on, with their bytes (and so their job id)
unchanged, a Nats-Msg-Id of <job-id>:replay:<unix-ns> (NOTIFY drops a repeated
id within 2 minutes) and the header Notifier-Replayed: <time>; the dispatcher
counts them in notifier_replays_total{channel}.

Before a job is republished its ledger record is reset, so that its earlier
failures do not count against retry.max_attempts. A job the ledger says was
sent is never republished: it is reported as already sent and its dead letter
kept. After a successful publish the dead letter is deleted (unless --keep), so
the same replay run twice replays nothing the second time.

By default only failed jobs (--kind dead) are replayed. Jobs dead for reason
invalid and jobs suppressed for reason expired are skipped (they could only
end the same way again) unless --include-invalid / --include-expired.
More than 20 jobs ask for confirmation on stdin unless --yes. --dry-run
prints what would be replayed and changes nothing.`,
		Args: cobra.NoArgs,
	}
	path := configFlag(c)
	f.add(c, "dead", 0, "replay at most this many, the oldest first (0: all)")
	fl := c.Flags()
	fl.BoolVar(&rf.dryRun, "dry-run", false, "print what would be replayed; change nothing")
	fl.BoolVar(&rf.yes, "yes", false, "do not ask for confirmation")
	fl.BoolVar(&rf.keep, "keep", false, "keep the dead letters after replaying them")
	fl.BoolVar(&rf.includeInvalid, "include-invalid", false, "replay jobs dead for reason invalid too")
	fl.BoolVar(&rf.includeExpired, "include-expired", false, "replay jobs suppressed for reason expired too")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		df, err := f.filter(time.Now())
		if err != nil {
			return err
		}
		cfg, nc, r, err := openDeadLetters(cmd, *path, e, "notifier dead replay")
		if err != nil {
			return err
		}
		defer nc.Close()
		ctx := cmd.Context()
		rp := &replayer{dead: r, flags: *rf, now: time.Now, in: e.stdin, out: e.stdout}
		if !rf.dryRun {
			rdb, err := config.ConnectRedis(ctx, cfg.Redis, 4)
			if err != nil {
				return err
			}
			defer rdb.Close()
			rp.ledger = ledger.NewRedis(rdb, cfg.Redis.KeyPrefix, cfg.DedupTTL)
		}
		_, err = rp.run(ctx, df)
		return hintStream(err)
	}
	return c
}

// replayer runs one `dead replay`: inspect plans and replays; this asks
// for confirmation and prints.
type replayer struct {
	dead   *queue.DeadLetters
	ledger inspect.ReplayLedger // nil for a dry run
	flags  replayFlags
	now    func() time.Time
	in     io.Reader
	out    io.Writer
}

func printReplaySummary(w io.Writer, s inspect.ReplaySummary, dryRun bool) {
	if dryRun {
		fmt.Fprintf(w, "dry run: would replay %d, skip %d invalid, skip %d expired; nothing changed\n",
			s.Replayed, s.SkippedInvalid, s.SkippedExpired)
		fmt.Fprintln(w, "(a job the ledger says was sent is found only by a real replay, and is never resent)")
	} else {
		fmt.Fprintf(w, "replayed %d, already sent %d (not resent), skipped invalid %d, skipped expired %d, failed %d\n",
			s.Replayed, s.AlreadySent, s.SkippedInvalid, s.SkippedExpired, s.Failed)
	}
	if s.SkippedInvalid > 0 {
		fmt.Fprintf(w, "  %d invalid jobs skipped: they would only be dead-lettered again (--include-invalid to replay them anyway)\n", s.SkippedInvalid)
	}
	if s.SkippedExpired > 0 {
		fmt.Fprintf(w, "  %d expired jobs skipped: they would only be suppressed again (--include-expired to replay them anyway)\n", s.SkippedExpired)
	}
	if s.NotDeleted > 0 {
		fmt.Fprintf(w, "  %d replayed jobs kept their dead letter (the delete failed); a second replay finds them already sent or sends them once\n", s.NotDeleted)
	}
}

// errNotConfirmed is a replay refused at the prompt.
var errNotConfirmed = errors.New("replay not confirmed: nothing replayed")

func (rp *replayer) run(ctx context.Context, f queue.DeadFilter) (inspect.ReplaySummary, error) {
	o := inspect.ReplayOptions{Keep: rp.flags.keep, IncludeInvalid: rp.flags.includeInvalid, IncludeExpired: rp.flags.includeExpired, Now: rp.now}
	// A dry run prints the letters as the plan reads them; a replay reads
	// them again as it goes: neither holds them (a million letters would
	// be a gigabyte).
	var each func(*queue.DeadLetter)
	var table *deadTable
	if rp.flags.dryRun {
		each = func(d *queue.DeadLetter) {
			if table == nil {
				fmt.Fprintln(rp.out, "would replay:")
				table = newDeadTable(rp.out)
			}
			table.row(d)
		}
	}
	plan, err := inspect.PlanReplay(ctx, rp.dead, f, o, each)
	if table != nil {
		if terr := table.end(); err == nil {
			err = terr
		}
	}
	if err != nil {
		return plan.Summary, err
	}
	if rp.flags.dryRun {
		printReplaySummary(rp.out, plan.Summary, true)
		return plan.Summary, nil
	}
	if plan.Summary.Replayed > confirmAbove && !rp.flags.yes {
		fmt.Fprintf(rp.out, "replay %d jobs? [y/N] ", plan.Summary.Replayed)
		line, _ := bufio.NewReader(rp.in).ReadString('\n')
		fmt.Fprintln(rp.out)
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			return plan.Summary, errNotConfirmed
		}
	}
	s, err := inspect.Replay(ctx, rp.dead, rp.ledger, plan, o, func(r inspect.ReplayResult) { printReplayed(rp.out, r) })
	printReplaySummary(rp.out, s, false)
	return s, err
}

// printReplayed is the line of one dead letter replayed.
func printReplayed(w io.Writer, r inspect.ReplayResult) {
	label := r.Letter.JobID
	if label == "" {
		label = "(no valid id)"
	}
	switch r.Outcome {
	case inspect.Failed:
		fmt.Fprintf(w, "failed        seq %d job %s: %v\n", r.Letter.Seq, label, r.Err)
	case inspect.AlreadySent:
		fmt.Fprintf(w, "already sent  seq %d job %s: the ledger says it was sent; not resent, dead letter kept\n", r.Letter.Seq, label)
	case inspect.NotDeleted:
		fmt.Fprintf(w, "replayed      seq %d job %s to %s, but the dead letter was not deleted: %v\n", r.Letter.Seq, label, r.Subject, r.Err)
	case inspect.Replayed:
		if r.Kept {
			fmt.Fprintf(w, "replayed      seq %d job %s to %s (dead letter kept)\n", r.Letter.Seq, label, r.Subject)
		} else {
			fmt.Fprintf(w, "replayed      seq %d job %s to %s\n", r.Letter.Seq, label, r.Subject)
		}
	}
}
