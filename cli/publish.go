package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/internal/demo"
	"github.com/notifier/notifier/queue"
)

// publishFlags are the flags of `notifier publish`.
type publishFlags struct {
	// one job
	id, channel, user, to, body, title, provider string
	high                                         bool
	// every mode: the jobs' tenant ("" the default tenant) and category
	// ("" none: the channel's)
	tenant, category string
	// NDJSON
	file string
	// generated load
	count, users int
	// all
	inFlight int
	quiet    bool
	nats     string // a server URL: with no --config, no file is read
}

func publishCmd(e *env) *cobra.Command {
	f := &publishFlags{}
	c := &cobra.Command{
		Use:   "publish",
		Short: "Publish jobs: one from flags, NDJSON from --file or stdin, or a generated load",
		Long: `Publish jobs to the NOTIFY stream, each with Nats-Msg-Id set to its id so that
JetStream drops a repeated publish (within its 2-minute window).

  one job:         notifier publish --channel sms --user u42 --to +447700900123 --body "Your code is 123456"
  NDJSON:          notifier publish --file jobs.ndjson      (or --file - for stdin; one job per line)
  generated load:  notifier publish --count 10000 --users 300 --channel push

--tenant T publishes the jobs as tenant T's, on notify.jobs.<channel>.t.<T>[.high]
(in every mode; an NDJSON line with its own "tenant" keeps it).

--category C (transactional or marketing) gives the jobs that category and
publishes them on its lane, notify.jobs.<channel>[.t.<T>].<C> (in the one-job
and generated modes; an NDJSON line's own "category" picks its lane likewise).

A line of NDJSON that is not a valid job is reported with its line number and
skipped. At the end it prints how many were published, how many JetStream
reported as duplicates, and how many failed.`,
		Args: cobra.NoArgs,
	}
	path := configFlag(c)
	fl := c.Flags()
	fl.StringVar(&f.nats, "nats", "", "NATS server URL, in place of the configuration's nats.url; without --config no file is read (notifier dev prints its URL)")
	fl.StringVar(&f.id, "id", "", "job id (default: generated)")
	fl.StringVar(&f.channel, "channel", "", "sms, push or email")
	fl.StringVar(&f.user, "user", "", "recipient user id")
	fl.StringVar(&f.to, "to", "", "phone number (E.164), device token or email address")
	fl.StringVar(&f.body, "body", "", "message text")
	fl.StringVar(&f.title, "title", "", "push title or email subject")
	fl.StringVar(&f.provider, "provider", "", "provider name (default: the channel's default)")
	fl.BoolVar(&f.high, "high", false, "publish on the priority lane (notify.jobs.<channel>.high)")
	fl.StringVar(&f.tenant, "tenant", "", "the jobs' tenant (default: the default tenant); an NDJSON line's own tenant is kept")
	fl.StringVar(&f.category, "category", "", "the jobs' category, transactional or marketing (default: none, the channel's), on its lane")
	fl.StringVar(&f.file, "file", "", "NDJSON file of jobs, one per line; - for stdin")
	fl.IntVar(&f.count, "count", 0, "generate this many jobs (with --users and --channel)")
	fl.IntVar(&f.users, "users", 100, "generated load: spread the jobs over this many users")
	fl.IntVar(&f.inFlight, "in-flight", 512, "publishes awaiting their acknowledgement at once")
	fl.BoolVar(&f.quiet, "quiet", false, "no progress bar")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		mode, err := f.mode()
		if err != nil {
			return &usageError{err: err}
		}
		var cfg config.Config
		if f.nats != "" && !cmd.Flags().Changed("config") {
			cfg, err = config.NATSOnly(f.nats, e.getenv)
		} else {
			cfg, err = config.Load(*path, e.getenv)
			if f.nats != "" {
				cfg.NATS.URL = f.nats
			}
		}
		if err != nil {
			return err
		}
		return publish(cmd.Context(), cfg, f, mode, e)
	}
	return c
}

type publishMode int

const (
	publishOne publishMode = iota
	publishFile
	publishLoad
)

// maxInFlightPublishes bounds --in-flight: each publish awaiting its
// acknowledgement holds a place in the batch's buffers.
const maxInFlightPublishes = 65536

