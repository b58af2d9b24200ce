package queue

import (
	"strconv"
	"strings"
)

// Subject layout (SPEC §3). Jobs are published on notify.jobs.<channel>
// (normal lane), notify.jobs.<channel>.high (priority lane) or
// notify.jobs.<channel>.marketing / .transactional (the lane of a job that
// names its category); jobs that are not sent end on notify.dead.<channel>
// or notify.suppressed.<channel>.
const (
	jobsPrefix       = "notify.jobs."
	deadPrefix       = "notify.dead."
	suppressedPrefix = "notify.suppressed."
	highSuffix       = ".high"

	tenantInfix = ".t."
	fairInfix   = ".f."

	// HeaderTenant names the tenant of a job on a fair lane (whose subject
	// names none): the publishers that choose fair lanes and the router set
	// it (SPEC §3).
	HeaderTenant = "Notifier-Tenant"

	// The NOTIFY stream's subjects: the default tenant's lanes, and a named
	// tenant's (three, four, five and six tokens; the four- and six-token
	// ones differ in their last, literal token: they never overlap).
	normalFilter              = "notify.jobs.*"
	highFilter                = "notify.jobs.*.high"
	marketingFilter           = "notify.jobs.*.marketing"
	transactionalFilter       = "notify.jobs.*.transactional"
	tenantNormalFilter        = "notify.jobs.*.t.*"
	tenantHighFilter          = "notify.jobs.*.t.*.high"
	tenantMarketingFilter     = "notify.jobs.*.t.*.marketing"
	tenantTransactionalFilter = "notify.jobs.*.t.*.transactional"
	// The fair lanes: notify.jobs.<channel>.f.<n>[.<lane>].
	fairNormalFilter        = "notify.jobs.*.f.*"
	fairHighFilter          = "notify.jobs.*.f.*.high"
	fairMarketingFilter     = "notify.jobs.*.f.*.marketing"
	fairTransactionalFilter = "notify.jobs.*.f.*.transactional"
	// routeFilter is every tenant's own subjects, all channels and lanes:
	// the router moves their jobs to fair lanes.
	routeFilter = "notify.jobs.*.t.>"
	// fairLanesFilter is every fair lane of every channel.
	fairLanesFilter = "notify.jobs.*.f.>"

	// MaxTenantLen is the longest tenant name (SPEC §2).
	MaxTenantLen = 64
)

// Category is what a job is for (SPEC §2): a transactional message (a
// one-time code, a receipt) or a marketing one. The zero value is none: a
// job without a category takes its channel's (the categories key).
type Category string

// The categories.
const (
	Transactional Category = "transactional"
	Marketing     Category = "marketing"
)

// Categories are the categories, in the order SPEC §2 lists them.
var Categories = []Category{Transactional, Marketing}

// ValidCategory reports whether c is one of Categories.
func ValidCategory(c Category) bool { return c == Transactional || c == Marketing }

// JobSubjectFor is the subject a job of tenant for channel is published on:
// JobSubject for the default tenant (""), else
// notify.jobs.<channel>.t.<tenant>[.high], where a '.' of the tenant name
// is written '~' (a subject token cannot hold a '.').
func JobSubjectFor(channel, tenant string, high bool) string {
	return Key{Channel: channel, Tenant: tenant, High: high}.Subject()
}

// Key names one queue of the job stream: the jobs of one channel on one
// lane, of the default tenant (Tenant "", Fair false), of one tenant
// (Tenant set: the subject a tenant's jobs may be published on, which the
// router empties into fair lanes), or of every tenant hashed onto one fair
// lane (Fair, numbered Index). The default tenant's queues and the fair
// lanes each have a durable consumer filtered on exactly their subject.
//
// The lanes: the priority lane (High), whose jobs are transactional; the
// lane of the jobs that name their category (Category set, High false);
// and the normal lane (neither), whose jobs without a category take their
// channel's.
type Key struct {
	Channel  string
	Tenant   string
	High     bool
	Category Category // a category's own lane; "" for the normal and priority lanes
	Fair     bool     // a fair lane, shared by the tenants hashed onto it (Tenant is "")
	Index    int      // the fair lane's number, from 0
}

