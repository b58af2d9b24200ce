package queue

import (
	"slices"
	"time"
)

// encode writes the job as compact JSON and checks the 64 KiB limit.
//
// It does not use encoding/json on purpose: encoding/json escapes U+2028 and
// U+2029 (3 bytes become 6), so a job that Decode accepted could encode
// larger than the message it came from and break the limit on a re-publish.
// This encoder escapes only what JSON requires (the quote, the backslash and
// control characters, in their shortest form), so the encoding of a decoded
// job is never longer than the message it was decoded from.
func (j *Job) encode() ([]byte, error) {
	b := make([]byte, 0, 128+len(j.To)+len(j.Body)+len(j.Title)+len(j.ID)+len(j.UserID))
	b = append(b, `{"id":`...)
	b = appendString(b, j.ID)
	b = append(b, `,"user_id":`...)
	b = appendString(b, j.UserID)
	b = append(b, `,"channel":`...)
	b = appendString(b, j.Channel)
	b = append(b, `,"to":`...)
	b = appendString(b, j.To)
	b = append(b, `,"body":`...)
	b = appendString(b, j.Body)
	if j.Title != "" {
		b = append(b, `,"title":`...)
		b = appendString(b, j.Title)
	}
	if len(j.Data) > 0 {
		b = append(b, `,"data":{`...)
		keys := make([]string, 0, len(j.Data))
		for k := range j.Data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendString(b, j.Data[k])
		}
		b = append(b, '}')
	}
	if j.Provider != "" {
		b = append(b, `,"provider":`...)
		b = appendString(b, j.Provider)
	}
	if j.Tenant != "" {
		b = append(b, `,"tenant":`...)
		b = appendString(b, j.Tenant)
	}
	if j.Category != "" {
		b = append(b, `,"category":`...)
		b = appendString(b, string(j.Category))
	}
	if !j.ExpiresAt.IsZero() {
		b = append(b, `,"expires_at":"`...)
		b = j.ExpiresAt.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	if !j.CreatedAt.IsZero() {
		b = append(b, `,"created_at":"`...)
		b = j.CreatedAt.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	b = append(b, '}')
	if len(b) > MaxJobBytes {
		return nil, invalid("", "encoded job is %d bytes, more than %d", len(b), MaxJobBytes)
	}
	return b, nil
}

// appendString appends s as a JSON string. s must be valid UTF-8 (the
// caller validated it); bytes of multi-byte sequences pass through.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c >= 0x20:
			b = append(b, c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\f':
			b = append(b, '\\', 'f')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
	}
	return append(b, '"')
}
