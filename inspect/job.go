package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/queue"
)

// JobAnswer is what Inspector.Job says of one job id.
type JobAnswer struct {
	Job string `json:"job"`
	// Tenant is the job's tenant ("" the default tenant's): ids are
	// unique within a tenant.
	Tenant string    `json:"tenant,omitempty"`
	At     time.Time `json:"at"` // when it was read, on the Redis clock
	// State sums it up, the first that holds: sent; waiting for its send
	// slot (a lease is held, the ledger notes a far slot); sending (a lease
	// is held); waiting in the stream after its latest dead letter (a
	// replay); dead or suppressed (its latest dead letter, else the
	// ledger); waiting (known to the ledger, neither sent nor ended:
	// deferred, retrying; or found in the job stream, not taken yet); or
	// unknown (no record: never published, or forgotten after dedup_ttl,
	// or beyond the part of the stream scanned).
	State string `json:"state"`
	// Why is, for a waiting job, what holds it: a dispatch.Defer* word
	// (user_limit, provider_paused...) or "slot" as the ledger noted it,
	// "retry" (transient provider failures counted), or "stream" (in the
	// job stream, not taken yet); empty otherwise.
	Why    string `json:"why,omitempty"`
	Ledger Ledger `json:"ledger"`
	// Stream is what a scan of the job stream found, when one was made:
	// for a job not sent.
	Stream *queue.WaitingScan `json:"stream,omitempty"`
	// DeadLetters are the job's dead letters, oldest first (a job
	// dead-lettered again after a replay has several).
	DeadLetters []DeadLetter `json:"dead_letters"`
	// Provider is, for a job waiting in the stream (but for the user's
	// cap), the state of the provider that will send it (its own, else its
	// channel's default): a pause, a full queue, a spent quota, open
	// breakers hold it back.
	Provider *ProviderAnswer `json:"provider,omitempty"`
}

// DefaultScan is how many messages of the job stream Job reads at most
// looking for a job the ledger does not place.
const DefaultScan = 100_000

// Why a job waits beside the dispatcher's Defer* words.
const (
	WhyRetry  = "retry"  // transient provider failures counted: a retry is due
	WhyStream = "stream" // in the job stream, not taken yet
)

// The states of JobAnswer.
const (
	StateSent       = "sent"
	StateDead       = "dead"
	StateSuppressed = "suppressed"
	StateSending    = "sending"
	StateWaiting    = "waiting"
	StateUnknown    = "unknown"
)

