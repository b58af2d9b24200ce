package localenv

import (
	"cmp"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
)

// MaxProviderBody is the largest request body the sandbox and the tests'
// fake providers read (SPEC §2 jobs are at most 64 KiB).
const MaxProviderBody = 1 << 20

// WebhookRequest is a request ReadWebhook read and checked.
type WebhookRequest struct {
	Body []byte
	// ID is the body's "id" (the job's id, unique within its tenant), or
	// else the Idempotency-Key header's key.
	ID string
	// Key is the Idempotency-Key header's key (IdempotencyKey: the job's id
	// within its tenant, "acme/order-42" for tenant acme's, unique across
	// tenants), or else the body's "id".
	Key string
}

// IdempotencyKey is the key an Idempotency-Key header carries: its
// structured-field String unquoted and unescaped, as
// draft-ietf-httpapi-idempotency-key-header defines the field (the
// notifier's webhook kind sends "job-1"), or the value as it is when it is
// not one (a sender that sends job-1 bare); "" without the header.
func IdempotencyKey(h http.Header) string {
	v := strings.TrimSpace(h.Get("Idempotency-Key"))
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return v
	}
	var b strings.Builder
	for i := 1; i < len(v)-1; i++ {
		c := v[i]
		switch {
		case c == '\\' && i+1 < len(v)-1 && (v[i+1] == '"' || v[i+1] == '\\'):
			i++
			b.WriteByte(v[i])
		case c == '"' || c == '\\' || c < 0x20 || c > 0x7e:
			return v // not a String
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// ReadWebhook reads a request to a webhook provider (SPEC §7) and checks
// the protocol the way the sandbox and the tests' fake provider both do:
// POST (else 405), Content-Type application/json (else 415), a body of at
// most MaxProviderBody bytes (else 413) holding a JSON object (else 400).
// status is 0 for a request that passes, else the answer it gets, with
// reason, its one-line explanation; the body read is returned either way.
func ReadWebhook(r *http.Request) (req WebhookRequest, status int, reason string) {
	req.Body, _ = io.ReadAll(io.LimitReader(r.Body, MaxProviderBody+1))
	var job struct {
		ID string `json:"id"`
	}
	jsonErr := json.Unmarshal(req.Body, &job)
	req.Key = cmp.Or(IdempotencyKey(r.Header), job.ID)
	req.ID = cmp.Or(job.ID, req.Key)
	mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case r.Method != http.MethodPost:
		return req, http.StatusMethodNotAllowed, "method " + r.Method + " not allowed, use POST"
	case mediaType != "application/json":
		return req, http.StatusUnsupportedMediaType, "content type must be application/json"
	case len(req.Body) > MaxProviderBody:
		return req, http.StatusRequestEntityTooLarge, "body over 1 MiB"
	case jsonErr != nil:
		return req, http.StatusBadRequest, "body is not a JSON object"
	}
	return req, 0, ""
}

// ReasonBody is the JSON body of a provider's refusal: {"reason": why}.
func ReasonBody(why string) string { return `{"reason":` + strconv.Quote(why) + "}\n" }
