package queue

import (
	"fmt"
	"net/mail"
	"strings"
	"time"
	"unicode/utf8"
)

// Channels are the channels a job can be for, in the order SPEC §2 lists them.
var Channels = []string{"sms", "push", "email"}

// Limits of SPEC §2.
const (
	MaxJobBytes   = 64 << 10 // a published job, in bytes
	MaxBodyBytes  = 16 << 10 // the body, in bytes of UTF-8
	MaxIDLen      = 128      // the id, in characters of [A-Za-z0-9._:-]
	MaxUserIDLen  = 256      // the user_id, in characters
	maxProvider   = 128      // the provider name, in characters (not in SPEC: keeps log lines sane)
	maxEmailLen   = 254      // RFC 5321 path limit
	minDeviceLen  = 8        // shortest plausible push token
	maxDeviceLen  = 4096     // longest plausible push token
	maxEchoLength = 32       // longest channel value echoed in an error
)

// Job is one notification to send (SPEC §2). A Job is a plain value: it is
// not safe for concurrent mutation, and its zero value is not a valid job.
// Times are zero when absent.
type Job struct {
	ID        string            `json:"id"`
	UserID    string            `json:"user_id"`
	Channel   string            `json:"channel"`
	To        string            `json:"to"`
	Body      string            `json:"body"`
	Title     string            `json:"title,omitempty"`
	Data      map[string]string `json:"data,omitempty"`
	Provider  string            `json:"provider,omitempty"`
	Tenant    string            `json:"tenant,omitempty"`    // "" is the default tenant
	Category  Category          `json:"category,omitempty"`  // "" takes the lane's, then the channel's
	ExpiresAt time.Time         `json:"expires_at,omitzero"` // RFC 3339
	CreatedAt time.Time         `json:"created_at,omitzero"` // RFC 3339
}

// InvalidError says which field of a job breaks which rule. Error() is
// "<field>: <rule>" ("user_id: required"), or just the rule for a problem
// with the message as a whole ("not valid JSON (syntax error at byte 7)").
// It never contains the value of to, body, title, data or user_id: it is
// written to dead-letter headers and logs.
type InvalidError struct {
	Field string // JSON name of the field, "" for the whole message
	Rule  string // the rule that was broken, in words
}

func (e *InvalidError) Error() string {
	if e.Field == "" {
		return e.Rule
	}
	return e.Field + ": " + e.Rule
}

func invalid(field, format string, args ...any) *InvalidError {
	return &InvalidError{Field: field, Rule: fmt.Sprintf(format, args...)}
}

// The character classes of SPEC §2's rules, checked a byte at a time: each
// is ASCII, so a byte outside it (any byte of a multi-byte UTF-8
// character, or of invalid UTF-8) fails, as the equivalent regular
// expression would (queue's tests hold the two equal). A regexp match was
// about 1 % of a worker's CPU, for every job decoded.
var (
	idChars     = newCharset("A-Za-z0-9._:-")       // ValidID's
	deviceChars = newCharset("A-Za-z0-9._:=+/~[]-") // a push token's
)

// charset is a set of bytes.
type charset [256]bool

// newCharset is the set of spec's bytes, where "a-z" stands for the bytes
// from a to z and a '-' at either end for itself.
func newCharset(spec string) *charset {
	var c charset
	for i := 0; i < len(spec); i++ {
		if i+2 < len(spec) && spec[i+1] == '-' {
			for b := int(spec[i]); b <= int(spec[i+2]); b++ {
				c[b] = true
			}
			i += 2
			continue
		}
		c[spec[i]] = true
	}
	return &c
}

// holds reports whether s is not empty and every byte of s is in c.
func (c *charset) holds(s string) bool {
	for i := 0; i < len(s); i++ {
		if !c[s[i]] {
			return false
		}
	}
	return s != ""
}

