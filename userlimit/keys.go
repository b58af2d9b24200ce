package userlimit

import "strings"

// Tag returns the hash-tagged part every Redis key of key starts with:
// "{" + prefix + "u:" + channel + ":" + user + "}". Redis Cluster hashes only
// what is between the braces, so all keys of one decision live in one slot.
//
// '%', '{' and '}' in any part, and ':' in the channel, are percent-encoded,
// so the tag always closes where intended and two different keys never share
// a tag (channel "push", user "a:b" and channel "push:a", user "b" differ).
func Tag(prefix string, key Key) string { return tagWith(prefix, key, "") }

// tagWith is Tag followed by more, built as one string.
func tagWith(prefix string, key Key, more string) string {
	var b strings.Builder
	b.Grow(len(prefix) + len(key.Channel) + len(key.User) + 6 + len(more))
	b.WriteByte('{')
	escape(&b, prefix, false)
	b.WriteString("u:")
	escape(&b, key.Channel, true)
	b.WriteByte(':')
	escape(&b, key.User, false)
	b.WriteByte('}')
	b.WriteString(more)
	return b.String()
}

func escape(b *strings.Builder, s string, colon bool) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '%':
			b.WriteString("%25")
		case c == '{':
			b.WriteString("%7B")
		case c == '}':
			b.WriteString("%7D")
		case c == ':' && colon:
			b.WriteString("%3A")
		default:
			b.WriteByte(c)
		}
	}
}

// suffix is the short name of an algorithm's state key.
func suffix(a Algorithm) string {
	switch a {
	case SlidingLog:
		return ":sl"
	case SlidingWindow:
		return ":sw"
	case FixedWindow:
		return ":fw"
	case TokenBucket:
		return ":tb"
	}
	return ":" + string(a)
}

// Keys returns the Redis keys one decision touches, in the order the script
// takes them as KEYS:
//
//   - sliding_log: the log, a sorted set of the window's job ids scored by
//     admission time in µs (Tag + ":sl");
//   - token_bucket: its state (Tag + ":tb", a string "tat:g:newest:T":
//     GCRA's tat over the admissions that left the log, GCRA's over every
//     admission, the newest instant, the token interval; see
//     token_bucket.lua), then its log (Tag +
//     ":tb:log", a sorted set of the window's job ids scored by admission
//     time in µs);
//   - the O(1) algorithms: their state (Tag + ":sw" hash {w, c, p},
//     ":fw" hash {w, n}), then the job's marker (state key + ":j:" + jobID,
//     a string '@' + the instant in µs its admission stands at).
//
// Each algorithm has its own keys, so changing a channel's algorithm starts
// from empty state instead of misreading another algorithm's. Every key
// expires on its own once idle.
func Keys(prefix string, key Key, alg Algorithm, jobID string) []string {
	return appendKeys(nil, prefix, key, alg, jobID)
}

// appendKeys appends Keys to dst (a group's keys, without a slice of
// their own per decision).
func appendKeys(dst []string, prefix string, key Key, alg Algorithm, jobID string) []string {
	state := tagWith(prefix, key, suffix(alg))
	switch alg {
	case SlidingLog:
		return append(dst, state)
	case TokenBucket:
		return append(dst, state, state+":log")
	}
	return append(dst, state, state+":j:"+jobID)
}
