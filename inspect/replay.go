package inspect

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/queue"
)

// ReplayOptions are a replay's choices.
type ReplayOptions struct {
	// Keep keeps each dead letter after its job is republished.
	Keep bool
	// IncludeInvalid and IncludeExpired replay jobs dead for reason
	// invalid and jobs suppressed for reason expired, which are skipped
	// otherwise: they could only end the same way again.
	IncludeInvalid, IncludeExpired bool
	// Now is the clock of the replay's stamps; nil is time.Now.
	Now func() time.Time
}

// ReplaySummary counts what a replay did (or, planned, would do).
type ReplaySummary struct {
	Selected       int // dead letters the filter selected
	Replayed       int // republished to NOTIFY (planned: to be)
	AlreadySent    int // the ledger says sent: not republished, dead letter kept
	SkippedInvalid int // reason invalid, without IncludeInvalid
	SkippedExpired int // reason expired, without IncludeExpired
	Failed         int // not republished because of an error
	NotDeleted     int // republished, but the dead letter could not be deleted
}

// ReplayPlan is what a replay would republish: the selected dead letters
// less those skipped, oldest first. It holds the selection, not the
// letters: a replay reads them again as it goes, so that a million letters
// are never in memory at once.
type ReplayPlan struct {
	// Filter is the selection, bounded to the letters the plan counted
	// (UpTo, the last one's sequence): a letter stored after the plan is
	// not replayed.
	Filter  queue.DeadFilter
	Summary ReplaySummary // Selected, SkippedInvalid, SkippedExpired; Replayed: the letters to replay
}

// skip says why o does not replay d ("" when it does): a summary's
// SkippedInvalid or SkippedExpired.
func (o ReplayOptions) skip(d *queue.DeadLetter) string {
	switch {
	case d.Kind == queue.Dead && d.Reason == ledger.ReasonInvalid && !o.IncludeInvalid:
		return ledger.ReasonInvalid
	case d.Kind == queue.Suppressed && d.Reason == ledger.ReasonExpired && !o.IncludeExpired:
		return ledger.ReasonExpired
	}
	return ""
}

// ReplayLedger is the part of the job ledger a replay uses
// (ledger.Redis).
type ReplayLedger interface {
	ResetForReplay(ctx context.Context, id string) (sent bool, err error)
}

// Replay outcomes of one dead letter.
const (
	Replayed    = "replayed"     // republished, dead letter deleted (or kept with Keep)
	AlreadySent = "already_sent" // the ledger says sent: not republished, dead letter kept
	Failed      = "failed"       // not republished: Err says why
	NotDeleted  = "not_deleted"  // republished, but the delete failed: Err says why
)

// ReplayResult is what a replay did with one dead letter.
type ReplayResult struct {
	Letter  *queue.DeadLetter
	Outcome string // Replayed, AlreadySent, Failed or NotDeleted
	Subject string // where it was republished (Replayed, NotDeleted)
	Kept    bool   // Replayed with Keep: the dead letter is still there
	Err     error
}

// PlanReplay counts the dead letters f selects and those o sets aside,
// reading them once and holding none; each, if set, is told of every
// letter the replay would republish, as it is read (a dry run prints
// them). It changes nothing.
func PlanReplay(ctx context.Context, dead *queue.DeadLetters, f queue.DeadFilter, o ReplayOptions, each func(*queue.DeadLetter)) (ReplayPlan, error) {
	p := ReplayPlan{Filter: f}
	err := dead.Each(ctx, f, func(d *queue.DeadLetter) bool {
		p.Summary.Selected++
		p.Filter.UpTo = d.Seq
		switch o.skip(d) {
		case ledger.ReasonInvalid:
			p.Summary.SkippedInvalid++
		case ledger.ReasonExpired:
			p.Summary.SkippedExpired++
		default:
			p.Summary.Replayed++
			if each != nil {
				each(d)
			}
		}
		return true
	})
	if err != nil {
		return p, err
	}
	return p, nil
}

// Replay republishes the plan's jobs to NOTIFY, each on the subject it was
// first published on with its bytes unchanged, a Nats-Msg-Id of
// <job-id>:replay:<unix-ns> and the header Notifier-Replayed. Before a job
// is republished its ledger record is reset (its earlier failures no
// longer count against max_attempts); a job the ledger says was sent is
// never republished. After a publish the dead letter is deleted unless
// o.Keep, so a second replay of the same selection replays nothing. each,
// if set, is told of every dead letter's result as it happens.
//
// The error is ctx's when it ends the replay early, or names the failures.
func Replay(ctx context.Context, dead *queue.DeadLetters, led ReplayLedger, p ReplayPlan, o ReplayOptions,
	each func(ReplayResult)) (ReplaySummary, error) {
	s := p.Summary
	s.Replayed = 0
	now := o.Now
	if now == nil {
		now = time.Now
	}
	if p.Summary.Replayed == 0 {
		return s, nil
	}
	err := dead.Each(ctx, p.Filter, func(d *queue.DeadLetter) bool {
		if ctx.Err() != nil || o.skip(d) != "" {
			return ctx.Err() == nil
		}
		r := replayOne(ctx, dead, led, d, o.Keep, now())
		switch r.Outcome {
		case Replayed:
			s.Replayed++
		case AlreadySent:
			s.AlreadySent++
		case Failed:
			s.Failed++
		case NotDeleted:
			s.Replayed++
			s.NotDeleted++
		}
		if each != nil {
			each(r)
		}
		return true
	})
	if cerr := ctx.Err(); cerr != nil {
		return s, fmt.Errorf("replay stopped after %d: %w", s.Replayed, cerr)
	}
	if err != nil {
		return s, fmt.Errorf("replay stopped after %d: %w", s.Replayed, err)
	}
	if s.Failed > 0 || s.NotDeleted > 0 {
		return s, fmt.Errorf("replay: %d failed, %d dead letters not deleted", s.Failed, s.NotDeleted)
	}
	return s, nil
}

// replayOne replays d: reset its ledger record, republish, delete the dead
// letter.
func replayOne(ctx context.Context, dead *queue.DeadLetters, led ReplayLedger, d *queue.DeadLetter, keep bool, now time.Time) ReplayResult {
	r := ReplayResult{Letter: d}
	id := d.JobID
	// The job's ledger record and message ids are its tenant's, as the
	// dispatcher keys them (<tenant>/<id>): the bare id is the default
	// tenant's job of that id.
	key := queue.MsgID(d.Tenant, id)
	msgID := key + ":replay:" + strconv.FormatInt(now.UnixNano(), 10)
	if id != "" {
		sent, err := led.ResetForReplay(ctx, key)
		if err != nil {
			r.Outcome, r.Err = Failed, err
			return r
		}
		if sent {
			r.Outcome = AlreadySent
			return r
		}
	} else {
		// An invalid job (IncludeInvalid) has no id to track.
		msgID = "replay:" + dead.Stream() + ":" + strconv.FormatUint(d.Seq, 10) + ":" + strconv.FormatInt(now.UnixNano(), 10)
	}
	h := nats.Header{}
	h.Set(ledger.HeaderReplayed, now.UTC().Format(time.RFC3339))
	if _, err := dead.Republish(ctx, d, msgID, h); err != nil {
		r.Outcome, r.Err = Failed, err
		return r
	}
	r.Outcome, r.Subject = Replayed, d.ReplaySubject()
	if keep {
		r.Kept = true
		return r
	}
	if err := dead.Delete(ctx, d.Seq); err != nil {
		r.Outcome, r.Err = NotDeleted, err
	}
	return r
}
