package inspect

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/fleet"
	"github.com/notifier/notifier/providers"
)

// ProviderAnswer is what Inspector.Provider says of one provider.
type ProviderAnswer struct {
	Provider string    `json:"provider"`
	Channel  string    `json:"channel"`
	At       time.Time `json:"at"` // when it was read, on the Redis clock
	Contract Contract  `json:"contract"`
	// EffectiveRate is the rate the fleet paces at now, units/s, before
	// the headroom: the contract's, or less while an adaptive contract has
	// backed off.
	EffectiveRate float64 `json:"effective_rate"`
	Queue         Queue   `json:"queue"`
	// NextFreeSlot is the send slot a job of one unit reserving now would
	// get: after the queue's slots already handed out, after a pause, and
	// in the next window of a quota that is spent.
	NextFreeSlot When `json:"next_free_slot"`
	// Pause is the fleet-wide pause in force, if any.
	Pause *Pause `json:"pause,omitempty"`
	// Quotas are the provider's quota windows now.
	Quotas []Quota `json:"quotas"`
	// Breakers are each live instance's circuit breaker for the provider.
	Breakers []Breaker `json:"breakers"`
	// TenantsWaiting are the tenants with jobs in the stream for the
	// provider's channel (the instances' largest count: they read the same
	// stream), tenants labelled as in the metrics.
	TenantsWaiting []TenantWaiting `json:"tenants_waiting"`
}

// Contract is a provider's contract as its queue paces it.
type Contract struct {
	Rate                 float64 `json:"rate"`
	Unit                 string  `json:"unit"`
	MaxQueueDelaySeconds float64 `json:"max_queue_delay_seconds"`
	// Burst is the most units the queue holds: rate × max_queue_delay.
	Burst float64 `json:"burst"`
	// Headroom is how far under the rate the queue paces (its
	// jitter_budget's, or the dispatcher's default).
	Headroom float64   `json:"headroom"`
	Adaptive *Adaptive `json:"adaptive,omitempty"`
}

// Adaptive is an adaptive contract's configuration.
type Adaptive struct {
	MinRate      float64 `json:"min_rate"`
	Decrease     float64 `json:"decrease"`
	IncreasePerS float64 `json:"increase_per_s"`
	QuietSeconds float64 `json:"quiet_seconds"`
}

// Queue is a provider's leaky queue now.
type Queue struct {
	// Depth is the units queued: slots handed out after now (and after a
	// pause).
	Depth float64 `json:"depth"`
	// DelaySeconds is how long those slots take to drain.
	DelaySeconds float64 `json:"delay_seconds"`
	// Full: a job reserving now would be refused (its slot lies beyond
	// max_queue_delay); it waits in a worker or in JetStream.
	Full bool `json:"full"`
}

// Pause is a fleet-wide pause.
type Pause struct {
	Until      time.Time `json:"until"`
	ForSeconds float64   `json:"for_seconds"`
	// Reason is rate_limited (a 429's Retry-After) or credentials (the
	// provider refused the sender).
	Reason string `json:"reason"`
}

// Quota is one quota's window now.
type Quota struct {
	Limit           int64   `json:"limit"`
	Per             string  `json:"per"`
	Used            int64   `json:"used"`
	Left            int64   `json:"left"`
	ResetsInSeconds float64 `json:"resets_in_seconds"`
}

// Breaker is one instance's circuit breaker.
type Breaker struct {
	Instance string `json:"instance"`
	State    string `json:"state"` // closed, half-open or open
}

// TenantWaiting is one tenant's jobs in the stream.
type TenantWaiting struct {
	Tenant string `json:"tenant"`
	Queued uint64 `json:"queued"`
}

// provider finds name among the configured providers.
func (in *Inspector) provider(name string) (providers.Config, bool) {
	for _, p := range in.cfg.Providers {
		if p.Name == name {
			return p, true
		}
	}
	return providers.Config{}, false
}

