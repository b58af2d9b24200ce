package dispatch

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/notifier/notifier/internal/luapre"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/digest"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/userlimit"
)

// Digests (user_limits.<channel>.on_exceed: digest, SPEC §4). A job the
// cap refuses is held: noted in the digest store and handed back to
// JetStream until the user's window allows (so a crash loses none). The
// first of the user's jobs the cap then allows takes the held ones into a
// digest (digest.Store.Take): one digest job goes out in its place through
// the normal path (fleet bucket, provider queue), and it and the held jobs
// end suppressed, reason digested, as they come.
const (
	// ReasonDigested: the job went into a digest (its detail names it).
	ReasonDigested = "digested"
	// HeaderDigest marks a digest job: its id, which the dispatcher checks
	// in the digest store before it lets the job past the cap (the cap
	// counted the job that made it).
	HeaderDigest = "Notifier-Digest"
	// maxDigestIDs is the most member ids a digest job lists in its data.
	maxDigestIDs = digest.MaxMembers
)

// JobPublisher publishes a job a dispatcher makes (a digest):
// queue.Publisher.
type JobPublisher interface {
	PublishJob(ctx context.Context, j *queue.Job, high bool, header map[string]string) (duplicate bool, err error)
}

// digestKey is the digest store's key of the job's cap.
func digestKey(jb *job) digest.Key { return digest.KeyOf(jb.capKey.Channel, "", jb.capKey.User) }

// digestTTL is how long a user's digest state is kept: past the window
// that holds the jobs, with room for their redeliveries.
func digestTTL(r userlimit.Rule) time.Duration {
	return min(2*r.Window+time.Hour, luapre.MaxTTL)
}

// digesting says whether the job's cap digests what it refuses.
func (jb *job) digesting() bool {
	return jb.capped && jb.rule.OnExceed == userlimit.Digest && jb.rule.Mode != userlimit.Shadow
}

// digestCheck runs before the admission of a job whose cap digests: a
// digest job (HeaderDigest) checked in the store is let past the cap; a job
// that already went into a digest ends (ended true with e).
func (pl *pipeline) digestCheck(ctx context.Context, jb *job) (e end, ended bool, err error) {
	key := digestKey(jb)
	if id := jb.dl.Header.Get(HeaderDigest); id != "" && id == jb.j.ID {
		var ok bool
		err = pl.be.with(ctx, jb, func(l *limits.Set) (err error) {
			_, ok, err = l.Digests.Digest(ctx, key, id)
			return err
		})
		if err != nil {
			return end{}, false, err
		}
		if ok {
			jb.capped = false // the job that made it was counted for it
			// One send past the cap per digest, whatever tenant the
			// message names: a digest's id (a hash of its members' ids
			// within their tenants) is one fleet-wide, but a job id is
			// unique only within a tenant, so under its tenant's ledger
			// key the same id and header published as other tenants' would
			// each be sent past the cap. Under the digest's own id the
			// ledger sends one of them; another is a duplicate.
			jb.key = id
			jb.msg.Key = id
		}
		return end{}, false, nil
	}
	var m digest.Membership
	if err := pl.be.with(ctx, jb, func(l *limits.Set) (err error) {
		m, err = l.Digests.Of(ctx, key, jb.key)
		return err
	}); err != nil {
		return end{}, false, err
	}
	if m.Digest == "" {
		return end{}, false, nil
	}
	return pl.digested(ctx, jb, m), true, nil
}

// digestHold holds a job its cap refused for the user's next digest, and
// hands it back until the window allows.
func (pl *pipeline) digestHold(ctx context.Context, jb *job, res userlimit.Result) end {
	var held int
	var m digest.Membership
	full := false
	if err := pl.be.with(ctx, jb, func(l *limits.Set) (err error) {
		held, m, err = l.Digests.Hold(ctx, digestKey(jb), jb.key, jb.j.ExpiresAt, digestTTL(jb.rule))
		if errors.Is(err, digest.ErrTooManyHeld) {
			full = true // the user's answer, not the backend's failure
			return nil
		}
		return err
	}); err != nil {
		return stopped(err)
	}
	if full {
		return suppressed(ledger.ReasonUserLimit, fmt.Sprintf("over the %s cap of %d per %s, with %d jobs already held for the user's digest",
			jb.j.Channel, jb.rule.Limit, jb.rule.Window, digest.MaxHeld))
	}
	if m.Digest != "" {
		return pl.digested(ctx, jb, m)
	}
	pl.m.Deferrals.WithLabelValues(LayerUser, "digest").Inc()
	jb.debug("held for the user's next digest", "held", held, "for", res.RetryAfter.String())
	return pl.deferJob(ctx, jb, res.RetryAfter+pl.jitter(res.RetryAfter/10+10*time.Millisecond), ledger.DeferDigest)
}

