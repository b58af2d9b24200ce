package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/notifier/notifier/queue"
)

// publishFlags are the flags of `notifier publish`.
type publishFlags struct {
	// one job
	id, channel, user, to, body, title, provider string
	high                                         bool
	// NDJSON
	file string
	// generated load
	count, users int
	// all
	inFlight int
	quiet    bool
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

A line of NDJSON that is not a valid job is reported with its line number and
skipped. At the end it prints how many were published, how many JetStream
reported as duplicates, and how many failed.`,
		Args: cobra.NoArgs,
	}
	path := configFlag(c)
	fl := c.Flags()
	fl.StringVar(&f.id, "id", "", "job id (default: generated)")
	fl.StringVar(&f.channel, "channel", "", "sms, push or email")
	fl.StringVar(&f.user, "user", "", "recipient user id")
	fl.StringVar(&f.to, "to", "", "phone number (E.164), device token or email address")
	fl.StringVar(&f.body, "body", "", "message text")
	fl.StringVar(&f.title, "title", "", "push title or email subject")
	fl.StringVar(&f.provider, "provider", "", "provider name (default: the channel's default)")
	fl.BoolVar(&f.high, "high", false, "publish on the priority lane (notify.jobs.<channel>.high)")
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
		cfg, err := LoadConfig(*path, e.getenv)
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

// mode checks that exactly one way of publishing was asked for.
func (f *publishFlags) mode() (publishMode, error) {
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

func publish(ctx context.Context, cfg Config, f *publishFlags, mode publishMode, e *env) error {
	nc, js, err := connectJetStream(ctx, cfg, "notifier publish", true)
	if err != nil {
		return err
	}
	defer nc.Close()
	pub := queue.NewPublisher(js)

	if mode == publishOne {
		j := &queue.Job{ID: f.id, UserID: f.user, Channel: f.channel, To: f.to, Body: f.body, Title: f.title, Provider: f.provider, CreatedAt: time.Now().UTC()}
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
		return s.print(e.stdout)
	}

	batch := pub.NewBatch(f.inFlight, 0)
	var s publishSummary
	var bar *progressbar.ProgressBar
	newBar := func(max int, what string) {
		if f.quiet {
			return
		}
		bar = progressbar.NewOptions(max,
			progressbar.OptionSetWriter(e.stderr),
			progressbar.OptionSetDescription(what),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("jobs"),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetWidth(30),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(e.stderr) }),
		)
	}
	add := func() {
		if bar != nil {
			_ = bar.Add(1)
		}
	}

	switch mode {
	case publishLoad:
		newBar(f.count, "publishing")
		run := time.Now().UTC().Format("20060102T150405")
		for i := 0; i < f.count; i++ {
			j := loadJob(run, i, f.channel, f.users, f.provider)
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
		s.Skipped, err = publishNDJSON(ctx, in, batch, f.high, e.stderr, add)
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
	return nil
}

func (s publishSummary) print(w io.Writer) error {
	line := fmt.Sprintf("published %d, duplicates %d (dropped by JetStream), failed %d", s.Published, s.Duplicates, s.Failed)
	if s.Skipped > 0 {
		line += fmt.Sprintf(", skipped %d invalid lines", s.Skipped)
	}
	_, err := fmt.Fprintln(w, line)
	return err
}

// publishNDJSON publishes one job per line of in. An invalid line is
// reported on errw with its number and skipped.
func publishNDJSON(ctx context.Context, in io.Reader, batch *queue.Batch, high bool, errw io.Writer, progress func()) (skipped int, err error) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), queue.MaxJobBytes+1024)
	line := 0
	for sc.Scan() {
		line++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 || raw[0] == '#' {
			continue
		}
		var probe struct {
			Channel string `json:"channel"`
		}
		_ = json.Unmarshal(raw, &probe)
		if !queue.IsChannel(probe.Channel) {
			fmt.Fprintf(errw, "line %d: channel: must be one of sms, push, email; line skipped\n", line)
			skipped++
			continue
		}
		j, derr := queue.Decode(queue.JobSubject(probe.Channel, high), raw)
		if derr != nil {
			fmt.Fprintf(errw, "line %d: %v; line skipped\n", line, derr)
			skipped++
			continue
		}
		if err := batch.PublishRaw(ctx, queue.JobSubject(j.Channel, high), raw, j.ID); err != nil {
			return skipped, err
		}
		progress()
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return skipped, fmt.Errorf("line %d: longer than a job may be (%d bytes)", line+1, queue.MaxJobBytes)
		}
		return skipped, fmt.Errorf("read jobs: %w", err)
	}
	return skipped, nil
}

// loadJob is job i of a generated load: ids unique to the run, users
// cycling over users, a recipient of the right shape for the channel.
func loadJob(run string, i int, channel string, users int, provider string) *queue.Job {
	u := i % users
	j := &queue.Job{
		ID:        fmt.Sprintf("load-%s-%d", run, i),
		UserID:    fmt.Sprintf("user-%d", u),
		Channel:   channel,
		Body:      fmt.Sprintf("load test message %d", i),
		Provider:  provider,
		CreatedAt: time.Now().UTC(),
	}
	j.To = syntheticRecipient(channel, u)
	if channel != "sms" {
		j.Title = "load test"
	}
	return j
}

// syntheticRecipient is a made-up recipient of user u, well formed for
// channel (generated loads, the demo, the bench): a +1555 number, a
// device-token-shaped string, an example.com address.
func syntheticRecipient(channel string, u int) string {
	switch channel {
	case "sms":
		return fmt.Sprintf("+1555%07d", u)
	case "push":
		return fmt.Sprintf("loadtoken%055d", u)
	}
	return fmt.Sprintf("user%d@example.com", u)
}
