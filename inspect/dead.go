package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/internal/text"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
)

// DeadRow is a dead letter as `notifier dead list --json` prints it: never the
// job's recipient, body, title or data.
type DeadRow struct {
	Seq        uint64    `json:"seq"`
	Stored     time.Time `json:"stored"`
	Kind       string    `json:"kind"`
	Channel    string    `json:"channel"`
	Reason     string    `json:"reason"`
	JobID      string    `json:"job_id"`
	UserID     string    `json:"user_id,omitempty"`
	Tenant     string    `json:"tenant,omitempty"`
	Detail     string    `json:"detail"`
	JobSubject string    `json:"job_subject"`
}

// RowOf is d as a DeadRow, its texts made printable.
func RowOf(d *queue.DeadLetter) DeadRow {
	return DeadRow{Seq: d.Seq, Stored: d.Stored.UTC(), Kind: string(d.Kind), Channel: text.Printable(d.Channel),
		Reason: text.Printable(d.Reason), JobID: d.JobID, UserID: text.Printable(d.UserID), Tenant: text.Printable(d.Tenant),
		Detail: text.Printable(d.Detail), JobSubject: text.Printable(d.JobSubject)}
}

// FindDead finds the dead letter at sequence arg (unless byID), or those
// of job id arg.
func FindDead(ctx context.Context, r *queue.DeadLetters, arg string, byID bool) ([]*queue.DeadLetter, error) {
	if seq, err := strconv.ParseUint(arg, 10, 64); err == nil && seq > 0 && !byID { // no message has sequence 0: "0" is a job id
		d, err := r.Get(ctx, seq)
		if err == nil {
			return []*queue.DeadLetter{d}, nil
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, err
		}
	}
	letters, _, err := r.List(ctx, queue.DeadFilter{JobID: arg})
	if err != nil {
		return nil, err
	}
	if len(letters) == 0 {
		return nil, fmt.Errorf("no dead letter with sequence or job id %q", text.Printable(arg))
	}
	return letters, nil
}

// DeadView is one dead letter as `notifier dead show` prints it: the
// recipient masked, the content hidden unless revealed.
type DeadView struct {
	DeadRow
	Subject string            `json:"subject"`
	Replay  string            `json:"replays_to"`
	Headers map[string]string `json:"headers"`
	Job     map[string]any    `json:"job,omitempty"` // recipient masked; hidden values as "(hidden, N bytes)"
	// Order of Job's keys for the text form.
	order []string
	// Raw is the job's bytes when they are not a JSON object: set only
	// with --reveal (nothing in them could be masked).
	Raw     string `json:"raw,omitempty"`
	NotJSON int    `json:"not_json_bytes,omitempty"`
}

// jobFields is the order of a job's fields (SPEC §2).
var jobFields = []string{"id", "user_id", "channel", "to", "body", "title", "data", "provider", "expires_at", "created_at"}

// ViewOf is d as a DeadView; reveal shows the body, title and data (the
// recipient stays masked).
func ViewOf(d *queue.DeadLetter, reveal bool) DeadView {
	v := DeadView{DeadRow: RowOf(d), Subject: d.Subject, Replay: d.ReplaySubject(), Headers: map[string]string{}}
	for k, vs := range d.Header {
		v.Headers[text.Printable(k)] = text.Printable(strings.Join(vs, ", "))
	}
	var fields map[string]any
	if json.Unmarshal(d.Data, &fields) != nil || fields == nil {
		v.NotJSON = len(d.Data)
		if reveal {
			v.Raw = text.Printable(string(d.Data))
		}
		return v
	}
	channel, _ := fields["channel"].(string)
	if !queue.IsChannel(channel) {
		channel = d.Channel
	}
	hidden := func(x any) string {
		b, _ := json.Marshal(x)
		if s, ok := x.(string); ok {
			return fmt.Sprintf("(hidden, %d bytes)", len(s))
		}
		return fmt.Sprintf("(hidden, %d bytes of JSON)", len(b))
	}
	v.Job = map[string]any{}
	for _, k := range jobFields {
		x, ok := fields[k]
		if !ok {
			continue
		}
		switch k {
		case "to":
			if s, ok := x.(string); ok {
				x = providers.Mask(channel, s)
			} else {
				x = hidden(x)
			}
		case "body", "title":
			if !reveal {
				x = hidden(x)
			}
		case "data":
			if m, ok := x.(map[string]any); ok && !reveal {
				masked := map[string]any{}
				for dk, dv := range m {
					masked[dk] = hidden(dv)
				}
				x = masked
			} else if !reveal {
				x = hidden(x)
			}
		}
		v.Job[k] = x
		v.order = append(v.order, k)
	}
	var others []string
	for k := range fields {
		if !isJobField(k) {
			others = append(others, k)
		}
	}
	sort.Strings(others)
	for _, k := range others {
		x := fields[k]
		if !reveal {
			x = hidden(x)
		}
		v.Job[k] = x
		v.order = append(v.order, k)
	}
	return v
}

func isJobField(k string) bool {
	for _, f := range jobFields {
		if f == k {
			return true
		}
	}
	return false
}

// Keys are the job's fields in the order `dead show` prints them: SPEC
// §2's, then any others by name.
func (v DeadView) Keys() []string { return v.order }
