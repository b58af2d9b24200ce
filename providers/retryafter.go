package providers

import (
	"net/http"
	"strings"
	"time"
)

// MaxRetryAfter caps the pause a Retry-After header can ask for. A provider
// asking for more than an hour is misbehaving (or the header is corrupt);
// pausing a whole fleet longer than that would turn one bad answer into an
// outage, so the value is clamped and the caller retries after an hour.
const MaxRetryAfter = time.Hour

// ParseRetryAfter reads an HTTP Retry-After header value (RFC 9110 §10.2.3):
// either delay-seconds (a non-negative decimal integer) or an HTTP-date in any
// of the three forms http.ParseTime accepts, taken relative to now.
//
// It returns the delay and true, or 0 and false for an empty or unreadable
// value (negative or fractional numbers, garbage). A date in the past gives
// 0, true; any delay is capped at MaxRetryAfter.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		var secs int64
		for i := 0; i < len(v); i++ {
			secs = secs*10 + int64(v[i]-'0')
			if secs > int64(MaxRetryAfter/time.Second) {
				return MaxRetryAfter, true
			}
		}
		return time.Duration(secs) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := at.Sub(now)
	switch {
	case d < 0:
		return 0, true
	case d > MaxRetryAfter:
		return MaxRetryAfter, true
	}
	return d, true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