// mode checks that exactly one way of publishing was asked for, and the
// flags all modes share.
func (f *publishFlags) mode() (publishMode, error) {
	if f.tenant != "" && !queue.ValidTenant(f.tenant) {
		return 0, fmt.Errorf("--tenant must be 1 to %d characters of A-Z a-z 0-9 . _ - (leave it out for the default tenant), got %q",
			queue.MaxTenantLen, f.tenant)
	}
	if f.category != "" && !queue.ValidCategory(queue.Category(f.category)) {
		return 0, fmt.Errorf("--category must be transactional or marketing, got %q", f.category)
	}
	if f.inFlight < 1 || f.inFlight > maxInFlightPublishes {
		return 0, fmt.Errorf("--in-flight must be from 1 to %d, got %d", maxInFlightPublishes, f.inFlight)
	}
	if f.category == string(queue.Marketing) && f.high {
		return 0, errors.New("--category marketing and --high do not go together: the priority lane is for transactional jobs")
	}
	one := f.to != "" || f.body != "" || f.user != ""
	n := 0
	for _, b := range []bool{one, f.file != "", f.count > 0} {
		if b {
			n++
		}
	}
	switch {
	case n > 1:
		return 0, errors.New("give one of: a job's flags (--channel --user --to --body), --file, or --count")
	case f.file != "":
		if f.category != "" {
			return 0, errors.New("--category is for one job or --count: a --file line names its own category (its \"category\" field)")
		}
		return publishFile, nil
	case f.count > 0:
		if !queue.IsChannel(f.channel) {
			return 0, fmt.Errorf("--count needs --channel sms, push or email, got %q", f.channel)
		}
		if f.users < 1 {
			return 0, fmt.Errorf("--users must be at least 1, got %d", f.users)
		}
		return publishLoad, nil
	case one:
		return publishOne, nil
	}
	return 0, errors.New("nothing to publish: give a job's flags (--channel --user --to --body), --file, or --count")
}

// publishSummary counts what a publish did.
type publishSummary struct {
	Published, Duplicates, Failed, Skipped int
}

func publish(ctx context.Context, cfg config.Config, f *publishFlags, mode publishMode, e *env) error {
	nc, js, err := config.ConnectJetStream(ctx, cfg, "notifier publish", true)
	if err != nil {
		return err
	}
	defer nc.Close()
	pub := queue.NewPublisher(js, queue.WithFairLanes(cfg.Tenants.Lanes))

	if mode == publishOne {
		j := &queue.Job{ID: f.id, UserID: f.user, Channel: f.channel, To: f.to, Body: f.body, Title: f.title, Provider: f.provider,
			Tenant: f.tenant, Category: queue.Category(f.category), CreatedAt: time.Now().UTC()}
		if j.ID == "" {
			j.ID = nats.NewInbox()[len("_INBOX."):]
		}
		if err := j.Validate(); err != nil {
			return &usageError{err: fmt.Errorf("job: %w", err)}
		}
		dup, err := pub.Publish(ctx, j, f.high)
		if err != nil {
			return err
		}
		s := publishSummary{Published: 1}
		if dup {
			s = publishSummary{Duplicates: 1}
		}
		fmt.Fprintf(e.stdout, "job %s: ", j.ID)
		if err := s.print(e.stdout); err != nil {
			return err
		}
		return s.nothingPublished()
	}

	batch := pub.NewBatch(f.inFlight, 0)
	var s publishSummary
	// Progress: a bar redrawn in place on a terminal; elsewhere (a pipe,
	// a file, CI's log) a plain line at each quarter of a generated load
	// of 1,000 jobs or more, and nothing for NDJSON.
	var bar *progressbar.ProgressBar
	var milestones *milestoneWriter
	newBar := func(max int, what string) {
		switch {
		case f.quiet:
		case isTerminal(e.stderr):
			bar = newProgressBar(e.stderr, max, what, termWidth(e.stderr, e.getenv))
		case max >= 1000:
			milestones = &milestoneWriter{w: e.stderr, what: what, total: max}
		}
	}
	add := func() {
		switch {
		case bar != nil:
			_ = bar.Add(1)
		case milestones != nil:
			milestones.add()
		}
	}

	switch mode {
	case publishLoad:
		newBar(f.count, "publishing")
		// Unique to this run: two loads started in the same second must
		// not share ids (JetStream would drop the second as duplicates).
		run := time.Now().UTC().Format("20060102T150405") + "-" + nats.NewInbox()[len(nats.NewInbox())-6:]
		for i := 0; i < f.count; i++ {
			j := demo.LoadJob(run, i, f.channel, f.users, f.provider)
			j.Tenant, j.Category = f.tenant, queue.Category(f.category)
			if err := batch.Publish(ctx, j, f.high); err != nil {
				return err
			}
			add()
		}
	case publishFile:
		in := e.stdin
		if f.file != "-" {
			file, err := os.Open(f.file)
			if err != nil {
				return &usageError{err: fmt.Errorf("--file: %w", err)}
			}
			defer file.Close()
			in = file
			if st, err := file.Stat(); err == nil && st.Size() > 1<<20 {
				newBar(-1, "publishing")
			}
		}
		s.Skipped, err = batch.PublishNDJSON(ctx, in, queue.NDJSON{High: f.high, Tenant: f.tenant, Published: add,
			Skipped: func(line int, why string) { fmt.Fprintf(e.stderr, "line %d: %s; line skipped\n", line, why) }})
		if err != nil {
			return err
		}
	}
	res, werr := batch.Wait(ctx)
	if bar != nil {
		_ = bar.Finish()
	}
	s.Published, s.Duplicates, s.Failed = res.Stored, res.Duplicates, res.Failed+res.Pending
	if err := s.print(e.stdout); err != nil {
		return err
	}
	if werr != nil {
		return werr
	}
	if res.Err != nil {
		return fmt.Errorf("%d jobs not published; first error: %w", s.Failed, res.Err)
	}
	return s.nothingPublished()
}