// isE164 reports whether s is an E.164 number as SPEC §2 writes it: '+',
// then 7 to 15 digits, the first not 0 (`^\+[1-9][0-9]{6,14}$`).
func isE164(s string) bool {
	if len(s) < 8 || len(s) > 16 || s[0] != '+' || s[1] == '0' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Validate checks a job built in Go against every rule of SPEC §2 that
// Decode enforces, except the match with a subject (a Go-built job has
// none), including that its encoding fits in 64 KiB. The error is an
// *InvalidError.
func (j *Job) Validate() error {
	if err := j.validate(subjectOf{}, nil); err != nil {
		return err
	}
	_, err := j.encode()
	return err
}

// Marshal validates the job and encodes it as compact JSON with the field
// names of SPEC §2, optional fields left out when empty, data keys sorted
// and times in UTC (RFC 3339 with the fractional seconds that are set).
// Decode of the result gives back an equal job. An invalid job gives an
// *InvalidError.
func (j *Job) Marshal() ([]byte, error) {
	if err := j.validate(subjectOf{}, nil); err != nil {
		return nil, err
	}
	return j.encode()
}

// JSON encodes the job as Marshal does (the same bytes), without
// validating it first: for a job already valid, decoded or built and
// checked, such as the one a provider sends. It fails only when the
// encoding is larger than MaxJobBytes.
func (j *Job) JSON() ([]byte, error) {
	return j.encode()
}

// marshalFor validates j against the queue it is published to (KeyFor)
// and encodes it.
func (j *Job) marshalFor(high bool) (k Key, data []byte, err error) {
	k = KeyFor(j.Channel, j.Tenant, high, j.Category)
	if err := j.validate(fromSubject(k.Subject()), nil); err != nil {
		return Key{}, nil, err
	}
	data, err = j.encode()
	return k, data, err
}

// subjectOf is what a job must match of the subject it arrived on: its
// channel and tenant tokens and its lane's category ("" for the normal
// lane) (match false: no subject, nothing to match).
type subjectOf struct {
	channel, tenant string
	lane            Category
	match           bool
	// tenantBound: the job's tenant, when it names one, must be tenant (a
	// tenant's own subject, or the Notifier-Tenant header: byHeader); on
	// the default tenant's subjects and the fair lanes without the header
	// a job may name any tenant.
	tenantBound, byHeader bool
}

// fromSubject reads the tokens a job must match off subject ("" for none).
func fromSubject(subject string) subjectOf {
	if subject == "" {
		return subjectOf{}
	}
	k, _ := ParseJobSubject(subject)
	lane := k.Category
	if k.High {
		lane = Transactional
	}
	return subjectOf{channel: ChannelOf(subject), tenant: k.Tenant, lane: lane, match: true, tenantBound: k.Tenant != ""}
}

// validate runs the field rules in order. With sub.match, the channel must
// equal the subject's <channel> token, and a tenant, when the job names
// one, the subject's tenant (a job without one is the subject's tenant's:
// Delivery.Tenant; it is not written into the job, so that re-encoding
// never grows it). typeErrs holds the rules broken while decoding, by
// field; such a field is reported in its place in the order.
func (j *Job) validate(sub subjectOf, typeErrs map[string]*InvalidError) error {
	for _, f := range fields {
		if err := typeErrs[f.name]; err != nil {
			return err
		}
		if err := f.check(j, sub); err != nil {
			return err
		}
	}
	return nil
}

// field is one field of a job (SPEC §2): its JSON name, where Job keeps it
// and its rule. The strict decoder reads the fields, and the encoder
// writes them, through this table; the fast decoder reads the job's
// strings through Job's json tags (decode_fast.go). Adding a field to Job
// is adding its row here, and its test.
type field struct {
	name string
	// at is the field in j: a *string, *Category, *map[string]string
	// (a JSON object of strings) or *time.Time (an RFC 3339 string).
	at func(j *Job) any
	// check is the field's rule, given the subject the job came on.
	check func(j *Job, sub subjectOf) *InvalidError
}

// fields are a job's fields in the order in which their rules are checked
// (the first broken rule in this order is the one reported) and encode
// writes them.
var fields = []field{
	{"id", func(j *Job) any { return &j.ID }, func(j *Job, _ subjectOf) *InvalidError {
		switch {
		case j.ID == "":
			return invalid("id", "required")
		case len(j.ID) > MaxIDLen:
			return invalid("id", "must be at most %d characters, got %d", MaxIDLen, len(j.ID))
		case !idChars.holds(j.ID):
			return invalid("id", "must contain only A-Z a-z 0-9 . _ : -")
		}
		return nil
	}},
	{"user_id", func(j *Job) any { return &j.UserID }, func(j *Job, _ subjectOf) *InvalidError {
		if j.UserID == "" {
			return invalid("user_id", "required")
		}
		return checkName("user_id", j.UserID, MaxUserIDLen)
	}},
	{"channel", func(j *Job) any { return &j.Channel }, func(j *Job, sub subjectOf) *InvalidError {
		switch {
		case j.Channel == "":
			return invalid("channel", "required")
		case sub.match && j.Channel != sub.channel:
			return invalid("channel", "%s does not match subject channel %s", echo(j.Channel), echo(sub.channel))
		case !IsChannel(j.Channel):
			return invalid("channel", "%s is not one of %s", echo(j.Channel), strings.Join(Channels, ", "))
		}
		return nil
	}},
	{"to", func(j *Job) any { return &j.To }, func(j *Job, _ subjectOf) *InvalidError {
		return checkTo(j.Channel, j.To)
	}},
	{"body", func(j *Job) any { return &j.Body }, func(j *Job, _ subjectOf) *InvalidError {
		switch {
		case j.Body == "":
			return invalid("body", "required")
		case !utf8.ValidString(j.Body):
			return invalid("body", "must be valid UTF-8")
		case len(j.Body) > MaxBodyBytes:
			return invalid("body", "must be at most %d bytes, got %d", MaxBodyBytes, len(j.Body))
		}
		return nil
	}},
	{"title", func(j *Job) any { return &j.Title }, func(j *Job, _ subjectOf) *InvalidError {
		if !utf8.ValidString(j.Title) {
			return invalid("title", "must be valid UTF-8")
		}
		return nil
	}},
	{"data", func(j *Job) any { return &j.Data }, func(j *Job, _ subjectOf) *InvalidError {
		for k, v := range j.Data {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return invalid("data", "keys and values must be valid UTF-8")
			}
		}
		return nil
	}},
	{"provider", func(j *Job) any { return &j.Provider }, func(j *Job, _ subjectOf) *InvalidError {
		return checkName("provider", j.Provider, maxProvider)
	}},
	{"tenant", func(j *Job) any { return &j.Tenant }, func(j *Job, sub subjectOf) *InvalidError {
		switch {
		case sub.byHeader && !ValidTenant(sub.tenant):
			return invalid("tenant", "the %s header %s is not a tenant name (1 to %d characters of A-Z a-z 0-9 . _ -)", HeaderTenant, echo(sub.tenant), MaxTenantLen)
		case j.Tenant == "":
		case !ValidTenant(j.Tenant):
			return invalid("tenant", "must be 1 to %d characters of A-Z a-z 0-9 . _ -", MaxTenantLen)
		case sub.match && sub.tenantBound && sub.byHeader && j.Tenant != sub.tenant:
			return invalid("tenant", "%s does not match the %s header %s", echo(j.Tenant), HeaderTenant, echo(sub.tenant))
		case sub.match && sub.tenantBound && j.Tenant != sub.tenant:
			return invalid("tenant", "%s does not match the subject: it was published on tenant %s's subject (publish on %s)",
				echo(j.Tenant), echo(sub.tenant), KeyFor(j.Channel, j.Tenant, false, j.Category).Subject())
		}
		return nil
	}},
	{"category", func(j *Job) any { return &j.Category }, func(j *Job, sub subjectOf) *InvalidError {
		switch {
		case j.Category == "":
		case !ValidCategory(j.Category):
			return invalid("category", "%s is not one of transactional, marketing", echo(string(j.Category)))
		case sub.match && sub.lane != "" && j.Category != sub.lane:
			return invalid("category", "%s does not match the subject: it was published on the %s lane (publish on %s)",
				echo(string(j.Category)), sub.lane, KeyFor(j.Channel, j.Tenant, false, j.Category).Subject())
		}
		return nil
	}},
	{"expires_at", func(j *Job) any { return &j.ExpiresAt }, func(j *Job, _ subjectOf) *InvalidError {
		return checkTime("expires_at", j.ExpiresAt)
	}},
	{"created_at", func(j *Job) any { return &j.CreatedAt }, func(j *Job, _ subjectOf) *InvalidError {
		return checkTime("created_at", j.CreatedAt)
	}},
}

