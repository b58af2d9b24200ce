package dispatch

import (
	"context"
	"slices"
	"time"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/ledger"
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
	from := jb.provider
	jb.tried = append(jb.tried, from)
	jb.prov, jb.pcfg, jb.provider = prov, pcfg, pcfg.Name
	jb.cost = pcfg.Cost(jb.msg)
	jb.lg = nil
	pl.m.Failovers.WithLabelValues(from, jb.provider, reason).Inc()
	jb.log().Info("provider cannot send the job in time; failing over", "from", from, "reason", reason)
	return true
}

// tooLate is the end of a job whose earliest send slot at its provider
// lies after its expires_at: it fails over when a fallback can take it
// (no end: the caller takes a slot there), else it is suppressed as
// expired at once rather than waiting for a slot and then found stale.
func (pl *pipeline) tooLate(jb *job, earliest time.Time) (end, bool) {
	if pl.failover(jb, FailoverDeadline) {
		return end{}, false
	}
	return suppressed(ledger.ReasonExpired, "expires_at "+jb.j.ExpiresAt.UTC().Format(time.RFC3339)+
		" lies before the earliest send slot at "+jb.provider+" ("+pl.until(earliest).Round(time.Millisecond).String()+" ahead)"), true
}

// earliestSlot is when a reservation's job could be sent at the soonest,
// on this process's clock: its slot when it got one, else (a full queue)
// the slot the queue would give after RetryAfter.
func (pl *pipeline) earliestSlot(jb *job, r leaky.Reservation) time.Time {
	if r.OK {
		return jb.slotAt
	}
	return pl.now().Add(r.RetryAfter + jb.pcfg.MaxQueueDelay)
}

// pastDeadline reports whether the job has an expires_at before its
// earliest slot with reservation r.
func (pl *pipeline) pastDeadline(jb *job, r leaky.Reservation) (time.Time, bool) {
	if jb.j == nil || jb.j.ExpiresAt.IsZero() {
		return time.Time{}, false
	}
	at := pl.earliestSlot(jb, r)
	return at, at.After(jb.j.ExpiresAt)
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