// digestTake runs once the cap allowed a job whose cap digests: the user's
// held jobs and this one go into a digest, published now in this job's
// place (ended true); with none held, the job goes on alone.
func (pl *pipeline) digestTake(ctx context.Context, jb *job) (e end, ended bool) {
	var t digest.Taken
	key := digestKey(jb)
	if err := pl.be.with(ctx, jb, func(l *limits.Set) (err error) {
		// The jobs held since the cap allowed this one were refused
		// because it took the cap: they wait for the next window's digest.
		var allowed time.Time // zero: now
		if jb.capAt > 0 {
			allowed = time.UnixMicro(jb.capAt)
		}
		t, err = l.Digests.Take(ctx, key, jb.key, jb.j.ExpiresAt, allowed, digestTTL(jb.rule))
		return err
	}); err != nil {
		return stopped(err), true
	}
	switch {
	case t.Already:
		return pl.digested(ctx, jb, digest.Membership{Digest: t.Digest, State: digest.Published}), true
	case t.Digest == "":
		return end{}, false
	}
	return pl.digested(ctx, jb, digest.Membership{Digest: t.Digest, State: digest.Pending, Count: len(t.Members), Members: t.Members}), true
}

// digested ends a job that went into digest m, publishing the digest job
// first when no one has (its id is the digest's: a second publish within
// the duplicate window stores nothing, and the ledger sends it once), with
// m's members in its data, whichever member publishes it. A failed publish
// hands the job back, to try again.
func (pl *pipeline) digested(ctx context.Context, jb *job, m digest.Membership) end {
	if m.State == digest.Pending {
		if pl.o.Jobs == nil {
			return stopped(fmt.Errorf("publish digest %s: no job publisher", m.Digest))
		}
		dj := pl.digestJob(jb, m)
		if _, err := pl.o.Jobs.PublishJob(ctx, dj, false, map[string]string{HeaderDigest: m.Digest}); err != nil {
			jb.log().Warn("publish a digest; the job comes back to try again", "digest", m.Digest, "err", err)
			return end{kind: endDefer, delay: time.Second + pl.jitter(time.Second), reason: ledger.DeferDigestUnpublished}
		}
		if err := pl.be.with(ctx, jb, func(l *limits.Set) error { return l.Digests.Publish(ctx, digestKey(jb), m.Digest) }); err != nil {
			return stopped(err)
		}
		pl.m.Digests.WithLabelValues(jb.j.Channel).Inc()
		jb.debug("digest published", "digest", m.Digest, "jobs", m.Count)
	}
	detail := "went into digest " + m.Digest
	if m.Count > 0 {
		detail += fmt.Sprintf(" (%d jobs)", m.Count)
	}
	return suppressed(ReasonDigested, detail)
}

// digestJob is the digest job that stands for m's jobs, made from jb (its
// user, recipient, provider, tenant and category); its text is the cap's
// digest template with {count}, its data the count and the members' ids.
func (pl *pipeline) digestJob(jb *job, m digest.Membership) *queue.Job {
	t := *jb.rule.WithDefaults().Digest
	members := m.Members
	ids := members
	if len(ids) > maxDigestIDs {
		ids = ids[:maxDigestIDs]
	}
	data := map[string]string{"digest_count": strconv.Itoa(m.Count)}
	if len(ids) > 0 {
		data["digest_of"] = strings.Join(ids, " ")
		if len(ids) < m.Count {
			data["digest_of_truncated"] = "true"
		}
	}
	return &queue.Job{
		ID: m.Digest, UserID: jb.j.UserID, Channel: jb.j.Channel, To: jb.j.To,
		Title: t.Text(t.Title, m.Count), Body: t.Text(t.Body, m.Count), Data: data,
		Provider: jb.j.Provider, Tenant: jb.dl.Tenant, Category: jb.j.Category, CreatedAt: pl.now().UTC(),
	}
}
