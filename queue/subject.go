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

	tenantInfix = ".t."

	// The NOTIFY stream's subjects: the default tenant's normal and
	// priority lanes, and a named tenant's (three, four, five and six
	// tokens: they never overlap).
	normalFilter       = "notify.jobs.*"
	highFilter         = "notify.jobs.*.high"
	tenantNormalFilter = "notify.jobs.*.t.*"
	tenantHighFilter   = "notify.jobs.*.t.*.high"

	// MaxTenantLen is the longest tenant name (SPEC §2).
	MaxTenantLen = 64
)

// JobSubjectFor is the subject a job of tenant for channel is published on:
// JobSubject for the default tenant (""), else
// notify.jobs.<channel>.t.<tenant>[.high], where a '.' of the tenant name
// is written '~' (a subject token cannot hold a '.').
func JobSubjectFor(channel, tenant string, high bool) string {
	if tenant == "" {
		return JobSubject(channel, high)
	}
	s := jobsPrefix + channel + tenantInfix + strings.ReplaceAll(tenant, ".", "~")
	if high {
		s += highSuffix
	}
	return s
}

// Key names one queue of the job stream: the jobs of one tenant ("" for
// the default tenant) for one channel on one lane. Each has its own
// durable consumer, filtered on exactly its subject.
type Key struct {
	Channel string
	Tenant  string
	High    bool
}

// Subject is the subject the key's jobs are published on.
func (k Key) Subject() string { return JobSubjectFor(k.Channel, k.Tenant, k.High) }

// String is the key as logs and status show it: "sms", "sms/high",
// "sms@acme", "sms@acme/high".
func (k Key) String() string {
	s := k.Channel
	if k.Tenant != "" {
		s += "@" + k.Tenant
	}
	if k.High {
		s += "/high"
	}
	return s
}

// ParseJobSubject reads a job subject of one of the four shapes the job
// stream takes. ok is false for any other subject, and for a tenant token
// that is not a valid tenant name; the channel is not checked against
// Channels.
func ParseJobSubject(subject string) (k Key, ok bool) {
	rest, found := strings.CutPrefix(subject, jobsPrefix)
	if !found {
		return Key{}, false
	}
	toks := strings.Split(rest, ".")
	if toks[0] == "" {
		return Key{}, false
	}
	k.Channel = toks[0]
	switch len(toks) {
	case 1:
	case 2:
		k.High = toks[1] == "high"
		ok = k.High
		return k, ok
	case 3, 4:
		if toks[1] != "t" || (len(toks) == 4 && toks[3] != "high") {
			return Key{}, false
		}
		k.Tenant = strings.ReplaceAll(toks[2], "~", ".")
		k.High = len(toks) == 4
		if !ValidTenant(k.Tenant) {
			return Key{}, false
		}
	default:
		return Key{}, false
	}
	return k, true
}

// ValidTenant reports whether t is a tenant name: 1 to 64 characters of
// A-Z a-z 0-9 . _ -.
func ValidTenant(t string) bool {
	if t == "" || len(t) > MaxTenantLen {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// TenantOf returns the tenant of a job subject: "" for the default
// tenant's subjects and for a subject that is not a job subject.
func TenantOf(subject string) string {
	k, _ := ParseJobSubject(subject)
	return k.Tenant
}

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
// notify.jobs.<channel>.high or notify.jobs.<channel>.t.<tenant>.high.
func IsHigh(subject string) bool {
	k, ok := ParseJobSubject(subject)
	return ok && k.High
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