// checkName checks a name (user_id, provider): valid UTF-8, at most most
// characters, no control characters.
func checkName(field, s string, most int) *InvalidError {
	switch n := utf8.RuneCountInString(s); {
	case !utf8.ValidString(s):
		return invalid(field, "must be valid UTF-8")
	case n > most:
		return invalid(field, "must be at most %d characters, got %d", most, n)
	case hasControl(s):
		return invalid(field, "must not contain control characters")
	}
	return nil
}

// checkTo checks the recipient for channel without ever echoing it.
func checkTo(channel, to string) *InvalidError {
	const field = "to"
	if to == "" {
		return invalid(field, "required")
	}
	switch channel {
	case "sms":
		if !isE164(to) {
			return invalid(field, "must be an E.164 phone number: + then 7 to 15 digits, the first not 0")
		}
	case "push":
		if len(to) < minDeviceLen || len(to) > maxDeviceLen || !deviceChars.holds(to) {
			return invalid(field, "must be a device token: %d to %d characters of A-Z a-z 0-9 . _ : = + / ~ [ ] -", minDeviceLen, maxDeviceLen)
		}
	case "email":
		if len(to) > maxEmailLen {
			return invalid(field, "must be an email address of at most %d bytes, got %d", maxEmailLen, len(to))
		}
		a, err := mail.ParseAddress(to)
		if err != nil || a.Name != "" || a.Address != to {
			return invalid(field, "must be a plain email address (user@domain, no display name or angle brackets)")
		}
	}
	return nil
}