// newProgressBar is publish's bar on a terminal width columns wide: the
// bar takes what its description, percentage, count, rate and time left
// leave (at least 10 columns); a narrow terminal loses the time left, then
// the rate, then its description.
func newProgressBar(w io.Writer, total int, what string, width int) *progressbar.ProgressBar {
	width-- // a line as wide as the terminal wraps on some, and \r redraws only its end
	if width < len(what)+barCountText+10 {
		what = ""
	}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionSetItsString("jobs"),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	}
	text := len(what) + barCountText
	switch {
	case width >= len(what)+barCountText+barRateText+barTimeText+10:
		text += barRateText + barTimeText
		opts = append(opts, progressbar.OptionShowIts())
	case width >= len(what)+barCountText+barRateText+10:
		text += barRateText
		opts = append(opts, progressbar.OptionShowIts(), progressbar.OptionSetPredictTime(false))
	default:
		opts = append(opts, progressbar.OptionSetPredictTime(false))
	}
	opts = append(opts, progressbar.OptionSetWidth(min(max(width-text, 10), 40)))
	return progressbar.NewOptions(total, opts...)
}

// The columns a bar's line takes besides its description and the bar, at
// most: " 100% |", "| ", "(1000000/1000000)" and a space; the rate,
// ", 12345678 jobs/s"; the time spent and left, " [10m0s:20h55m23s]".
const (
	barCountText = 27
	barRateText  = 17
	barTimeText  = 18
)

// milestoneWriter prints a plain line at each quarter of total: progress
// where a redrawn bar would leave a mess (a pipe, a log).
type milestoneWriter struct {
	w     io.Writer
	what  string
	total int
	n     int
}

func (m *milestoneWriter) add() {
	m.n++
	if m.n%max(1, m.total/4) == 0 && m.n < m.total {
		fmt.Fprintf(m.w, "%s: %d of %d jobs (%d%%)\n", m.what, m.n, m.total, 100*m.n/m.total)
	}
}

// nothingPublished is the error of a publish that stored no job at all (so
// a script notices), or nil.
func (s publishSummary) nothingPublished() error {
	switch {
	case s.Published > 0:
		return nil
	case s.Duplicates > 0:
		return fmt.Errorf("nothing was published: %d jobs were duplicates of ids JetStream already holds (within its 2-minute window)", s.Duplicates)
	case s.Skipped > 0:
		return fmt.Errorf("nothing was published: every job line was invalid")
	}
	return errors.New("nothing was published: no job given")
}

func (s publishSummary) print(w io.Writer) error {
	line := fmt.Sprintf("published %d, duplicates %d (dropped by JetStream), failed %d", s.Published, s.Duplicates, s.Failed)
	if s.Skipped > 0 {
		line += fmt.Sprintf(", skipped %d invalid lines", s.Skipped)
	}
	_, err := fmt.Fprintln(w, line)
	return err
}
