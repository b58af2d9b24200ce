package queue

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// Decode parses and validates a job received on subject
// (notify.jobs.<channel>[.t.<tenant>][.high|.marketing|.transactional]),
// enforcing every rule of
// SPEC §2:
//
//   - the message is valid UTF-8, at most 64 KiB, and one JSON object with
//     nothing after it;
//   - id: 1–128 characters of A-Z a-z 0-9 . _ : -
//   - user_id: 1–256 characters, no control characters;
//   - channel: sms, push or email, and equal to the subject's <channel> token;
//   - to: non-empty and well formed for the channel: E.164 for sms
//     (+[1-9][0-9]{6,14}), a device token for push (8–4096 characters of
//     A-Z a-z 0-9 . _ : = + / ~ [ ] -), a plain address for email (net/mail,
//     no display name, at most 254 bytes);
//   - body: non-empty, at most 16 KiB of UTF-8;
//   - title and provider strings (provider at most 128 characters, no
//     control characters), data an object of strings, expires_at and
//     created_at RFC 3339 times (of years 0000 to 9999 once in UTC, so that
//     Marshal can write them back);
//   - tenant: 1–64 characters of A-Z a-z 0-9 . _ -, equal to the subject's
//     tenant (a job without one takes the subject's; the plain subjects are
//     the default tenant's, "");
//   - category: transactional or marketing, equal to the lane's on a
//     category's lane (.marketing, .transactional) and transactional on the
//     priority lane; on the normal lane any (the dispatcher checks it
//     against its channel's category, which this package does not know).
//
// Field names match exactly (case-sensitive): "ID" is an unknown field, and
// unknown fields are ignored. A null optional field counts as absent; a null
// required field as missing. A known field given twice is invalid ("id:
// duplicate key"), as is a key given twice inside data: encoding/json would
// silently keep the last value, and two parsers disagreeing on which one
// counts is how validation gets bypassed.
//
// An empty subject skips the subject match (for jobs read from a file
// before publishing). A failure is an *InvalidError naming the first broken
// rule in field order; its text never contains the value of to or body.
// Decode never panics, whatever the bytes.
func Decode(subject string, data []byte) (*Job, error) {
	return DecodeFilled(subject, data, nil)
}

// DecodeFilled is Decode for an intake that completes a job before its
// rules are checked (the HTTP gateway: an id it generates, the tenant its
// caller's key is for). fill, unless nil, is called with the job as
// decoded, before any rule of SPEC §2 is checked; it may set fields, and
// an error it returns (an *InvalidError, to name the field) is Decode's.
// fill must not keep j.
func DecodeFilled(subject string, data []byte, fill func(j *Job) error) (*Job, error) {
	if len(data) > MaxJobBytes {
		return nil, invalid("", "message is %d bytes, more than %d", len(data), MaxJobBytes)
	}
	if !utf8.Valid(data) {
		return nil, invalid("", "message is not valid UTF-8")
	}
	return decode(fromSubject(subject), data, fill)
}

// DecodeDelivery is Decode for a delivery: the job must match its subject,
// and, on a fair lane or the default tenant's subjects, the tenant its
// Notifier-Tenant header names when it has one (a job that names none is
// that tenant's: Delivery.Tenant), which must be a tenant name (else the
// job is invalid: "tenant: the Notifier-Tenant header ... is not a tenant
// name"). Without the header a job there may name any tenant: it is that
// tenant's.
func DecodeDelivery(d *Delivery) (*Job, error) {
	sub := fromSubject(d.Subject)
	if t := d.Header.Get(HeaderTenant); t != "" && !sub.tenantBound {
		sub.tenant, sub.tenantBound, sub.byHeader = t, true, true
	}
	if len(d.Data) > MaxJobBytes {
		return nil, invalid("", "message is %d bytes, more than %d", len(d.Data), MaxJobBytes)
	}
	if !utf8.Valid(d.Data) {
		return nil, invalid("", "message is not valid UTF-8")
	}
	return decode(sub, d.Data, nil)
}

func decode(sub subjectOf, data []byte, fill func(*Job) error) (*Job, error) {
	if j, ok, err := decodeFast(sub, data, fill); ok || err != nil {
		return j, err
	}
	return decodeStrict(sub, data, fill)
}

