package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DeadLetter is one job stored in the dead-letter stream: failed (Kind
// Dead, on notify.dead.<channel>) or dropped on purpose (Kind Suppressed,
// on notify.suppressed.<channel>). Data is the job's original bytes, which
// hold the recipient and the message: print them only on request.
type DeadLetter struct {
	Seq        uint64    // sequence in the dead-letter stream
	Stored     time.Time // when the dead-letter stream stored it
	Subject    string    // notify.dead.<channel> or notify.suppressed.<channel>
	Kind       Outcome   // Dead or Suppressed, from the subject
	Channel    string    // the subject's <channel> token
	Reason     string    // Notifier-Reason
	Detail     string    // Notifier-Detail
	JobSubject string    // Notifier-Subject: the subject the job was published on
	JobID      string    // the job's id when Data holds a valid one, else ""
	UserID     string    // the job's user_id when Data holds one, else ""
	// Tenant is the job's tenant as the dispatcher saw it (jobTenant of
	// JobSubject): its subject's, else the Notifier-Tenant header's (a
	// fair lane's job), else its own tenant field; "" the default
	// tenant's, and a job's whose header or field names no tenant.
	Tenant string
	Header nats.Header // every header, as stored
	Data   []byte      // the job's original bytes
}

// ReplaySubject is the subject a replay publishes the job on: its original
// subject when that is a job subject (so a priority job stays on the
// priority lane, a tenant's job in its tenant's queue), else
// notify.jobs.<channel>.
func (d *DeadLetter) ReplaySubject() string {
	if k, ok := ParseJobSubject(d.JobSubject); ok && subjectToken(k.Channel) == k.Channel {
		return k.Subject()
	}
	if ch := ChannelOf(d.JobSubject); ch != "" && subjectToken(ch) == ch {
		return JobSubject(ch, IsHigh(d.JobSubject))
	}
	return JobSubject(d.Channel, false)
}

// DeadFilter selects dead letters. A zero field selects everything, so the
// zero DeadFilter selects the whole stream. Kind, Channel and Since are
// applied by the server (subject filters and a start time), Reason, JobID,
// UserID and Tenant by the reader.
type DeadFilter struct {
	Kind    Outcome   // Dead, Suppressed, or "" for both
	Channel string    // a <channel> token such as "sms", or "" for all
	Reason  string    // Notifier-Reason, or "" for all
	Since   time.Time // stored at or after this instant; zero for all
	JobID   string    // this job id only, or "" for all
	UserID  string    // this user's jobs only (user_id), or "" for all
	Tenant  string    // this tenant's jobs only, or "" for all
	Limit   int       // at most this many (the oldest first); 0 for no limit
	// Last reads only the newest Last messages of the dead-letter stream
	// (before the other filters; 0 reads them all), so that a lookup the
	// reader filters (JobID, UserID...) costs about that many messages,
	// however many letters the stream holds: where letters were deleted
	// among them (a replay's), the read starts as many sequences earlier,
	// so that it still takes in the newest Last. Not with Since.
	Last int
	// UpTo, when not 0, selects the letters stored at or before this
	// stream sequence only: a second read of a selection (a replay after
	// its plan) takes no letter stored after the first.
	UpTo uint64
}

// Validate checks that Kind is Dead, Suppressed or empty, that Channel is a
// single subject token (no wildcard can widen the selection), and that
// Limit is not negative.
func (f DeadFilter) Validate() error {
	var errs []error
	if f.Kind != "" && f.Kind != Dead && f.Kind != Suppressed {
		errs = append(errs, fmt.Errorf("kind: %q is not %q or %q", f.Kind, Dead, Suppressed))
	}
	if f.Channel != "" && subjectToken(f.Channel) != f.Channel {
		errs = append(errs, fmt.Errorf("channel: %s is not a channel name (letters, digits, - and _)", echo(f.Channel)))
	}
	if f.Limit < 0 {
		errs = append(errs, fmt.Errorf("limit: must not be negative, got %d", f.Limit))
	}
	if f.Last < 0 {
		errs = append(errs, fmt.Errorf("last: must not be negative, got %d", f.Last))
	}
	if f.Last > 0 && !f.Since.IsZero() {
		errs = append(errs, errors.New("last: not with since (each sets where the read starts)"))
	}
	return errors.Join(errs...)
}

// subjects are the server-side subject filters of f; nil selects the
// whole stream.
func (f DeadFilter) subjects() []string {
	ch := f.Channel
	if ch == "" {
		ch = ">"
	}
	switch f.Kind {
	case Dead:
		return []string{deadPrefix + ch}
	case Suppressed:
		return []string{suppressedPrefix + ch}
	}
	if f.Channel == "" {
		return nil
	}
	return []string{deadPrefix + ch, suppressedPrefix + ch}
}

// match applies the filters the server does not.
func (f DeadFilter) match(d *DeadLetter) bool {
	return (f.Reason == "" || d.Reason == f.Reason) && (f.JobID == "" || d.JobID == f.JobID) &&
		(f.UserID == "" || d.UserID == f.UserID) && (f.Tenant == "" || d.Tenant == f.Tenant)
}

// DeadLetters reads, deletes and republishes the jobs of the dead-letter
// stream (nats.dead_stream). It holds no state of its own and is safe for
// concurrent use. The streams must exist (EnsureStreams, run by every
// `notifier run`).
type DeadLetters struct {
	js        jetstream.JetStream
	stream    string // the dead-letter stream
	jobStream string // where Republish sends a job
}

// NewDeadLetters reads cfg's dead-letter stream through js and republishes
// to cfg's job stream.
func NewDeadLetters(js jetstream.JetStream, cfg Config) *DeadLetters {
	cfg = cfg.WithDefaults()
	return &DeadLetters{js: js, stream: cfg.DeadStream, jobStream: cfg.Stream}
}

// readBatch bounds the messages a listing buffers ahead of its reader.
const readBatch = 128

// idleCheck is how long List waits for the next message before it asks the
// server whether any is left (one deleted meanwhile is never delivered).
const idleCheck = 2 * time.Second

// List returns the dead letters f selects, oldest first, and whether more
// than f.Limit matched (then the first f.Limit are returned). It reads the
// stream once with an ordered consumer that the server filters by subject
// (f.Kind, f.Channel) and starts at f.Since, and deletes that consumer when
// Stream is the dead-letter stream's name.
func (r *DeadLetters) Stream() string { return r.stream }

// done. Letters stored while it reads may or may not be included.
func (r *DeadLetters) List(ctx context.Context, f DeadFilter) (letters []*DeadLetter, more bool, err error) {
	err = r.each(ctx, f, func(d *DeadLetter) bool {
		if f.Limit > 0 && len(letters) == f.Limit {
			more = true
			return false
		}
		letters = append(letters, d)
		return true
	})
	return letters, more, err
}

// Each calls fn with each dead letter f selects, oldest first, as it
// reads them, and holds none: a selection of any size in constant memory
// (List holds them all). It stops after f.Limit letters (0: none), or when
// fn returns false.
func (r *DeadLetters) Each(ctx context.Context, f DeadFilter, fn func(*DeadLetter) bool) error {
	n := 0
	return r.each(ctx, f, func(d *DeadLetter) bool {
		n++
		return fn(d) && (f.Limit == 0 || n < f.Limit)
	})
}

// each reads the letters f selects (all that match: f.Limit is the
// caller's) until fn returns false.
func (r *DeadLetters) each(ctx context.Context, f DeadFilter, fn func(*DeadLetter) bool) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("list dead letters: %w", err)
	}
	s, err := r.js.Stream(ctx, r.stream)
	if err != nil {
		return fmt.Errorf("list dead letters: stream %s: %w", r.stream, err)
	}
	cc := jetstream.OrderedConsumerConfig{FilterSubjects: f.subjects(), InactiveThreshold: time.Minute}
	if !f.Since.IsZero() {
		since := f.Since
		cc.DeliverPolicy, cc.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	if f.Last > 0 {
		st := s.CachedInfo().State
		if st.Msgs == 0 {
			return nil
		}
		// The newest Last letters, not sequences: a replay deletes the
		// letters it republishes, and the gaps it leaves hold none. The
		// stream's interior gaps widen the read (by at most NumDeleted
		// sequences), so it takes in at least Last letters.
		span := uint64(f.Last) + uint64(max(st.NumDeleted, 0))
		if first := st.LastSeq - min(st.LastSeq, span) + 1; st.Msgs > uint64(f.Last) && first > st.FirstSeq {
			cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, first
		}
	}
	cons, err := s.OrderedConsumer(ctx, cc)
	if err != nil {
		return fmt.Errorf("list dead letters: consumer on %s: %w", r.stream, err)
	}
	defer func() {
		// The server would drop it after a minute of inactivity anyway.
		if info := cons.CachedInfo(); info != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = s.DeleteConsumer(dctx, info.Name)
			cancel()
		}
	}()
	if info := cons.CachedInfo(); info == nil || info.NumPending == 0 {
		return nil
	}
	batch := readBatch
	if f.Limit > 0 && f.Limit < batch { // (f.Limit+1 overflows at the largest int)
		batch = f.Limit + 1
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(batch))
	if err != nil {
		return fmt.Errorf("list dead letters: read %s: %w", r.stream, err)
	}
	defer it.Stop()
	for {
		nctx, cancel := context.WithTimeout(ctx, idleCheck)
		m, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				info, ierr := cons.Info(ctx)
				if ierr != nil {
					return fmt.Errorf("list dead letters: read %s: %w", r.stream, ierr)
				}
				if info.NumPending == 0 {
					return nil
				}
				continue
			}
			return fmt.Errorf("list dead letters: read %s: %w", r.stream, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("list dead letters: read %s: %w", r.stream, err)
		}
		if f.UpTo > 0 && md.Sequence.Stream > f.UpTo {
			return nil
		}
		d := newDeadLetter(md.Sequence.Stream, md.Timestamp, m.Subject(), m.Headers(), m.Data())
		if f.match(d) && !fn(d) {
			return nil
		}
		if md.NumPending == 0 {
			return nil
		}
	}
}

