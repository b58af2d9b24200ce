package userlimit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/notifier/notifier/internal/text"
)

// Algorithm names how a Rule counts sends. See the package documentation for
// which one to choose.
type Algorithm string

// The algorithms. The zero value "" means SlidingLog (see Rule.WithDefaults).
const (
	// SlidingLog is exact: it keeps the time of every admitted job of the
	// last window. State: O(limit) per key.
	SlidingLog Algorithm = "sliding_log"
	// SlidingWindow weighs the previous fixed window's count by how much of
	// it the sliding window still covers. State: O(1) per key; approximate.
	SlidingWindow Algorithm = "sliding_window"
	// FixedWindow is one counter per window aligned to the Unix epoch.
	// State: O(1) per key; admits up to 2×limit across a boundary.
	FixedWindow Algorithm = "fixed_window"
	// TokenBucket holds limit tokens (the burst) and refills limit per
	// window. State: the admissions of the last window (at most 2×limit)
	// and one number per key; a decision reads them all.
	TokenBucket Algorithm = "token_bucket"
)

// algorithms lists the valid algorithms in the order error messages name them.
var algorithms = []Algorithm{SlidingLog, SlidingWindow, FixedWindow, TokenBucket}

// OnExceed says what the dispatcher does with a job its user's cap refuses.
// This package only carries it; Allow does not read it.
type OnExceed string

// The choices of OnExceed. The zero value "" means Drop.
const (
	// Drop suppresses the job (outcome suppressed, reason user_limit).
	Drop OnExceed = "drop"
	// Defer sends the job later, after Result.RetryAfter.
	Defer OnExceed = "defer"
	// Digest holds the job, with the user's other refused jobs, until the
	// window lets one send through: then one digest job (Rule.Digest) goes
	// out instead of them, and they end suppressed (reason digested).
	Digest OnExceed = "digest"
)

// DigestTemplate is a digest job's title and body (YAML
// user_limits.<channel>.digest), "{count}" replaced by the number of jobs
// it stands for.
type DigestTemplate struct {
	Title string `mapstructure:"title"`
	Body  string `mapstructure:"body"`
}

// Digest templates' defaults and bounds.
const (
	DefaultDigestTitle = "{count} new notifications"
	DefaultDigestBody  = "You have {count} new notifications"
	maxDigestText      = 4096
)

// Text is s with "{count}" replaced by n.
func (t DigestTemplate) Text(s string, n int) string {
	return strings.ReplaceAll(s, "{count}", strconv.Itoa(n))
}

// Mode says whether the dispatcher enforces a Rule or only counts what it
// would do. This package only carries it; Allow does not read it.
type Mode string

// The choices of Mode. The zero value "" means Enforce.
const (
	// Enforce acts on a denial as OnExceed says.
	Enforce Mode = "enforce"
	// Shadow evaluates and counts the rule but never acts on a denial: the
	// job goes on as if allowed, and the denial is counted (metric
	// decision "shadow_deny", notifier top --shadow). A denied job is not
	// counted in the rule's state, so the state is the one the enforced
	// rule would have, and a switch to Enforce by hot reload carries on
	// from it.
	Shadow Mode = "shadow"
)

// Limits of a valid Rule.
const (
	// MaxSlidingLogLimit is the largest limit a SlidingLog rule may have: the
	// log keeps one entry per admitted job of the window.
	MaxSlidingLogLimit = 100_000
	// MaxTokenBucketLimit is the largest limit a TokenBucket rule may have:
	// a decision for an instant before its newest admission reads the
	// admissions of the window (up to 2×limit; 0.7 ms of Redis time at
	// 1,000, BenchmarkBusyUser).
	MaxTokenBucketLimit = 1_000
	// MaxLimit is the largest limit of any rule.
	MaxLimit = 1_000_000_000
	// MinWindow is the shortest window.
	MinWindow = time.Millisecond
	// MaxWindow is the longest window (366 days), which keeps every time
	// the Redis scripts compute exact in a Lua number.
	MaxWindow = 366 * 24 * time.Hour
	// MaxAhead is the furthest after now an instant may be decided for
	// (AllowAt): a send slot lies at most a provider's max_queue_delay
	// (at most 24 h) ahead on its queue's Redis clock; twice that leaves
	// any skew of the cap's Redis clock. A state then lives at most
	// MaxAhead + 2 × MaxWindow + 1 s (sliding_window's), within
	// luapre.MaxTTL.
	MaxAhead = 48 * time.Hour
)