// decodeStrict is Decode for every message the fast path does not take: it
// reads the message token by token and names the first broken rule.
func decodeStrict(sub subjectOf, data []byte, fill func(*Job) error) (*Job, error) {
	members, err := objectMembers(data, isField)
	if err != nil {
		return nil, err
	}
	d := fieldDecoder{members: members, errs: map[string]*InvalidError{}}
	j := &Job{}
	for _, f := range fields {
		switch v := f.at(j).(type) {
		case *string:
			*v = d.str(f.name)
		case *Category:
			*v = Category(d.str(f.name))
		case *map[string]string:
			*v = d.data(f.name)
		case *time.Time:
			*v = d.time(f.name)
		}
	}
	if fill != nil {
		if err := fill(j); err != nil {
			return nil, err
		}
	}
	if err := j.validate(sub, d.errs); err != nil {
		return nil, err
	}
	return j, nil
}

func isField(key string) bool {
	for _, f := range fields {
		if key == f.name {
			return true
		}
	}
	return false
}

// objectMembers reads data as exactly one JSON object and returns its
// members' raw values by key. A key for which strict returns true may not
// appear twice; for other keys the last value wins.
func objectMembers(data []byte, strict func(string) bool) (map[string]json.RawMessage, *InvalidError) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, syntaxError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, invalid("", "message is not a JSON object")
	}
	members := make(map[string]json.RawMessage)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, syntaxError(err)
		}
		key, ok := tok.(string)
		if !ok { // cannot happen: the decoder only returns strings as keys
			return nil, invalid("", "not valid JSON (object key is not a string)")
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, syntaxError(err)
		}
		if _, dup := members[key]; dup && strict(key) {
			return nil, invalid(key, "duplicate key")
		}
		members[key] = raw
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, syntaxError(err)
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		return nil, invalid("", "not valid JSON (data after the object at byte %d)", end)
	}
	return members, nil
}

// syntaxError describes a JSON error by position only, so that no part of
// the message (which may hold personal data) is echoed.
func syntaxError(err error) *InvalidError {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se) && strings.Contains(se.Error(), "max depth"):
		return invalid("", "not valid JSON (nested too deep at byte %d)", se.Offset)
	case errors.As(err, &se):
		return invalid("", "not valid JSON (syntax error at byte %d)", se.Offset)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("", "not valid JSON (unexpected end of input)")
	default:
		return invalid("", "not valid JSON")
	}
}

// fieldDecoder extracts typed fields from raw members, recording a type
// error per field instead of stopping, so that errors are reported in field
// order by validate.
type fieldDecoder struct {
	members map[string]json.RawMessage
	errs    map[string]*InvalidError
}

// raw returns the member's value, or nil when it is absent or null.
func (d *fieldDecoder) raw(field string) json.RawMessage {
	raw := bytes.TrimSpace(d.members[field])
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}

func (d *fieldDecoder) str(field string) string {
	raw := d.raw(field)
	if raw == nil {
		return ""
	}
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		d.errs[field] = invalid(field, "must be a string")
		return ""
	}
	return s
}

func (d *fieldDecoder) data(field string) map[string]string {
	raw := d.raw(field)
	if raw == nil {
		return nil
	}
	if raw[0] != '{' {
		d.errs[field] = invalid(field, "must be an object of strings")
		return nil
	}
	members, err := objectMembers(raw, func(string) bool { return true })
	if err != nil {
		// raw is valid JSON (the outer decoder read it), so this is a
		// duplicate key; say where.
		d.errs[field] = invalid(field, "duplicate key")
		return nil
	}
	if len(members) == 0 {
		return nil
	}
	out := make(map[string]string, len(members))
	for k, v := range members {
		var s string
		if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil {
			d.errs[field] = invalid(field, "every value must be a string")
			return nil
		}
		out[k] = s
	}
	return out
}

func (d *fieldDecoder) time(field string) time.Time {
	if d.raw(field) == nil {
		return time.Time{}
	}
	s := d.str(field)
	if d.errs[field] != nil {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		d.errs[field] = invalid(field, "must be an RFC 3339 time such as 2006-01-02T15:04:05Z")
		return time.Time{}
	}
	return t
}
