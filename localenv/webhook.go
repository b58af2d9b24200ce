package localenv

import (
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strconv"
)

// MaxProviderBody is the largest request body the sandbox and the tests'
// fake providers read (SPEC §2 jobs are at most 64 KiB).
const MaxProviderBody = 1 << 20

// WebhookRequest is a request ReadWebhook read and checked.
type WebhookRequest struct {
	Body []byte
	// ID is the Idempotency-Key header, or else the body's "id".
	ID string
}

// ReadWebhook reads a request to a webhook provider (SPEC §7) and checks
// the protocol the way the sandbox and the tests' fake provider both do:
// POST (else 405), Content-Type application/json (else 415), a body of at
// most MaxProviderBody bytes (else 413) holding a JSON object (else 400).
// status is 0 for a request that passes, else the answer it gets, with
// reason, its one-line explanation; the body read is returned either way.
func ReadWebhook(r *http.Request) (req WebhookRequest, status int, reason string) {
	req.Body, _ = io.ReadAll(io.LimitReader(r.Body, MaxProviderBody+1))
	req.ID = r.Header.Get("Idempotency-Key")
	var job struct {
		ID string `json:"id"`
	}
	jsonErr := json.Unmarshal(req.Body, &job)
	if req.ID == "" {
		req.ID = job.ID
	}
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
