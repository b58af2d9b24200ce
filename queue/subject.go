package queue

import "strings"

// Subject layout (SPEC §3). Jobs are published on notify.jobs.<channel>
// (normal lane) or notify.jobs.<channel>.high (priority lane); jobs that are
// not sent end on notify.dead.<channel> or notify.suppressed.<channel>.
const (
	jobsPrefix       = "notify.jobs."
	deadPrefix       = "notify.dead."
	suppressedPrefix = "notify.suppressed."
	highSuffix       = ".high"

	// normalFilter and highFilter are the NOTIFY stream's subjects and the
	// filters of the two lane consumers. They do not overlap (three tokens
	// and four), which a work-queue stream requires of its consumers.
	normalFilter = "notify.jobs.*"
	highFilter   = "notify.jobs.*.high"
)

// JobSubject is the subject a job for channel is published on:
// notify.jobs.<channel>, or notify.jobs.<channel>.high for the priority lane.
func JobSubject(channel string, high bool) string {
	if high {
		return jobsPrefix + channel + highSuffix
	}
	return jobsPrefix + channel
}

// DeadSubject is the subject a failed job of channel is dead-lettered on:
// notify.dead.<channel>.
func DeadSubject(channel string) string { return deadPrefix + channel }

// SuppressedSubject is the subject a job of channel that was dropped on
// purpose is published on: notify.suppressed.<channel>.
func SuppressedSubject(channel string) string { return suppressedPrefix + channel }

// ChannelOf returns the <channel> token of a job subject: "sms" for
// notify.jobs.sms and notify.jobs.sms.high. It never fails: a subject outside
// notify.jobs. gives "", and notify.jobs.a.b.c gives "a". The token is
// returned as is; it is not checked against Channels.
func ChannelOf(subject string) string {
	rest, ok := strings.CutPrefix(subject, jobsPrefix)
	if !ok {
		return ""
	}
	if i := strings.IndexByte(rest, '.'); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// IsHigh reports whether subject is on the priority lane, that is
// notify.jobs.<channel>.high.
func IsHigh(subject string) bool {
	rest, ok := strings.CutPrefix(subject, jobsPrefix)
	if !ok {
		return false
	}
	ch, lane, ok := strings.Cut(rest, ".")
	return ok && ch != "" && lane == "high"
}

// maxSubjectToken caps a sanitised channel token in a dead-letter subject.
const maxSubjectToken = 32

// subjectToken makes s safe and tidy as one subject token: letters, digits,
// '-' and '_' are kept, anything else becomes '_', the result is capped at
// 32 bytes, and an empty token becomes "unknown". A real channel passes
// through unchanged.
func subjectToken(s string) string {
	if len(s) > maxSubjectToken {
		s = s[:maxSubjectToken]
	}
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "unknown"
	}
	return string(b)
}