// KeyFor is the queue a job of channel and tenant with category cat ("":
// none) on the priority lane (high) or not is published to: the priority
// lane whatever its category (a marketing job there is invalid), the
// category's lane for a job that names one, else the normal lane.
func KeyFor(channel, tenant string, high bool, cat Category) Key {
	if high {
		cat = ""
	}
	return Key{Channel: channel, Tenant: tenant, High: high, Category: cat}
}

// Subject is the subject the key's jobs are published on:
// notify.jobs.<channel>[.t.<tenant>][.high|.marketing|.transactional].
func (k Key) Subject() string {
	s := jobsPrefix + k.Channel
	switch {
	case k.Fair:
		s += fairInfix + strconv.Itoa(k.Index)
	case k.Tenant != "":
		s += tenantInfix + strings.ReplaceAll(k.Tenant, ".", "~")
	}
	switch {
	case k.High:
		s += highSuffix
	case k.Category != "":
		s += "." + string(k.Category)
	}
	return s
}

// Lane names the key's lane: "high", "marketing", "transactional" or
// "normal".
func (k Key) Lane() string {
	switch {
	case k.High:
		return "high"
	case k.Category != "":
		return string(k.Category)
	}
	return "normal"
}

// String is the key as logs and status show it: "sms", "sms/high",
// "sms@acme", "sms@acme/high", "sms/marketing", "sms#3" (fair lane 3),
// "sms#3/high".
func (k Key) String() string {
	s := k.Channel
	switch {
	case k.Fair:
		s += "#" + strconv.Itoa(k.Index)
	case k.Tenant != "":
		s += "@" + k.Tenant
	}
	if l := k.Lane(); l != "normal" {
		s += "/" + l
	}
	return s
}

// laneToken reads the last token of a four- or six-token job subject into
// k: "high", or a category; false for anything else.
func laneToken(tok string, k *Key) bool {
	switch c := Category(tok); {
	case tok == "high":
		k.High = true
	case ValidCategory(c):
		k.Category = c
	default:
		return false
	}
	return true
}

// ParseJobSubject reads a job subject of one of the shapes the job stream
// takes. ok is false for any other subject, and for a tenant token
// that is not a valid tenant name; the channel is not checked against
// Channels.
func ParseJobSubject(subject string) (k Key, ok bool) {
	rest, found := strings.CutPrefix(subject, jobsPrefix)
	if !found {
		return Key{}, false
	}
	// Its tokens into an array (a subject has at most 4 after the
	// prefix; a fifth means it is not one): no slice per message.
	var arr [5]string
	n := 0
	for {
		tok, after, more := strings.Cut(rest, ".")
		if n == len(arr) {
			return Key{}, false
		}
		arr[n], n = tok, n+1
		if !more {
			break
		}
		rest = after
	}
	toks := arr[:n]
	if toks[0] == "" {
		return Key{}, false
	}
	k.Channel = toks[0]
	switch len(toks) {
	case 1:
	case 2:
		if !laneToken(toks[1], &k) {
			return Key{}, false
		}
	case 3, 4:
		if len(toks) == 4 && !laneToken(toks[3], &k) {
			return Key{}, false
		}
		switch toks[1] {
		case "t":
			k.Tenant = strings.ReplaceAll(toks[2], "~", ".")
			if !ValidTenant(k.Tenant) {
				return Key{}, false
			}
		case "f":
			n, ok := laneIndex(toks[2])
			if !ok {
				return Key{}, false
			}
			k.Fair, k.Index = true, n
		default:
			return Key{}, false
		}
	default:
		return Key{}, false
	}
	return k, true
}

// laneIndex reads a fair lane's number: a decimal 0 to MaxFairLanes−1
// written without leading zeros (one subject per lane).
func laneIndex(tok string) (int, bool) {
	n, err := strconv.Atoi(tok)
	if err != nil || n < 0 || n >= MaxFairLanes || strconv.Itoa(n) != tok {
		return 0, false
	}
	return n, true
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
