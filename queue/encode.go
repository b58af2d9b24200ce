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
	for _, f := range fields {
		sep := byte(',')
		if len(b) == 0 {
			sep = '{'
		}
		b = appendField(b, sep, f.name, f.at(j))
	}
	if len(b) == 0 {
		b = append(b, '{')
	}
	b = append(b, '}')
	if len(b) > MaxJobBytes {
		return nil, invalid("", "encoded job is %d bytes, more than %d", len(b), MaxJobBytes)
	}
	return b, nil
}

// appendField appends sep and the member name: v, v a field of a job
// (field.at), or nothing when v is empty (a valid job's required fields
// never are).
func appendField(b []byte, sep byte, name string, v any) []byte {
	switch v := v.(type) {
	case *string:
		if *v != "" {
			b = appendString(appendName(b, sep, name), *v)
		}
	case *Category:
		if *v != "" {
			b = appendString(appendName(b, sep, name), string(*v))
		}
	case *map[string]string:
		if len(*v) > 0 {
			b = append(appendName(b, sep, name), '{')
			keys := make([]string, 0, len(*v))
			for k := range *v {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for i, k := range keys {
				if i > 0 {
					b = append(b, ',')
				}
				b = appendString(b, k)
				b = append(b, ':')
				b = appendString(b, (*v)[k])
			}
			b = append(b, '}')
		}
	case *time.Time:
		if !v.IsZero() {
			b = append(appendName(b, sep, name), '"')
			b = v.UTC().AppendFormat(b, time.RFC3339Nano)
			b = append(b, '"')
		}
	}
	return b
}

// appendName appends sep and "name":.
func appendName(b []byte, sep byte, name string) []byte {
	b = append(b, sep, '"')
	b = append(b, name...)
	return append(b, '"', ':')
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
