package inspect

import (
	"context"
	"sort"
	"time"

	"github.com/notifier/notifier/internal/text"
	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/fleet"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
)

// FleetStatus is the fleet's state: what `notifier status` and the status
// page show.
type FleetStatus struct {
	At        time.Time        `json:"at"`
	Providers []ProviderStatus `json:"providers"`
	Channels  []ChannelStatus  `json:"channels"`
	Instances []InstanceStatus `json:"instances"`
}

// ProviderStatus is one provider's contract, sends, queue, pause and
// breakers.
type ProviderStatus struct {
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
	Quotas []QuotaStatus `json:"quotas,omitempty"`
	// Tenants are the tenants with jobs in the stream for the provider's
	// channel or sends at it in the last 10 s: "default", "other" (those
	// not named in tenants.weights) first, then by name.
	Tenants []TenantStatus `json:"tenants,omitempty"`
}

// QuotaStatus is one quota's window: the one the latest slots count in.
type QuotaStatus struct {
	Limit    int64   `json:"limit"`
	Per      string  `json:"per"`
	Used     int64   `json:"used"`
	Left     int64   `json:"left"`
	ResetsIn float64 `json:"resets_in_seconds"`
}

// TenantStatus is one tenant (as metrics label it: a tenant named in
// tenants.weights, "default" or "other") at one provider.
type TenantStatus struct {
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

// ChannelStatus is one channel's outcomes over the last minute, the
// fleet together.
type ChannelStatus struct {
	Channel    string `json:"channel"`
	Sent       int64  `json:"sent"`
	Suppressed int64  `json:"suppressed"`
	Dead       int64  `json:"dead"`
}

// InstanceStatus is one live `notifier run`, from its heartbeat.
type InstanceStatus struct {
	ID       string  `json:"id"`
	Host     string  `json:"host"`
	Version  string  `json:"version"`
	InFlight int     `json:"in_flight"`
	Workers  int     `json:"workers"`
	Limits   string  `json:"limits"`
	Seen     float64 `json:"last_heartbeat_seconds_ago"`
	Up       string  `json:"up"`
}

// Status is the fleet's state, read from Redis: every live instance's
// heartbeat, and each configured provider's queue, pause and shaping as
// the dispatcher's own limit set sees them (the same contracts, headroom
// included).
func (in *Inspector) Status(ctx context.Context) (FleetStatus, error) {
	insts, err := fleet.Read(ctx, in.rdb, in.cfg.Limits.Prefix)
	if err != nil {
		return FleetStatus{At: time.Now().UTC()}, err
	}
	return StatusOf(ctx, insts, in.queue, in.reasons, in.cfg.Providers)
}

// StatusOf is the status of the instances insts, whose providers' queues
// and pauses are in q, and the pauses' reasons in reasons (nil: a pause is
// a 429's): the fleet's (Redis) or one process's (its memory, `notifier
// dev`).
func StatusOf(ctx context.Context, insts []fleet.Instance, q leaky.Queue, reasons fleet.PauseReasons, provs []providers.Config) (FleetStatus, error) {
	st := FleetStatus{At: time.Now().UTC()}
	for _, p := range provs {
		ps := ProviderStatus{Name: p.Name, Channel: p.Channel, Contract: p.Rate, Unit: p.Unit, MaxDelay: p.MaxQueueDelay.Seconds(), Breakers: []string{}}
		depth, err := q.Depth(ctx, p.Name, limits.Contract(p))
		if err != nil {
			return st, err
		}
		paused, err := q.PausedFor(ctx, p.Name)
		if err != nil {
			return st, err
		}
		ps.QueueDepth, ps.QueueDelay = depth, depth/p.Rate
		ps.EffectiveRate, ps.Adaptive = p.Rate, p.Adaptive != nil
		if c := limits.Contract(p); c.Adaptive != nil || len(c.Quotas) > 0 {
			sh, err := q.Shape(ctx, p.Name, c)
			if err != nil {
				return st, err
			}
			ps.EffectiveRate = sh.EffectiveRate
			for _, qs := range sh.Quotas {
				ps.Quotas = append(ps.Quotas, QuotaStatus{Limit: qs.Limit, Per: FormatDuration(qs.Per), Used: qs.Used,
					Left: max(0, qs.Limit-qs.Used), ResetsIn: qs.ResetsIn.Seconds()})
			}
		}
		if paused > 0 {
			ps.PausedFor = paused.Seconds()
			ps.PausedUntil = st.At.Add(paused).Format(time.RFC3339)
			ps.PauseReason = fleet.PauseRateLimited
			if reasons != nil {
				if ps.PauseReason, err = reasons.Reason(ctx, p.Name); err != nil {
					return st, err
				}
			}
		}
		var sent int64
		tenants := map[string]*TenantStatus{}
		tenant := func(name string) *TenantStatus {
			t := tenants[name]
			if t == nil {
				t = &TenantStatus{Tenant: name}
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
		cs := ChannelStatus{Channel: ch}
		for _, in := range insts {
			a := in.Info.Channels[ch]
			cs.Sent += a.Sent
			cs.Suppressed += a.Suppressed
			cs.Dead += a.Dead
		}
		st.Channels = append(st.Channels, cs)
	}
	for _, in := range insts {
		st.Instances = append(st.Instances, InstanceStatus{
			ID: in.ID, Host: in.Info.Host, Version: in.Info.Version, InFlight: in.Info.InFlight, Workers: in.Info.Workers,
			Limits: in.Info.Limits, Seen: in.LastSeen.Seconds(), Up: FormatDuration(time.Since(in.Info.Started).Round(time.Second)),
		})
	}
	sort.Slice(st.Instances, func(i, j int) bool { return st.Instances[i].ID < st.Instances[j].ID })
	return st, nil
}

// tenantRows orders the tenants and works out their shares of the sends;
// a tenant with nothing queued and nothing sent is left out.
func tenantRows(m map[string]*TenantStatus) []TenantStatus {
	var total int64
	for _, t := range m {
		total += t.Sent10s
	}
	var out []TenantStatus
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

// FormatDuration prints a duration the way it is written in YAML: 24h,
// 10m, 1m30s (text.Duration).
func FormatDuration(d time.Duration) string { return text.Duration(d) }
