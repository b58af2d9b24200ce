package statuspage

import (
	"fmt"
	"strings"
	"time"

	"github.com/notifier/notifier/inspect"
)

// Table is the current numbers, formatted exactly as `notifier
// status` prints them.
type Table struct {
	At        string        `json:"at"`
	Providers []ProviderRow `json:"providers"`
	Channels  []ChannelRow  `json:"channels"`
	Instances []InstanceRow `json:"instances"`
	Tenants   []TenantRow   `json:"tenants"` // each provider's, in the providers' order
	Shaping   []ShapingRow  `json:"shaping"` // adaptive rates and quotas, in the providers' order
}

// ShapingRow is one adaptive rate or quota of a provider, as status shows it.
type ShapingRow struct {
	Provider string `json:"provider"`
	Limit    string `json:"limit"` // "adaptive rate", "quota 500/1m"
	Now      string `json:"now"`   // "59.1/s of 100/s", "312 used, 188 left, resets in 41s"
}

type TenantRow struct {
	Provider string `json:"provider"`
	Tenant   string `json:"tenant"`
	Waiting  string `json:"waiting"` // jobs in the stream for the provider's channel
	Share    string `json:"share"`   // of the provider's sends over the last 10 s
	Sent     string `json:"sent"`    // the tenant's sends there over the last 10 s, per second
}

type ProviderRow struct {
	Name     string `json:"name"`
	Channel  string `json:"channel"`
	Contract string `json:"contract"`
	Sent     string `json:"sent"`
	Queued   string `json:"queued"`
	Delay    string `json:"delay"`
	MaxDelay string `json:"max_delay"`
	Pause    string `json:"pause"`
	Breakers string `json:"breakers"`
}

type ChannelRow struct {
	Channel    string `json:"channel"`
	Sent       int64  `json:"sent"`
	Suppressed int64  `json:"suppressed"`
	Dead       int64  `json:"dead"`
}

type InstanceRow struct {
	ID       string `json:"id"`
	Host     string `json:"host"`
	Version  string `json:"version"`
	InFlight string `json:"in_flight"`
	Limits   string `json:"limits"`
	Up       string `json:"up"`
	Seen     string `json:"seen"`
}

// NewTable formats st with the verbs inspect.FleetStatus.print uses, so the
// page and `notifier status` show the same numbers.
func NewTable(st inspect.FleetStatus) Table {
	t := Table{
		At:        st.At.UTC().Format("2006-01-02 15:04:05 UTC"),
		Providers: make([]ProviderRow, 0, len(st.Providers)),
		Channels:  make([]ChannelRow, 0, len(st.Channels)),
		Instances: make([]InstanceRow, 0, len(st.Instances)),
		Tenants:   []TenantRow{},
		Shaping:   []ShapingRow{},
	}
	for _, p := range st.Providers {
		pause := "-"
		if p.PausedFor > 0 {
			pause = fmt.Sprintf("%.1fs", p.PausedFor)
			if len(p.PausedUntil) >= 19 {
				pause += ", until " + p.PausedUntil[11:19]
			}
			if p.PauseReason == "credentials" { // fleet.PauseCredentials
				pause = "credentials refused: " + pause
			}
		}
		t.Providers = append(t.Providers, ProviderRow{
			Name: p.Name, Channel: p.Channel,
			Contract: fmt.Sprintf("%g/s", p.Contract), Sent: fmt.Sprintf("%.1f/s", p.SentPerSec),
			Queued: fmt.Sprintf("%.0f", p.QueueDepth), Delay: fmt.Sprintf("%.2fs", p.QueueDelay),
			MaxDelay: fmt.Sprintf("%gs", p.MaxDelay), Pause: pause, Breakers: breakerSummary(p.Breakers),
		})
		for _, ts := range p.Tenants {
			waiting, share, sent := TenantCells(ts)
			t.Tenants = append(t.Tenants, TenantRow{Provider: p.Name, Tenant: ts.Tenant, Waiting: waiting, Share: share, Sent: sent})
		}
		t.Shaping = append(t.Shaping, ShapingRows(p)...)
	}
	for _, c := range st.Channels {
		t.Channels = append(t.Channels, ChannelRow(c))
	}
	for _, in := range st.Instances {
		t.Instances = append(t.Instances, InstanceRow{
			ID: in.ID, Host: in.Host, Version: in.Version, InFlight: fmt.Sprintf("%d/%d", in.InFlight, in.Workers),
			Limits: in.Limits, Up: in.Up, Seen: fmt.Sprintf("%.1fs ago", in.Seen),
		})
	}
	return t
}

// ShapingRows are p's adaptive rate and quotas as status shows them.
func ShapingRows(p inspect.ProviderStatus) []ShapingRow {
	var rows []ShapingRow
	if p.Adaptive {
		rows = append(rows, ShapingRow{Provider: p.Name, Limit: "adaptive rate", Now: fmt.Sprintf("%.1f/s of %g/s", p.EffectiveRate, p.Contract)})
	}
	for _, q := range p.Quotas {
		rows = append(rows, ShapingRow{Provider: p.Name, Limit: fmt.Sprintf("quota %d/%s", q.Limit, q.Per),
			Now: fmt.Sprintf("%d used, %d left, resets in %s", q.Used, q.Left, inspect.FormatDuration(time.Duration(q.ResetsIn*float64(time.Second)).Round(time.Second)))})
	}
	return rows
}

// TenantCells are a tenant's numbers as status shows them: jobs waiting,
// its share of the provider's sends over the last 10 s, and their rate.
func TenantCells(t inspect.TenantStatus) (waiting, share, sent string) {
	return fmt.Sprintf("%d", t.Queued), fmt.Sprintf("%.0f%%", 100*t.Share), fmt.Sprintf("%.1f/s", float64(t.Sent10s)/10)
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
