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
                depth and delay, a 429 pause in force and until when, the circuit breakers;
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
			st.print(e.stdout, !*once)
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
	Breakers    []string `json:"breakers"` // each live instance's breaker state
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
	st := fleetStatus{At: time.Now().UTC()}
	insts, err := dispatch.ReadFleet(ctx, rdb, cfg.Redis.KeyPrefix)
	if err != nil {
		return st, err
	}
	q := leaky.NewRedis(rdb, cfg.Redis.KeyPrefix, leaky.WithHeadroom(dispatch.DefaultHeadroom))
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
		if paused > 0 {
			ps.PausedFor = paused.Seconds()
			ps.PausedUntil = st.At.Add(paused).Format(time.RFC3339)
		}
		var sent int64
		for _, in := range insts {
			if a, ok := in.Info.Providers[p.Name]; ok {
				sent += a.Sent10s
				ps.Breakers = append(ps.Breakers, a.Breaker)
			}
		}
		ps.SentPerSec = float64(sent) / 10
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

func (st fleetStatus) print(w io.Writer, live bool) {
	head := "notifier status — " + st.At.Format("2006-01-02 15:04:05 UTC")
	if live {
		head += "  (every second; Ctrl-C to quit)"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintf(w, "\n%-18s %12s %12s %9s %8s  %-22s %s\n", "provider", "contract", "sent (10s)", "queued", "delay", "429 pause", "breakers")
	for _, p := range st.Providers {
		pause := "-"
		if p.PausedFor > 0 {
			pause = fmt.Sprintf("%.1fs, until %s", p.PausedFor, p.PausedUntil[11:19])
		}
		fmt.Fprintf(w, "%-18s %9g/s %10.1f/s %9.0f %7.2fs  %-22s %s\n",
			p.Name, p.Contract, p.SentPerSec, p.QueueDepth, p.QueueDelay, pause, breakerSummary(p.Breakers))
	}
	fmt.Fprintf(w, "\n%-18s %8s %11s %6s\n", "last minute", "sent", "suppressed", "dead")
	for _, c := range st.Channels {
		fmt.Fprintf(w, "%-18s %8d %11d %6d\n", c.Channel, c.Sent, c.Suppressed, c.Dead)
	}
	fmt.Fprintf(w, "\n%d live instance", len(st.Instances))
	if len(st.Instances) != 1 {
		fmt.Fprint(w, "s")
	}
	fmt.Fprintln(w)
	for _, in := range st.Instances {
		fmt.Fprintf(w, "  %-34s %-10s in flight %3d/%-4d limits %-8s up %-8s seen %.1fs ago\n",
			in.ID, in.Version, in.InFlight, in.Workers, in.Limits, in.Up, in.Seen)
	}
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
