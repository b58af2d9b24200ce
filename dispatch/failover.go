package dispatch

import (
	"context"
	"slices"

	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/providers"
)

// Why a job went to its provider's fallback (notifier_failovers_total's
// reason label).
const (
	FailoverCircuitOpen = "circuit_open" // the provider's breaker is open
	FailoverQuota       = "quota"        // a quota of the provider is spent for the job's slot
	FailoverDeadline    = "deadline"     // the provider has no slot before the job's expires_at
)

// failover moves the job to its provider's fallback (providers[].fallback)
// and reports whether it did: not when there is none, or the fallback was
// already tried by this delivery (a cycle), or it is not configured now (a
// reload). The job keeps its ledger lease and its per-user cap admission
// (both are the job's, not the provider's) and goes through the fallback's
// own queue; nothing was sent, so the ledger still sends it once.
func (pl *pipeline) failover(jb *job, reason string) bool {
	to := jb.pcfg.Fallback
	if to == "" || to == jb.provider || slices.Contains(jb.tried, to) {
		return false
	}
	prov, pcfg, ok := jb.live.providers.Get(to)
	if !ok || pcfg.Channel != jb.channel {
		return false
	}
	if _, _, over := pcfg.OverQuota(pcfg.Cost(jb.msg)); over {
		return false // no window of the fallback's contract could hold it
	}
	from := jb.provider
	jb.tried = append(jb.tried, from)
	jb.prov, jb.pcfg, jb.provider = prov, pcfg, pcfg.Name
	jb.cost = pcfg.Cost(jb.msg)
	jb.lg = nil
	pl.m.Failovers.WithLabelValues(from, jb.provider, reason).Inc()
	jb.log().Info("provider cannot send the job in time; failing over", "from", from, "reason", reason)
	return true
}

// effectiveRate is the rate the fleet paces p at now, as this process's
// limits see it: the contract (divided among the instances on local
// limits), or the adaptive rate the shared state holds.
func (pl *pipeline) effectiveRate(ctx context.Context, l *limits.Set, p providers.Config) float64 {
	c := l.ContractOf(p)
	if c.Adaptive == nil {
		return c.Rate
	}
	sh, err := l.Leaky.Shape(ctx, p.Name, c)
	if err != nil {
		return c.Rate
	}
	return sh.EffectiveRate
}