// Ledger is a job's ledger record.
type Ledger struct {
	// Found is false when the ledger holds nothing for the job.
	Found bool `json:"found"`
	Sent  bool `json:"sent"`
	// SentSeq is the stream sequence of the message that was sent, when
	// recorded.
	SentSeq uint64 `json:"sent_seq,omitempty"`
	// Attempts is the transient provider failures counted, and LastError
	// the class of the last one ("5xx", "error"; never the provider's text).
	Attempts  int    `json:"attempts"`
	LastError string `json:"last_error,omitempty"`
	// LeaseOwner holds the send lease (an instance and a delivery number)
	// until LeaseUntil.
	LeaseOwner string     `json:"lease_owner,omitempty"`
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	// Outcome is dead or suppressed when the job ended unsent while it held
	// its lease, and Reason its Notifier-Reason (user_limit, rejected,
	// ambiguous...): the class of what happened, never a provider's text.
	Outcome string `json:"outcome,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// DeferredFor is why the job was last put off (a dispatch.Defer* word,
	// or "slot" for a far send slot), DueAt when it is due again, and
	// Deferrals how many times it was put off.
	DeferredFor string     `json:"deferred_for,omitempty"`
	DueAt       *time.Time `json:"due_at,omitempty"`
	Deferrals   int        `json:"deferrals,omitempty"`
	// KeptForSeconds is how long the record is still kept (dedup_ttl after
	// its last change).
	KeptForSeconds float64 `json:"kept_for_seconds,omitempty"`
}

// DeadLetter is one dead letter of the job, without its recipient, body,
// title or data: its row (as `notifier dead list --json` shows it) and the
// job's fields that name no recipient and no content.
type DeadLetter struct {
	DeadRow
	Provider  string `json:"provider,omitempty"`
	CreatedAt string `json:"created_at,omitempty"`
	ExpiresAt string `json:"expires_at,omitempty"`
}

// Job answers for the default tenant's job id: JobOf(ctx, "", id).
func (in *Inspector) Job(ctx context.Context, id string) (JobAnswer, error) {
	return in.JobOf(ctx, "", id)
}

// JobOf answers for tenant's job id ("" the default tenant's): JobScan
// reading at most DefaultScan messages of the job stream.
func (in *Inspector) JobOf(ctx context.Context, tenant, id string) (JobAnswer, error) {
	return in.JobScan(ctx, tenant, id, DefaultScan)
}

// JobScan answers for tenant's job id ("" the default tenant's): its
// ledger record, its dead letters and, when the ledger does not place it
// (neither sent nor under way), where it waits in the job stream, reading
// at most scan messages of it (0: DefaultScan; negative: all). Its dead
// letters are looked for among the newest scan letters of the dead-letter
// stream alike (`notifier dead show <id>` reads them all).
func (in *Inspector) JobScan(ctx context.Context, tenant, id string, scan int) (JobAnswer, error) {
	if !queue.ValidID(id) {
		return JobAnswer{}, fmt.Errorf("explain job: a job id is 1 to 128 of A-Z a-z 0-9 . _ : -: %w", ErrInvalid)
	}
	if tenant != "" && !queue.ValidTenant(tenant) {
		return JobAnswer{}, fmt.Errorf("explain job: a tenant is 1 to %d of A-Z a-z 0-9 . _ -: %w", queue.MaxTenantLen, ErrInvalid)
	}
	now, err := in.redisNow(ctx)
	if err != nil {
		return JobAnswer{}, fmt.Errorf("explain job %s: %w", id, err)
	}
	a := JobAnswer{Job: id, Tenant: tenant, At: now, DeadLetters: []DeadLetter{}}
	rec, err := in.ledger.Record(ctx, queue.MsgID(tenant, id))
	if err == nil && !rec.Found && tenant != "" && strings.HasPrefix(id, "digest-") {
		// A digest job let past its cap is kept under its id alone,
		// whatever tenant it names (SPEC §4).
		rec, err = in.ledger.Record(ctx, id)
	}
	if err != nil {
		return a, fmt.Errorf("explain job: %w", err)
	}
	a.Ledger = Ledger{Found: rec.Found, Sent: rec.Sent, SentSeq: rec.Seq, Attempts: rec.Attempts, LastError: rec.LastError, LeaseOwner: rec.Owner,
		Outcome: rec.Outcome, Reason: rec.Reason, DeferredFor: rec.Why, Deferrals: rec.Deferrals, KeptForSeconds: rec.TTL.Seconds()}
	if !rec.LeaseUntil.IsZero() {
		u := rec.LeaseUntil.UTC()
		a.Ledger.LeaseUntil = &u
	}
	if !rec.Until.IsZero() {
		u := rec.Until.UTC()
		a.Ledger.DueAt = &u
	}
	limit := scan // the messages each stream's read takes at most (0: all)
	switch {
	case scan == 0:
		limit = DefaultScan
	case scan < 0:
		limit = 0
	}
	if in.dead != nil {
		// The newest limit letters: the dead-letter subjects name only
		// the channel, so the reader matches the job id, and a read of
		// the whole stream would cost every letter kept (a request to the
		// metrics port's /explain too).
		letters, _, err := in.dead.List(ctx, queue.DeadFilter{JobID: id, Last: limit})
		if err != nil {
			return a, fmt.Errorf("explain job %s: %w", id, err)
		}
		for _, d := range letters {
			if d.Tenant == tenant {
				a.DeadLetters = append(a.DeadLetters, deadLetterOf(d))
			}
		}
	}
	if !a.Ledger.Sent && in.cfg.FindWaiting != nil {
		s, err := in.cfg.FindWaiting(ctx, tenant, id, limit)
		if err != nil {
			return a, fmt.Errorf("explain job %s: %w", id, err)
		}
		a.Stream = &s
	}
	a.State, a.Why = stateOf(a)
	if name := in.senderOf(a); name != "" {
		p, err := in.Provider(ctx, name)
		if err != nil {
			return a, fmt.Errorf("explain job %s: %w", id, err)
		}
		a.Provider = &p
	}
	return a, nil
}

// senderOf is the provider that will send a job waiting in the stream:
// its own, else its channel's default; "" when none is configured or the
// job is not waiting there.
func (in *Inspector) senderOf(a JobAnswer) string {
	if a.State != StateWaiting || a.Stream == nil || a.Stream.Job == nil || a.Why == ledger.DeferUserLimit || a.Why == ledger.DeferDigest || a.Why == ledger.DeferDigestUnpublished {
		return "" // the user's cap holds it, not its provider
	}
	w := a.Stream.Job
	for _, p := range in.cfg.Providers {
		if w.Provider != "" && p.Name == w.Provider || w.Provider == "" && p.Default && p.Channel == w.Channel {
			return p.Name
		}
	}
	return ""
}

// stateOf sums a job's answer up (see JobAnswer.State and Why).
func stateOf(a JobAnswer) (state, why string) {
	l := a.Ledger
	inStream := a.Stream != nil && a.Stream.Job != nil
	replayed := inStream && len(a.DeadLetters) > 0 && a.Stream.Job.Stored.After(a.DeadLetters[len(a.DeadLetters)-1].Stored)
	switch {
	case l.Sent:
		return StateSent, ""
	case l.LeaseOwner != "" && l.DeferredFor == ledger.WaitSlot && l.DueAt != nil && l.DueAt.After(a.At):
		return StateWaiting, ledger.WaitSlot
	case l.LeaseOwner != "": // under way now: a replay kept (--keep) its dead letter
		return StateSending, ""
	case len(a.DeadLetters) > 0 && !replayed:
		return a.DeadLetters[len(a.DeadLetters)-1].Kind, ""
	case l.Outcome != "" && !replayed:
		return l.Outcome, ""
	case l.DeferredFor != "" && l.DeferredFor != ledger.WaitSlot:
		return StateWaiting, l.DeferredFor
	case l.Attempts > 0:
		return StateWaiting, WhyRetry
	case inStream:
		return StateWaiting, WhyStream
	case l.Found:
		return StateWaiting, ""
	}
	return StateUnknown, ""
}

// deadLetterOf is d without what names the recipient or the content.
func deadLetterOf(d *queue.DeadLetter) DeadLetter {
	out := DeadLetter{DeadRow: RowOf(d)}
	var j struct {
		Provider  any `json:"provider"`
		CreatedAt any `json:"created_at"`
		ExpiresAt any `json:"expires_at"`
	}
	if json.Unmarshal(d.Data, &j) == nil {
		str := func(v any) string { s, _ := v.(string); return s }
		out.Provider = str(j.Provider)
		out.CreatedAt, out.ExpiresAt = str(j.CreatedAt), str(j.ExpiresAt)
	}
	return out
}