// Get returns the dead letter at sequence seq. A sequence with no message
// (never stored, aged out or deleted) is an error wrapping
// jetstream.ErrMsgNotFound.
func (r *DeadLetters) Get(ctx context.Context, seq uint64) (*DeadLetter, error) {
	s, err := r.js.Stream(ctx, r.stream)
	if err != nil {
		return nil, fmt.Errorf("get dead letter %d: stream %s: %w", seq, r.stream, err)
	}
	m, err := s.GetMsg(ctx, seq)
	if err != nil {
		return nil, fmt.Errorf("get dead letter %d from %s: %w", seq, r.stream, err)
	}
	return newDeadLetter(m.Sequence, m.Time, m.Subject, m.Header, m.Data), nil
}

// Delete removes the dead letter at sequence seq from the stream. A
// sequence with no message is an error.
func (r *DeadLetters) Delete(ctx context.Context, seq uint64) error {
	s, err := r.js.Stream(ctx, r.stream)
	if err != nil {
		return fmt.Errorf("delete dead letter %d: stream %s: %w", seq, r.stream, err)
	}
	if err := s.DeleteMsg(ctx, seq); err != nil {
		return fmt.Errorf("delete dead letter %d from %s: %w", seq, r.stream, err)
	}
	return nil
}

// Republish publishes d's job bytes unchanged on d.ReplaySubject() to the
// job stream (a publish any other stream would take fails) with
// Nats-Msg-Id msgID and the extra headers header, and returns its sequence
// in the job stream. msgID must differ from the job id: the job stream
// drops a Nats-Msg-Id it saw within its duplicate window, and the job's
// first publish used the id. A msgID seen within the window is not stored
// again (and its earlier sequence is returned). The dead letter is left in
// place: Delete it once the caller is done.
func (r *DeadLetters) Republish(ctx context.Context, d *DeadLetter, msgID string, header nats.Header) (uint64, error) {
	subject := d.ReplaySubject()
	if msgID == "" {
		return 0, fmt.Errorf("republish dead letter %d to %s: empty Nats-Msg-Id", d.Seq, subject)
	}
	m := &nats.Msg{Subject: subject, Data: d.Data, Header: nats.Header{}}
	for k, vs := range header {
		m.Header[k] = append([]string(nil), vs...)
	}
	if t := d.Header.Get(HeaderTenant); t != "" && m.Header.Get(HeaderTenant) == "" {
		m.Header.Set(HeaderTenant, t) // a fair lane's job stays its tenant's
	}
	ack, err := r.js.PublishMsg(ctx, m, jetstream.WithMsgID(msgID), jetstream.WithExpectStream(r.jobStream))
	if err != nil {
		return 0, fmt.Errorf("republish dead letter %d to %s: %w", d.Seq, subject, err)
	}
	return ack.Sequence, nil
}

