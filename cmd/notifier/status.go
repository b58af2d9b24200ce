package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/notifier/notifier/dispatch"
	"github.com/notifier/notifier/leaky"
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

--once prints one view and exits; --json prints it as JSON.`,
		Args: cobra.NoArgs,
	}
	path := configFlag(c)
	once := c.Flags().Bool("once", false, "print once and exit")
	asJSON := c.Flags().Bool("json", false, "print as JSON (implies --once)")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := LoadConfig(*path, e.getenv)
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		rdb, err := ConnectRedis(ctx, cfg.Redis, 4)
		if err != nil {
			return err
		}
		defer rdb.Close()
		tty := isTerminal(e.stdout)
		for {
			st, err := readStatus(ctx, rdb, cfg)
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
			st.print(e.stdout, !*once, termWidth(e.stdout, e.getenv))
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

// fleetStatus is what `notifier status` shows.
type fleetStatus struct {
	At        time.Time        `json:"at"`
	Providers []providerStatus `json:"providers"`
	Channels  []channelStatus  `json:"channels"`
	Instances []instanceStatus `json:"instances"`
}

type providerStatus struct {
	Name        string   `json:"name"`
	Channel     string   `json:"channel"`
	Contract    float64  `json:"contract"`
	Unit        string   `json:"unit"`
	SentPerSec  float64  `json:"sent_per_second"` // jobs/s over the last 10 s, the fleet together
	QueueDepth  float64  `json:"queue_depth"`     // units queued now
	QueueDelay  float64  `json:"queue_delay_seconds"`
	MaxDelay    float64  `json:"max_queue_delay_seconds"`
	PausedFor   float64  `json:"paused_for_seconds"` // 0: no pause
	PausedUntil string   `json:"paused_until,omitempty"`
	PauseReason string   `json:"pause_reason,omitempty"` // rate_limited or credentials, while paused
	Breakers    []string `json:"breakers"`               // each live instance's breaker state
	// EffectiveRate is the rate the fleet paces at now: Contract, or less
	// while an adaptive contract has backed off.
	EffectiveRate float64 `json:"effective_rate"`
	Adaptive      bool    `json:"adaptive"`
	// Quotas are the provider's quota windows now (providers[].quotas).
	Quotas []quotaStatus `json:"quotas,omitempty"`
	// Tenants are the tenants with jobs in the stream for the provider's
	// channel or sends at it in the last 10 s: "default", "other" (those
	// not named in tenants.weights) first, then by name.
	Tenants []tenantStatus `json:"tenants,omitempty"`
}

// quotaStatus is one quota's window: the one the latest slots count in.
type quotaStatus struct {
	Limit    int64   `json:"limit"`
	Per      string  `json:"per"`
	Used     int64   `json:"used"`
	Left     int64   `json:"left"`
	ResetsIn float64 `json:"resets_in_seconds"`
}

// shapingRows are p's adaptive rate and quotas as status shows them.
func shapingRows(p providerStatus) []shapingRow {
	var rows []shapingRow
	if p.Adaptive {
		rows = append(rows, shapingRow{Provider: p.Name, Limit: "adaptive rate", Now: fmt.Sprintf("%.1f/s of %g/s", p.EffectiveRate, p.Contract)})
	}
	for _, q := range p.Quotas {
		rows = append(rows, shapingRow{Provider: p.Name, Limit: fmt.Sprintf("quota %d/%s", q.Limit, q.Per),
			Now: fmt.Sprintf("%d used, %d left, resets in %s", q.Used, q.Left, fmtDur(time.Duration(q.ResetsIn*float64(time.Second)).Round(time.Second)))})
	}
	return rows
}

// tenantStatus is one tenant (as metrics label it: a tenant named in
// tenants.weights, "default" or "other") at one provider.
type tenantStatus struct {
	Tenant string `json:"tenant"`
	// Queued is the tenant's jobs in the job stream for the provider's
	// channel (waiting, under way or retrying; the channel's, shared by
	// its providers), as the instances last looked (the largest of their
	// counts: they read the same stream).
	Queued uint64 `json:"queued"`
	// Sent10s is the tenant's jobs the fleet sent at the provider in the
	// last 10 s, and Share their part of all its sends then (0 to 1).
	Sent10s int64   `json:"sent_10s"`
	Share   float64 `json:"share"`
}

type channelStatus struct {
	Channel    string `json:"channel"`
	Sent       int64  `json:"sent"`
	Suppressed int64  `json:"suppressed"`
	Dead       int64  `json:"dead"`
}

type instanceStatus struct {
	ID       string  `json:"id"`
	Host     string  `json:"host"`
	Version  string  `json:"version"`
	InFlight int     `json:"in_flight"`
	Workers  int     `json:"workers"`
	Limits   string  `json:"limits"`
	Seen     float64 `json:"last_heartbeat_seconds_ago"`
	Up       string  `json:"up"`
}

// readStatus gathers the fleet's state: heartbeats, queues and pauses.
func readStatus(ctx context.Context, rdb redis.UniversalClient, cfg Config) (fleetStatus, error) {
	insts, err := dispatch.ReadFleet(ctx, rdb, cfg.Redis.KeyPrefix)
	if err != nil {
		return fleetStatus{At: time.Now().UTC()}, err
	}
	q, err := leaky.NewRedis(rdb, cfg.Redis.KeyPrefix)
	if err != nil {
		return fleetStatus{At: time.Now().UTC()}, err
	}
	return statusOf(ctx, insts, q, dispatch.RedisPauseReasons(rdb, cfg.Redis.KeyPrefix), cfg)
}

// statusOf is the status of the instances insts, whose providers' queues
// and pauses are in q, and the pauses' reasons in reasons: the fleet's
// (Redis) or one process's (its memory).
func statusOf(ctx context.Context, insts []dispatch.Instance, q leaky.Queue, reasons dispatch.PauseReasons, cfg Config) (fleetStatus, error) {
	st := fleetStatus{At: time.Now().UTC()}
	for _, p := range cfg.Providers {
		ps := providerStatus{Name: p.Name, Channel: p.Channel, Contract: p.Rate, Unit: p.Unit, MaxDelay: p.MaxQueueDelay.Seconds(), Breakers: []string{}}
		depth, err := q.Depth(ctx, p.Name, dispatch.Contract(p))
		if err != nil {
			return st, err
		}
		paused, err := q.PausedFor(ctx, p.Name)
		if err != nil {
			return st, err
		}
		ps.QueueDepth, ps.QueueDelay = depth, depth/p.Rate
		ps.EffectiveRate, ps.Adaptive = p.Rate, p.Adaptive != nil
		if c := dispatch.Contract(p); c.Adaptive != nil || len(c.Quotas) > 0 {
			sh, err := q.Shape(ctx, p.Name, c)
			if err != nil {
				return st, err
			}
			ps.EffectiveRate = sh.EffectiveRate
			for _, qs := range sh.Quotas {
				ps.Quotas = append(ps.Quotas, quotaStatus{Limit: qs.Limit, Per: fmtDur(qs.Per), Used: qs.Used,
					Left: max(0, qs.Limit-qs.Used), ResetsIn: qs.ResetsIn.Seconds()})
			}
		}
		if paused > 0 {
			ps.PausedFor = paused.Seconds()
			ps.PausedUntil = st.At.Add(paused).Format(time.RFC3339)
			ps.PauseReason = dispatch.PauseRateLimited
			if reasons != nil {
				if ps.PauseReason, err = reasons.Reason(ctx, p.Name); err != nil {
					return st, err
				}
			}
		}
		var sent int64
		tenants := map[string]*tenantStatus{}
		tenant := func(name string) *tenantStatus {
			t := tenants[name]
			if t == nil {
				t = &tenantStatus{Tenant: name}
				tenants[name] = t
			}
			return t
		}
		for _, in := range insts {
			if a, ok := in.Info.Providers[p.Name]; ok {
				sent += a.Sent10s
				ps.Breakers = append(ps.Breakers, a.Breaker)
				for name, n := range a.Tenants {
					tenant(name).Sent10s += n
				}
			}
			for name, n := range in.Info.Channels[p.Channel].Queued {
				if t := tenant(name); n > t.Queued {
					t.Queued = n
				}
			}
		}
		ps.SentPerSec = float64(sent) / 10
		ps.Tenants = tenantRows(tenants)
		st.Providers = append(st.Providers, ps)
	}
	for _, ch := range queue.Channels {
		cs := channelStatus{Channel: ch}
		for _, in := range insts {
			a := in.Info.Channels[ch]
			cs.Sent += a.Sent
			cs.Suppressed += a.Suppressed
			cs.Dead += a.Dead
		}
		st.Channels = append(st.Channels, cs)
	}
	for _, in := range insts {
		st.Instances = append(st.Instances, instanceStatus{
			ID: in.ID, Host: in.Info.Host, Version: in.Info.Version, InFlight: in.Info.InFlight, Workers: in.Info.Workers,
			Limits: in.Info.Limits, Seen: in.LastSeen.Seconds(), Up: fmtDur(time.Since(in.Info.Started).Round(time.Second)),
		})
	}
	sort.Slice(st.Instances, func(i, j int) bool { return st.Instances[i].ID < st.Instances[j].ID })
	return st, nil
}

// tenantRows orders the tenants and works out their shares of the sends;
// a tenant with nothing queued and nothing sent is left out.
func tenantRows(m map[string]*tenantStatus) []tenantStatus {
	var total int64
	for _, t := range m {
		total += t.Sent10s
	}
	var out []tenantStatus
	for _, t := range m {
		if t.Queued == 0 && t.Sent10s == 0 {
			continue
		}
		if total > 0 {
			t.Share = float64(t.Sent10s) / float64(total)
		}
		out = append(out, *t)
	}
	rank := func(name string) int {
		switch name {
		case "default":
			return 0
		case "other":
			return 1
		}
		return 2
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Tenant, out[j].Tenant
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra < rb
		}
		return a < b
	})
	return out
}

// tenantCells are a tenant's numbers as status shows them: jobs waiting,
// its share of the provider's sends over the last 10 s, and their rate.
func tenantCells(t tenantStatus) (waiting, share, sent string) {
	return fmt.Sprintf("%d", t.Queued), fmt.Sprintf("%.0f%%", 100*t.Share), fmt.Sprintf("%.1f/s", float64(t.Sent10s)/10)
}

// tenantLine is how status prints one tenant under its provider.
func tenantLine(t tenantStatus) string {
	waiting, share, sent := tenantCells(t)
	return fmt.Sprintf("tenant %-20s %7s jobs waiting, %4s of sends (%s)", t.Tenant, waiting, share, sent)
}

// print shows st as `notifier status` does, no line wider than width:
// a narrow terminal loses the columns it can do without first (an
// instance's version and uptime, the queue's delay and depth); a pause or
// a breaker that is not closed, when its column does not fit, gets a line
// under its provider.
func (st fleetStatus) print(w io.Writer, live bool, width int) {
	tab := newStatusTable(st)
	head := "notifier status — " + tab.At
	if live {
		fmt.Fprintln(w, firstFitting(width, head+"  (every second; Ctrl-C to quit)", head))
	} else {
		fmt.Fprintln(w, fit(head, width))
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
			waiting, share, sent := tenantCells(t)
			r.under = append(r.under, firstFitting(width, "  "+tenantLine(t),
				fmt.Sprintf("  tenant %s: %s waiting, %s of sends (%s)", t.Tenant, waiting, share, sent),
				fmt.Sprintf("  tenant %s: %s waiting, %s of sends", t.Tenant, waiting, share)))
		}
		for _, sr := range shapingRows(st.Providers[i]) {
			r.under = append(r.under, fit("  "+sr.Limit+": "+sr.Now, width))
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

// breakerSummary is "closed" when every instance's breaker is closed, else
// the states counted.
func breakerSummary(states []string) string {
	if len(states) == 0 {
		return "-"
	}
	count := map[string]int{}
	for _, s := range states {
		count[s]++
	}
	if count["closed"] == len(states) {
		return "closed"
	}
	var parts []string
	for _, s := range []string{"open", "half-open", "closed"} {
		if count[s] > 0 {
			parts = append(parts, fmt.Sprintf("%s on %d of %d", s, count[s], len(states)))
		}
	}
	return strings.Join(parts, ", ")
}
