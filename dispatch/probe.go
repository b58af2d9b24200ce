package dispatch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/providers"
)

// Probing a provider paused for its credentials (SPEC §6). A refused
// sender pauses its provider fleet-wide for max_pause; meanwhile, once per
// probe_interval (with jitter) one process of the fleet (the one that takes
// the probe: fleet.PauseReasons.TryProbe) lets one job through as a probe, past
// the pause and the queue. Accepted, the provider is resumed fleet-wide at
// once (a key re-enabled at the provider's console needs no operator);
// refused as the sender again, it stays paused. Counted in
// notifier_provider_probes_total{provider,result}.
type probes struct {
	// n is len(armed): every job asks take, and while no probe is armed
	// (almost always) it answers without the lock.
	n     atomic.Int32
	mu    sync.Mutex
	armed map[string]time.Time // provider → a probe may go until
	next  map[string]time.Time // provider → when this process next tries to take one
}

// arm lets one job of provider through until until.
func (p *probes) arm(provider string, until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.armed == nil {
		p.armed = map[string]time.Time{}
	}
	p.armed[provider] = until
	p.n.Store(int32(len(p.armed)))
}

// armed reports whether a probe of provider may go now.
func (p *probes) isArmed(provider string, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return now.Before(p.armed[provider])
}

// take is the probe of provider, once: true for the first job that asks
// while it is armed.
func (p *probes) take(provider string, now time.Time) bool {
	if p.n.Load() == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	until, ok := p.armed[provider]
	if !ok {
		return false
	}
	delete(p.armed, provider) // taken now, or expired untaken
	p.n.Store(int32(len(p.armed)))
	return now.Before(until)
}

// due reports whether this process should try to take a probe of provider
// now, and if so when it tries next.
func (p *probes) due(provider string, now time.Time, next time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next == nil {
		p.next = map[string]time.Time{}
	}
	if now.Before(p.next[provider]) {
		return false
	}
	p.next[provider] = next
	return true
}

// maybeProbe, for a provider paused for its credentials, takes the fleet's
// probe when its interval is due and arms it here: the channel then gets a
// budget of one job, which goes through as the probe.
func (pl *pipeline) maybeProbe(ctx context.Context, l *limits.Set, provider string, interval time.Duration) {
	now := pl.now()
	if !pl.probes.due(provider, now, now.Add(interval/2+pl.jitter(interval/2))) {
		return
	}
	ok, err := l.Reasons.TryProbe(ctx, provider, interval-interval/10+pl.jitter(interval/5))
	if err != nil || !ok {
		return
	}
	pl.probes.arm(provider, now.Add(interval))
	pl.log.Info("provider paused for its credentials: letting one job through as a probe", "provider", provider)
}

// probeSucceeded resumes, fleet-wide, a provider whose probe it accepted.
func (pl *pipeline) probeSucceeded(ctx context.Context, jb *job) {
	pl.m.Probes.WithLabelValues(jb.provider, "sent").Inc()
	err := pl.be.with(ctx, jb, func(l *limits.Set) error {
		if _, err := l.Leaky.Resume(ctx, jb.provider, l.ContractOf(jb.pcfg)); err != nil {
			return err
		}
		if l.Pauses != nil {
			l.Pauses.Clear(jb.provider)
		}
		return l.Reasons.Clear(ctx, jb.provider)
	})
	if err != nil {
		jb.log().Warn("resume a provider whose probe it accepted", "err", err)
		return
	}
	pl.setPaused(jb.provider, "")
	jb.log().Info("provider accepted the probe: resumed fleet-wide")
}

// probeInterval is provider p's probe_interval (its default when unset).
func probeInterval(p providers.Config) time.Duration {
	if p.ProbeInterval > 0 {
		return p.ProbeInterval
	}
	return providers.DefaultProbeInterval
}