// Provider answers for the provider name: its contract and effective
// rate, its queue, the next free slot, a pause, the breakers and the
// tenants waiting. An unknown name wraps ErrUnknownProvider.
func (in *Inspector) Provider(ctx context.Context, name string) (ProviderAnswer, error) {
	p, ok := in.provider(name)
	if !ok {
		return ProviderAnswer{}, fmt.Errorf("explain provider %q: %w", name, ErrUnknownProvider)
	}
	c := limits.Contract(p) // the contract as the dispatcher's queues pace it
	h := in.cfg.Limits.HeadroomOf(c)
	a := ProviderAnswer{
		Provider: name, Channel: p.Channel, EffectiveRate: p.Rate,
		Contract: Contract{Rate: p.Rate, Unit: unitOf(p), MaxQueueDelaySeconds: p.MaxQueueDelay.Seconds(),
			Burst: p.Rate * p.MaxQueueDelay.Seconds(), Headroom: h},
		Quotas: []Quota{}, Breakers: []Breaker{}, TenantsWaiting: []TenantWaiting{},
	}
	if ad := c.Adaptive; ad != nil {
		a.Contract.Adaptive = &Adaptive{MinRate: ad.MinRate, Decrease: ad.Decrease, IncreasePerS: ad.IncreasePerS, QuietSeconds: ad.Quiet.Seconds()}
	}
	depth, err := in.queue.Depth(ctx, name, c)
	if err != nil {
		return a, fmt.Errorf("explain provider: %w", err)
	}
	paused, err := in.queue.PausedFor(ctx, name)
	if err != nil {
		return a, fmt.Errorf("explain provider: %w", err)
	}
	// The clock is read after the queue: the slot named is then never
	// before the queue's (at most a round trip after it).
	now, err := in.redisNow(ctx)
	if err != nil {
		return a, fmt.Errorf("explain provider %s: %w", name, err)
	}
	a.At = now
	// Depth is the queue's length in µs times the paced rate (leaky's
	// depthUnits, at the contract's rate): back to time.
	queued := time.Duration(depth / (p.Rate * (1 - h)) * float64(time.Second)).Round(time.Microsecond)
	a.Queue = Queue{Depth: depth, DelaySeconds: queued.Seconds(), Full: paused+queued > p.MaxQueueDelay}
	next := paused + queued
	if paused > 0 {
		a.Pause = &Pause{Until: now.Add(paused), ForSeconds: paused.Seconds(), Reason: fleet.PauseRateLimited}
		if in.reasons != nil {
			if a.Pause.Reason, err = in.reasons.Reason(ctx, name); err != nil {
				return a, fmt.Errorf("explain provider %s: %w", name, err)
			}
		}
	}
	if c.Adaptive != nil || len(c.Quotas) > 0 {
		sh, err := in.queue.Shape(ctx, name, c)
		if err != nil {
			return a, fmt.Errorf("explain provider: %w", err)
		}
		a.EffectiveRate = sh.EffectiveRate
		for _, q := range sh.Quotas {
			a.Quotas = append(a.Quotas, Quota{Limit: q.Limit, Per: q.Per.String(), Used: q.Used, Left: max(0, q.Limit-q.Used), ResetsInSeconds: q.ResetsIn.Seconds()})
			if q.Used >= q.Limit {
				next = max(next, q.ResetsIn) // a spent window: the next slot is in the next one
			}
		}
	}
	a.NextFreeSlot = whenAfter(now, next)

	insts, err := fleet.Read(ctx, in.rdb, in.cfg.Limits.Prefix)
	if err != nil {
		return a, fmt.Errorf("explain provider %s: %w", name, err)
	}
	waiting := map[string]uint64{}
	for _, inst := range insts {
		if act, ok := inst.Info.Providers[name]; ok {
			a.Breakers = append(a.Breakers, Breaker{Instance: inst.ID, State: act.Breaker})
		}
		for tenant, n := range inst.Info.Channels[p.Channel].Queued {
			waiting[tenant] = max(waiting[tenant], n)
		}
	}
	sort.Slice(a.Breakers, func(i, j int) bool { return a.Breakers[i].Instance < a.Breakers[j].Instance })
	for tenant, n := range waiting {
		if n > 0 {
			a.TenantsWaiting = append(a.TenantsWaiting, TenantWaiting{Tenant: tenant, Queued: n})
		}
	}
	sort.Slice(a.TenantsWaiting, func(i, j int) bool {
		x, y := a.TenantsWaiting[i], a.TenantsWaiting[j]
		if x.Queued != y.Queued {
			return x.Queued > y.Queued
		}
		return x.Tenant < y.Tenant
	})
	return a, nil
}

// unitOf is the provider's unit, messages when unset.
func unitOf(p providers.Config) string {
	if p.Unit == "" {
		return "messages"
	}
	return p.Unit
}