// checkTime accepts the zero time (absent) and any instant whose UTC form
// has a four-digit year, which is what RFC 3339 can write.
func checkTime(field string, t time.Time) *InvalidError {
	if t.IsZero() {
		return nil
	}
	if y := t.UTC().Year(); y < 0 || y > 9999 {
		return invalid(field, "must be between years 0000 and 9999 in UTC")
	}
	return nil
}

// IsChannel reports whether s is one of Channels.
func IsChannel(s string) bool {
	for _, c := range Channels {
		if s == c {
			return true
		}
	}
	return false
}

// hasControl reports whether s contains a C0 or C1 control character or DEL.
func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r >= 0x7f && r < 0xa0 {
			return true
		}
	}
	return false
}

// echo quotes a channel value for an error message, capped in length.
func echo(s string) string {
	if len(s) > maxEchoLength {
		s = s[:maxEchoLength] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// ValidID applies SPEC §2's rule for a job id: 1 to MaxIDLen characters of
// [A-Za-z0-9._:-]. It is the one place the rule is written.
func ValidID(id string) bool {
	return id != "" && len(id) <= MaxIDLen && idChars.holds(id)
}

// MsgID is the Nats-Msg-Id of a job: a job id is unique within its tenant
// (SPEC §2), so the default tenant's ("") is the id itself and another
// tenant's is "<tenant>/<id>" ('/' is in neither a tenant name nor an id,
// so two tenants' ids never collide). JetStream drops a second publish
// with the same Nats-Msg-Id within the stream's duplicate window: two
// tenants may use the same id, and neither learns of the other's.
func MsgID(tenant, id string) string {
	if tenant == "" {
		return id
	}
	return tenant + "/" + id
}

// MsgID is the job's Nats-Msg-Id: MsgID(j.Tenant, j.ID).
func (j *Job) MsgID() string { return MsgID(j.Tenant, j.ID) }