// Rule is one channel's cap, decoded from YAML user_limits.<channel>: at
// most Limit jobs per (channel, user) in any Window, counted by Algorithm.
// The zero value is not valid (Limit and Window are required).
type Rule struct {
	Limit     int           `mapstructure:"limit"`
	Window    time.Duration `mapstructure:"window"`
	Algorithm Algorithm     `mapstructure:"algorithm"`
	OnExceed  OnExceed      `mapstructure:"on_exceed"`
	Mode      Mode          `mapstructure:"mode"`
	// Digest is the digest job's text, with OnExceed Digest (left out:
	// DefaultDigestTitle and DefaultDigestBody).
	Digest *DigestTemplate `mapstructure:"digest"`
}

// WithDefaults returns r with an empty Algorithm set to SlidingLog, an
// empty OnExceed set to Drop and an empty Mode set to Enforce.
func (r Rule) WithDefaults() Rule {
	if r.Algorithm == "" {
		r.Algorithm = SlidingLog
	}
	if r.OnExceed == "" {
		r.OnExceed = Drop
	}
	if r.Mode == "" {
		r.Mode = Enforce
	}
	if r.OnExceed == Digest {
		d := DigestTemplate{}
		if r.Digest != nil {
			d = *r.Digest
		}
		if d.Title == "" {
			d.Title = DefaultDigestTitle
		}
		if d.Body == "" {
			d.Body = DefaultDigestBody
		}
		r.Digest = &d
	}
	return r
}

// Validate returns nil when r (with defaults applied) is usable, or
// errors.Join of one error per problem. Each message starts with the key
// relative to the rule ("limit: ...", "window: ...") and names the bad
// value and what is allowed, so a caller can prefix the YAML path
// ("user_limits.push.").
func (r Rule) Validate() error {
	r = r.WithDefaults()
	var errs []error
	switch {
	case r.Limit < 1:
		errs = append(errs, fmt.Errorf("limit: must be a whole number of at least 1, got %d", r.Limit))
	case r.Limit > MaxLimit:
		errs = append(errs, fmt.Errorf("limit: must be at most %d, got %d", MaxLimit, r.Limit))
	case r.Algorithm == SlidingLog && r.Limit > MaxSlidingLogLimit:
		errs = append(errs, fmt.Errorf("limit: %d is above %d, the most sliding_log allows "+
			"(it keeps every job of the window, O(limit) memory per user); use algorithm sliding_window for large limits",
			r.Limit, MaxSlidingLogLimit))
	case r.Algorithm == TokenBucket && r.Limit > MaxTokenBucketLimit:
		errs = append(errs, fmt.Errorf("limit: %d is above %d, the most token_bucket allows "+
			"(each decision reads every job of the window); use algorithm sliding_window for large limits",
			r.Limit, MaxTokenBucketLimit))
	}
	if r.Window < MinWindow || r.Window > MaxWindow {
		errs = append(errs, fmt.Errorf("window: must be from %s to %s (366 days), got %s", text.Duration(MinWindow), text.Duration(MaxWindow), text.Duration(r.Window)))
	}
	if !validAlgorithm(r.Algorithm) {
		errs = append(errs, fmt.Errorf("algorithm: %q is not one of sliding_log, sliding_window, fixed_window, token_bucket", string(r.Algorithm)))
	}
	if r.OnExceed != Drop && r.OnExceed != Defer && r.OnExceed != Digest {
		errs = append(errs, fmt.Errorf("on_exceed: %q is not one of drop, defer, digest", string(r.OnExceed)))
	}
	if r.Digest != nil && r.OnExceed != Digest {
		errs = append(errs, fmt.Errorf("digest: is for on_exceed: digest, and on_exceed is %s", r.OnExceed))
	}
	if d := r.Digest; d != nil {
		for _, f := range []struct{ name, s string }{{"title", d.Title}, {"body", d.Body}} {
			switch {
			case !utf8.ValidString(f.s) || strings.ContainsFunc(f.s, func(r rune) bool { return r < ' ' && r != '\n' }):
				errs = append(errs, fmt.Errorf("digest.%s: must be valid UTF-8 without control characters", f.name))
			case len(f.s) > maxDigestText:
				errs = append(errs, fmt.Errorf("digest.%s: must be at most %d bytes, got %d", f.name, maxDigestText, len(f.s)))
			}
		}
	}
	if r.Mode != Enforce && r.Mode != Shadow {
		errs = append(errs, fmt.Errorf("mode: %q is not one of enforce, shadow", string(r.Mode)))
	}
	return errors.Join(errs...)
}

func validAlgorithm(a Algorithm) bool {
	for _, v := range algorithms {
		if a == v {
			return true
		}
	}
	return false
}

// windowMicros is the window in whole microseconds (sub-microsecond parts
// are dropped; a valid window is at least 1000µs).
func (r Rule) windowMicros() int64 { return int64(r.Window / time.Microsecond) }
