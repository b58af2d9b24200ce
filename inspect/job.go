package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/notifier/notifier/queue"
)

// JobAnswer is what Inspector.Job says of one job id.
type JobAnswer struct {
	Job string    `json:"job"`
	At  time.Time `json:"at"` // when it was read, on the Redis clock
	// State sums it up, the first that holds: sent, sending (a lease is
	// held), dead or suppressed (its latest dead letter, else the ledger),
	// waiting (known to the ledger, neither sent nor ended: deferred,
	// retrying, or in a provider's queue), or unknown (no record: not taken
	// yet, never published, or forgotten after dedup_ttl).
	State  string `json:"state"`
	Ledger Ledger `json:"ledger"`
	// DeadLetters are the job's dead letters, oldest first (a job
	// dead-lettered again after a replay has several).
	DeadLetters []DeadLetter `json:"dead_letters"`
}

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
	// KeptForSeconds is how long the record is still kept (dedup_ttl after
	// its last change).
	KeptForSeconds float64 `json:"kept_for_seconds,omitempty"`
}

// DeadLetter is one dead letter of the job, without its recipient, body,
// title or data: its row (as `notifier dead list --json` shows it) and the
// job's fields that name no recipient and no content.
type DeadLetter struct {
	DeadRow
	UserID    string `json:"user_id,omitempty"`
	Provider  string `json:"provider,omitempty"`
	Tenant    string `json:"tenant,omitempty"`
	CreatedAt string `json:"created_at,omitempty"`
	ExpiresAt string `json:"expires_at,omitempty"`
}

// Job answers for job id: its ledger record and its dead letters. Finding
// the dead letters reads the whole dead-letter stream (as `notifier dead
// show <id>` does).
func (in *Inspector) Job(ctx context.Context, id string) (JobAnswer, error) {
	if !queue.ValidID(id) {
		return JobAnswer{}, fmt.Errorf("explain job: a job id is 1 to 128 of A-Z a-z 0-9 . _ : -: %w", ErrInvalid)
	}
	now, err := in.redisNow(ctx)
	if err != nil {
		return JobAnswer{}, fmt.Errorf("explain job %s: %w", id, err)
	}
	a := JobAnswer{Job: id, At: now, DeadLetters: []DeadLetter{}}
	rec, err := in.ledger.Record(ctx, id)
	if err != nil {
		return a, fmt.Errorf("explain job: %w", err)
	}
	a.Ledger = Ledger{Found: rec.Found, Sent: rec.Sent, SentSeq: rec.Seq, Attempts: rec.Attempts, LastError: rec.LastError, LeaseOwner: rec.Owner,
		Outcome: rec.Outcome, Reason: rec.Reason, KeptForSeconds: rec.TTL.Seconds()}
	if !rec.LeaseUntil.IsZero() {
		u := rec.LeaseUntil.UTC()
		a.Ledger.LeaseUntil = &u
	}
	if in.dead != nil {
		letters, _, err := in.dead.List(ctx, queue.DeadFilter{JobID: id})
		if err != nil {
			return a, fmt.Errorf("explain job %s: %w", id, err)
		}
		for _, d := range letters {
			a.DeadLetters = append(a.DeadLetters, deadLetterOf(d))
		}
	}
	a.State = stateOf(a)
	return a, nil
}

// stateOf sums a job's answer up (see JobAnswer.State).
func stateOf(a JobAnswer) string {
	switch {
	case a.Ledger.Sent:
		return StateSent
	case a.Ledger.LeaseOwner != "": // under way now: a replay kept (--keep) its dead letter
		return StateSending
	case len(a.DeadLetters) > 0:
		return a.DeadLetters[len(a.DeadLetters)-1].Kind
	case a.Ledger.Outcome != "":
		return a.Ledger.Outcome
	case a.Ledger.Found:
		return StateWaiting
	}
	return StateUnknown
}

// deadLetterOf is d without what names the recipient or the content.
func deadLetterOf(d *queue.DeadLetter) DeadLetter {
	out := DeadLetter{DeadRow: RowOf(d)}
	var j struct {
		UserID    any `json:"user_id"`
		Provider  any `json:"provider"`
		Tenant    any `json:"tenant"`
		CreatedAt any `json:"created_at"`
		ExpiresAt any `json:"expires_at"`
	}
	if json.Unmarshal(d.Data, &j) == nil {
		str := func(v any) string { s, _ := v.(string); return s }
		out.UserID, out.Provider, out.Tenant = str(j.UserID), str(j.Provider), str(j.Tenant)
		out.CreatedAt, out.ExpiresAt = str(j.CreatedAt), str(j.ExpiresAt)
	}
	return out
}
