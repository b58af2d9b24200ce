package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/inspect/statuspage"
	"github.com/notifier/notifier/internal/service"
	"github.com/notifier/notifier/internal/text"
	"github.com/notifier/notifier/queue"
)

func statusCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "status",
		Short: "Show the fleet live: each provider's contract, sent rate, queue and pause; outcomes; instances",
		Long: `Status reads the fleet's state from Redis (not one process's memory) and shows, refreshing
every second:

  per provider  the contract, the rate the fleet sent over the last 10 s, the leaky queue's
                depth and delay, a pause in force (a 429's, or for refused credentials) and
                until when, the circuit breakers;
                under it, a line per tenant with jobs in the stream for its channel or sent
                in the last 10 s: the jobs waiting and its share of the provider's sends;
  per channel   sent, suppressed and dead over the last minute;
  instances     every live notifier run (from its heartbeat), its version and jobs in flight.

--once prints one view and exits; --json prints it as JSON. --nats URL also reads the
job stream on that server and prints the jobs waiting in it by channel (the jobs on
tenants' own subjects, not routed to the fair lanes yet, as one number). A notifier dev
keeps its limits in its own memory, not in Redis: its status is its /status page.`,
		Args: cobra.NoArgs,
	}
	path := configFlag(c)
	once := c.Flags().Bool("once", false, "print once and exit")
	asJSON := c.Flags().Bool("json", false, "print as JSON (implies --once)")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, rdb, err := loadRedis(cmd, *path, e)
		if err != nil {
			return err
		}
		defer rdb.Close()
		ctx := cmd.Context()
		// With --nats, the stream's side too: the jobs waiting in it,
		// which a fleet without heartbeats in Redis (a notifier dev) has.
		var stream jetstream.Stream
		if cmd.Flags().Changed("nats") {
			nc, js, err := config.ConnectJetStream(ctx, cfg, "notifier status", false)
			if err != nil {
				return err
			}
			defer nc.Close()
			if stream, err = js.Stream(ctx, cfg.NATS.Stream); err != nil {
				return hintStream(fmt.Errorf("stream %s: %w", cfg.NATS.Stream, err))
			}
		}
		tty := isTerminal(e.stdout)
		for {
			st, err := service.ReadStatus(ctx, rdb, cfg)
			if err != nil {
				return err
			}
			switch {
			case *asJSON:
				enc := json.NewEncoder(e.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			case tty && !*once:
				fmt.Fprint(e.stdout, "\033[H\033[2J")
			}
			printStatus(e.stdout, st, !*once, termWidth(e.stdout, e.getenv))
			if stream != nil {
				if err := printWaiting(ctx, e.stdout, stream, cfg); err != nil {
					return err
				}
			}
			if len(st.Instances) == 0 {
				noInstanceHint(e.stdout, cfg)
			}
			if *once {
				return nil
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
	}
	return c
}

// tenantLine is how status prints one tenant under its provider.
func tenantLine(t inspect.TenantStatus) string {
	waiting, share, sent := statuspage.TenantCells(t)
	return fmt.Sprintf("tenant %-20s %7s jobs waiting, %4s of sends (%s)", t.Tenant, waiting, share, sent)
}

// print shows st as `notifier status` does, no line wider than width:
// a narrow terminal loses the columns it can do without first (an
// instance's version and uptime, the queue's delay and depth); a pause or
// a breaker that is not closed, when its column does not fit, gets a line
// under its provider.
func printStatus(w io.Writer, st inspect.FleetStatus, live bool, width int) {
	tab := statuspage.NewTable(st)
	head := "notifier status — " + tab.At
	if live {
		fmt.Fprintln(w, text.FirstFitting(width, head+"  (every second; Ctrl-C to quit)", head))
	} else {
		fmt.Fprintln(w, text.Fit(head, width))
	}
	fmt.Fprintln(w)

	pauseDrop := 5 // none in force: the column says nothing
	var rows []tableRow
	for i, p := range tab.Providers {
		if p.Pause != "-" {
			pauseDrop = 1
		}
		r := tableRow{cells: []string{p.Name, p.Contract, p.Sent, p.Queued, p.Delay, p.Pause, p.Breakers}}
		for _, t := range st.Providers[i].Tenants {
			waiting, share, sent := statuspage.TenantCells(t)
			r.under = append(r.under, text.FirstFitting(width, "  "+tenantLine(t),
				fmt.Sprintf("  tenant %s: %s waiting, %s of sends (%s)", t.Tenant, waiting, share, sent),
				fmt.Sprintf("  tenant %s: %s waiting, %s of sends", t.Tenant, waiting, share)))
		}
		for _, sr := range statuspage.ShapingRows(st.Providers[i]) {
			r.under = append(r.under, text.Fit("  "+sr.Limit+": "+sr.Now, width))
		}
		rows = append(rows, r)
	}
	writeTable(w, width, "", []tableCol{
		{head: "provider"}, {head: "contract", right: true}, {head: "sent (10s)", right: true},
		{head: "queued", right: true, drop: 2}, {head: "delay", right: true, drop: 3},
		{head: "pause", drop: pauseDrop, spill: true, none: "-"}, {head: "breakers", drop: 4, spill: true, none: "closed"},
	}, rows)

	rows = rows[:0]
	for _, c := range tab.Channels {
		rows = append(rows, tableRow{cells: []string{c.Channel, fmt.Sprint(c.Sent), fmt.Sprint(c.Suppressed), fmt.Sprint(c.Dead)}})
	}
	fmt.Fprintln(w)
	writeTable(w, width, "", []tableCol{
		{head: "last minute"}, {head: "sent", right: true}, {head: "suppressed", right: true}, {head: "dead", right: true},
	}, rows)

	fmt.Fprintf(w, "\n%d live instance", len(st.Instances))
	if len(st.Instances) != 1 {
		fmt.Fprint(w, "s")
	}
	fmt.Fprintln(w)
	if len(tab.Instances) == 0 {
		return
	}
	rows = rows[:0]
	for _, in := range tab.Instances {
		rows = append(rows, tableRow{cells: []string{in.ID, in.Version, in.InFlight, in.Limits, in.Up, in.Seen}})
	}
	writeTable(w, width, "  ", []tableCol{
		{head: "instance"}, {head: "version", drop: 3}, {head: "in flight", right: true},
		{head: "limits", drop: 1}, {head: "up", drop: 4}, {head: "seen", right: true, drop: 2},
	}, rows)
}

// waitingFilters are the subject filters printWaiting counts by channel:
// the default tenant's queues (three and four tokens) and the fair lanes,
// as the dispatcher's Consumer.Queues reads them. Their answers hold as
// many subjects as there are lanes, whatever the number of tenants; a
// tenant's own subjects (notify.jobs.<channel>.t.<tenant>, one per tenant)
// are counted together, from the stream's total, never listed.
var waitingFilters = []string{"notify.jobs.*", "notify.jobs.*.*", "notify.jobs.*.f.>"}

// printWaiting prints the jobs waiting in the job stream, by channel, as
// the stream counts them by subject; the jobs on tenants' own subjects
// (not routed to a fair lane yet) as one number.
func printWaiting(ctx context.Context, w io.Writer, stream jetstream.Stream, cfg config.Config) error {
	all, err := stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream %s: %w", cfg.NATS.Stream, err)
	}
	by := map[string]uint64{}
	var lanes uint64
	for _, f := range waitingFilters {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(f))
		if err != nil {
			return fmt.Errorf("stream %s: %w", cfg.NATS.Stream, err)
		}
		for subject, n := range info.State.Subjects {
			by[queue.ChannelOf(subject)] += n
			lanes += n
		}
	}
	total := max(all.State.Msgs, lanes)
	channels := make([]string, 0, len(by))
	for c := range by {
		channels = append(channels, c)
	}
	sort.Strings(channels)
	parts := make([]string, len(channels))
	for i, c := range channels {
		parts[i] = fmt.Sprintf("%s %d", c, by[c])
	}
	if unrouted := total - lanes; unrouted > 0 {
		parts = append(parts, fmt.Sprintf("%d on tenants' own subjects, not routed yet", unrouted))
	}
	if len(parts) == 0 {
		parts = []string{"none"}
	}
	_, err = fmt.Fprintf(w, "\njobs waiting in %s on %s: %d (%s)\n", cfg.NATS.Stream, queue.RedactURLs(cfg.NATS.URL), total, strings.Join(parts, ", "))
	return err
}
