package gateway

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/notifier/notifier/queue"
)

// answer is what a request gets: status, body (JSON or problem+json).
type answer struct {
	status     int
	body       any
	retryAfter time.Duration // > 0: a Retry-After header, whole seconds ≥ 1
}

// problem is an RFC 9457 problem document.
type problem struct {
	Type    string       `json:"type"`
	Title   string       `json:"title"`
	Status  int          `json:"status"`
	Detail  string       `json:"detail,omitempty"`
	Field   string       `json:"field,omitempty"`
	Rule    string       `json:"rule,omitempty"`
	Items   []itemResult `json:"items,omitempty"`
	Results []itemResult `json:"results,omitempty"`
}

// itemResult is one job of an array: accepted (with its id), or why not.
type itemResult struct {
	Index     int    `json:"index"`
	ID        string `json:"id,omitempty"`
	Status    string `json:"status"` // accepted | invalid | too_large | reused | unavailable
	Duplicate bool   `json:"duplicate,omitempty"`
	Field     string `json:"field,omitempty"`
	Rule      string `json:"rule,omitempty"`
	// unsent: its publish failed before the message left (notSent), so
	// nothing was stored.
	unsent bool
}

// Problem types (relative URI references, RFC 9457).
const (
	TypeQuotaExceeded      = "quota-exceeded"
	TypeOverCapacity       = "over-capacity"
	TypeOverloaded         = "overloaded"
	TypeTooManyConnections = "too-many-connections"
	TypeAuthFailures       = "too-many-auth-failures"
	TypeUnauthorized       = "unauthorized"
	TypePriorityNotAllowed = "priority-not-allowed"
	TypeInvalidJob         = "invalid-job"
	TypeIDReused           = "idempotency-key-reused"
	TypeTooLarge           = "too-large"
	TypeBatchOverBurst     = "batch-exceeds-burst"
	TypeUnsupported        = "unsupported-media-type"
	TypeMalformed          = "malformed-request"
	TypeRequestTimeout     = "request-timeout"
	TypeUnavailable        = "unavailable"
	TypeInternal           = "internal-error"
)

// StatusIDReused is the answer to a job id of the tenant that holds
// another job: 409 Conflict, as the contract (SPEC §9) names it. (The
// idempotency-key draft, draft-ietf-httpapi-idempotency-key-header §2.7,
// suggests 422 for a key reused with another payload and 409 for a request
// still in progress; here a request in progress is simply published again,
// JetStream's duplicate window making the two one job, so 409 has one
// meaning only: this tenant's id names another job.)
const StatusIDReused = http.StatusConflict

func problemOf(status int, typ, title, detail string) *problem {
	return &problem{Type: typ, Title: title, Status: status, Detail: detail}
}

// write sends a and counts it under label.
func (g *Gateway) write(c *fasthttp.RequestCtx, label string, a answer) {
	h := &c.Response.Header
	if a.retryAfter > 0 {
		var buf [20]byte
		h.SetBytesV("Retry-After", strconv.AppendInt(buf[:0], ceilSeconds(a.retryAfter), 10))
	}
	switch body := a.body.(type) {
	case encoded: // pre-encoded problem+json
		h.SetContentType(problemContentType)
		c.SetBody(body)
	case *problem:
		h.SetContentType(problemContentType)
		c.SetBody(mustJSON(body))
	default:
		h.SetContentType(jsonContentType)
		c.SetBody(mustJSON(body))
	}
	h.Set("Cache-Control", "no-store")
	c.SetStatusCode(a.status)
	g.count(label, a.status)
}

// encoded is an answer body already encoded (with its final newline).
type encoded []byte

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil { // cannot happen: plain structs
		b = []byte(`{}`)
	}
	return append(b, '\n')
}

// ceilSeconds is d in whole seconds rounded up, at least 1.
func ceilSeconds(d time.Duration) int64 {
	return max(1, int64(math.Ceil(d.Seconds())))
}

// invalidProblem is the 400 of an invalid job, naming the field and rule.
func invalidProblem(ie *queue.InvalidError) *problem {
	p := problemOf(http.StatusBadRequest, TypeInvalidJob, "Invalid job", ie.Error())
	p.Field, p.Rule = ie.Field, ie.Rule
	return p
}
