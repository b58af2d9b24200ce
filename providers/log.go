package providers

import (
	"context"
	"encoding/json"
	"io"
	"slices"
	"sync"
	"time"
	"unicode/utf8"
)

// Log is the log provider, a development tool: each Send writes one JSON
// line describing the message to Options.Stdout and is accepted. The line
// carries the recipient masked (see Mask) and the body's length, never the
// body, the title or data values:
//
//	{"time":"…","provider":"dev","id":"j1","user_id":"u1","channel":"sms","to":"+4479•••••56","body_chars":11,"segments":1}
//
// Lines are written whole, one Send at a time; Log is safe for concurrent
// use. A write error is ErrTransient.
type Log struct {
	name string
	now  func() time.Time

	mu  sync.Mutex
	out io.Writer
}

var _ Provider = (*Log)(nil)

// logLine is one line written by Log.
type logLine struct {
	Time      time.Time `json:"time"`
	Provider  string    `json:"provider"`
	ID        string    `json:"id"`
	UserID    string    `json:"user_id"`
	Channel   string    `json:"channel"`
	To        string    `json:"to"`
	BodyChars int       `json:"body_chars"`
	Segments  int       `json:"segments,omitempty"`
	HasTitle  bool      `json:"has_title,omitempty"`
	DataKeys  []string  `json:"data_keys,omitempty"`
}

// logKind is the log entry of kinds: any channel, no keys of its own.
var logKind = kind{name: "log", build: builder(newLog)}

// NewLog builds a log provider from a kind log entry.
func NewLog(cfg Config, opts Options) (*Log, error) {
	return newChecked(cfg, opts, "log", "log provider", newLog)
}

// newLog is NewLog for an entry already checked (kind log,
// defaults applied, valid): NewRegistry checks every entry first.
func newLog(cfg Config, opts Options) (*Log, error) {
	opts = opts.withDefaults()
	return &Log{name: cfg.Name, now: opts.Now, out: opts.Stdout}, nil
}

// Name returns the configured name.
func (l *Log) Name() string { return l.name }

// Send writes m's line. It fails only when ctx has ended or the write fails.
func (l *Log) Send(ctx context.Context, m *Message) error {
	if m == nil {
		return &Error{Provider: l.name, Class: ErrPermanent, Detail: "nil message"}
	}
	s := newScrubber(m)
	if err := ctx.Err(); err != nil {
		return &Error{Provider: l.name, Class: ErrTransient, Detail: "gave up: " + causeDetail(err, s), Err: err}
	}
	line := logLine{
		Time:      l.now().UTC(),
		Provider:  l.name,
		ID:        m.ID,
		UserID:    m.UserID,
		Channel:   m.Channel,
		To:        Mask(m.Channel, m.To),
		BodyChars: utf8.RuneCountInString(m.Body),
		HasTitle:  m.Title != "",
	}
	if m.Channel == "sms" {
		line.Segments = Segments(m.Body)
	}
	for k := range m.Data {
		line.DataKeys = append(line.DataKeys, k)
	}
	slices.Sort(line.DataKeys)
	b, err := json.Marshal(line)
	if err != nil {
		return &Error{Provider: l.name, Class: ErrPermanent, Detail: "encode line: " + causeDetail(err, s), Err: err}
	}
	b = append(b, '\n')

	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.out.Write(b); err != nil {
		return &Error{Provider: l.name, Class: ErrTransient, Detail: "write: " + causeDetail(err, s), Err: err}
	}
	return nil
}