func newDeadLetter(seq uint64, stored time.Time, subject string, h nats.Header, data []byte) *DeadLetter {
	d := &DeadLetter{
		Seq: seq, Stored: stored, Subject: subject, Header: h, Data: data,
		Reason:     h.Get(HeaderReason),
		Detail:     h.Get(HeaderDetail),
		JobSubject: h.Get(HeaderSubject),
	}
	d.JobID, d.UserID = jobIDs(data)
	d.Tenant, _ = jobTenant(d.JobSubject, h, data) // as the dispatcher saw it ("" for a name that is none)
	switch {
	case strings.HasPrefix(subject, deadPrefix):
		d.Kind, d.Channel = Dead, subject[len(deadPrefix):]
	case strings.HasPrefix(subject, suppressedPrefix):
		d.Kind, d.Channel = Suppressed, subject[len(suppressedPrefix):]
	}
	return d
}

// jobID is the id field of a job's bytes when it is a valid job id (SPEC
// §2), else "": the bytes of an invalid job may hold anything.
func jobID(data []byte) string {
	id, _ := jobIDs(data)
	return id
}

// jobIDs are the id field of a job's bytes when it is a valid job id (SPEC
// §2), else "", and its user_id field as it is (a string, else "").
func jobIDs(data []byte) (id, user string) {
	var j struct {
		ID     any `json:"id"`
		UserID any `json:"user_id"`
	}
	if json.Unmarshal(data, &j) != nil {
		return "", ""
	}
	id, _ = j.ID.(string)
	user, _ = j.UserID.(string)
	if !ValidID(id) {
		id = ""
	}
	return id, user
}
