package providers

import (
	"context"
	"math"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"
)

// Budget is what a provider's answer said of the allowance it has left,
// read from its rate-limit headers: the de facto X-RateLimit-Remaining and
// X-RateLimit-Reset (SendGrid, GitHub, many HTTP APIs), the draft IETF
// fields RateLimit-Remaining and RateLimit-Reset, or the structured
// RateLimit field of draft-ietf-httpapi-ratelimit-headers
// (RateLimit: "default";r=0;t=2).
type Budget struct {
	Remaining int64         // requests (or units) left in the provider's window
	Reset     time.Duration // until the window refills, as the provider counts
}

// Spent reports whether the provider says it has nothing left until Reset:
// the fleet should wait until then rather than meet a 429.
func (b Budget) Spent() bool { return b.Remaining <= 0 && b.Reset > 0 }

type budgetKey struct{}

// WithBudgetReport returns a context under which the HTTP providers
// (webhook, twilio, fcm, apns) call fn with the budget of each answer that
// carries rate-limit headers, whatever its status.
func WithBudgetReport(ctx context.Context, fn func(Budget)) context.Context {
	return WithBudgetReporter(ctx, budgetFunc(fn))
}

// BudgetReporter is told the budget of each answer (WithBudgetReporter).
type BudgetReporter interface{ ReportBudget(Budget) }

// WithBudgetReporter is WithBudgetReport with a reporter instead of a
// function: a pointer the caller already has (the dispatcher's job) costs
// no closure per request.
func WithBudgetReporter(ctx context.Context, r BudgetReporter) context.Context {
	return context.WithValue(ctx, budgetKey{}, r)
}

type budgetFunc func(Budget)

func (f budgetFunc) ReportBudget(b Budget) { f(b) }

// reportBudget reads h's rate-limit headers and reports them to the
// context's listener, if any.
func reportBudget(ctx context.Context, h http.Header, now func() time.Time) {
	r, _ := ctx.Value(budgetKey{}).(BudgetReporter)
	if r == nil {
		return
	}
	if b, ok := ParseBudget(h, now()); ok {
		r.ReportBudget(b)
	}
}

// maxBudgetReset bounds a reset read from headers, as MaxRetryAfter does
// a Retry-After: an absurd value must not stop a provider for days.
const maxBudgetReset = MaxRetryAfter

// The rate-limit headers ParseBudget reads, by their canonical names, made
// once: http.Header.Get canonicalizes its key on every call, and most of
// these names are not canonical as written ("RateLimit-Remaining" is
// "Ratelimit-Remaining"), which allocated four strings an answer.
var (
	budgetHeader = textproto.CanonicalMIMEHeaderKey("RateLimit")
	budgetFields = [...]struct{ remaining, reset string }{
		{textproto.CanonicalMIMEHeaderKey("RateLimit-Remaining"), textproto.CanonicalMIMEHeaderKey("RateLimit-Reset")},
		{textproto.CanonicalMIMEHeaderKey("X-RateLimit-Remaining"), textproto.CanonicalMIMEHeaderKey("X-RateLimit-Reset")},
	}
)

// xRateLimit is the index in budgetFields of the X-RateLimit- form.
const xRateLimit = 1

// headerValue is h.Get(key) for a key already canonical.
func headerValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// ParseBudget reads the rate-limit headers of an answer. The draft
// structured field RateLimit wins, then RateLimit-Remaining/-Reset, then
// X-RateLimit-Remaining/-Reset. A reset is delta seconds; in the
// X-RateLimit form a value above 10^9 is a Unix time (SendGrid, GitHub),
// taken against now. ok is false when no remaining count could be read.
func ParseBudget(h http.Header, now time.Time) (Budget, bool) {
	if v := headerValue(h, budgetHeader); v != "" {
		if b, ok := parseStructuredRateLimit(v); ok {
			return b, true
		}
	}
	for i, f := range budgetFields {
		v := strings.TrimSpace(headerValue(h, f.remaining))
		if v == "" {
			continue // the usual answer: no error to make
		}
		rem, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		b := Budget{Remaining: rem}
		if r, err := strconv.ParseFloat(strings.TrimSpace(headerValue(h, f.reset)), 64); err == nil && r > 0 && r < 1e15 {
			// No float beyond int64's range is converted (r*1e9 is, from
			// 9.3e9 s on): Go leaves the result to the CPU, the least
			// int64 on amd64, which read an absurd reset as none.
			if i == xRateLimit && r > 1e9 {
				sec, frac := math.Modf(r)
				b.Reset = time.Unix(int64(sec), int64(frac*1e9)).Sub(now) // Sub saturates
			} else {
				b.Reset = time.Duration(min(r, maxBudgetReset.Seconds()) * float64(time.Second))
			}
		}
		b.Reset = min(max(b.Reset, 0), maxBudgetReset)
		return b, true
	}
	return Budget{}, false
}

// parseStructuredRateLimit reads the first item of a RateLimit field in
// the structured form of the current draft: a list of `"policy";r=N;t=S`
// items (r: remaining quota units, t: seconds until the quota resets).
// With several policies the most constraining one (least remaining, then
// the longest reset) is the budget.
func parseStructuredRateLimit(v string) (Budget, bool) {
	var best Budget
	found := false
	for _, item := range strings.Split(v, ",") {
		params := strings.Split(item, ";")
		var b Budget
		haveR := false
		for _, p := range params[1:] {
			k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
			if err != nil || n < 0 {
				continue
			}
			switch k {
			case "r":
				b.Remaining, haveR = n, true
			case "t":
				b.Reset = min(time.Duration(min(n, int64(maxBudgetReset/time.Second)))*time.Second, maxBudgetReset)
			}
		}
		if !haveR {
			continue
		}
		if !found || b.Remaining < best.Remaining || (b.Remaining == best.Remaining && b.Reset > best.Reset) {
			best, found = b, true
		}
	}
	return best, found
}
