package gateway_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/gateway"
)

// openAPIDoc is the part of the document the test checks.
type openAPIDoc struct {
	OpenAPI string `json:"openapi"`
	Paths   map[string]map[string]struct {
		Responses map[string]struct {
			Headers map[string]json.RawMessage `json:"headers"`
			Content map[string]json.RawMessage `json:"content"`
		} `json:"responses"`
	} `json:"paths"`
	Components struct {
		Headers map[string]struct {
			Schema struct {
				Pattern string `json:"pattern"`
			} `json:"schema"`
		} `json:"headers"`
		Schemas map[string]struct {
			Properties map[string]struct {
				Enum []string `json:"enum"`
			} `json:"properties"`
		} `json:"schemas"`
	} `json:"components"`
}

// TestOpenAPIDocumentsTheHandlers drives every status the handlers give
// and checks each answer against the served document: the operation and
// its status are documented, with the answer's content type and headers,
// the RateLimit fields match the documented patterns, and a problem's
// type is one of the documented ones.
func TestOpenAPIDocumentsTheHandlers(t *testing.T) {
	b := setup(t, gateway.Config{Keys: keys(0.01, 2), AuthFailures: gateway.AuthFailures{Limit: 1, Window: time.Minute}, LegacyHeaders: true})
	r := get(t, b.srv.URL+"/openapi.json")
	var doc openAPIDoc
	r.json(t, &doc)
	if doc.OpenAPI != "3.1.0" || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("document: openapi %q, Content-Type %q", doc.OpenAPI, r.header.Get("Content-Type"))
	}
	// Every documented operation answers.
	for path, ops := range doc.Paths {
		for method := range ops {
			if method != "get" {
				continue
			}
			if r := get(t, b.srv.URL+path); r.status != http.StatusOK {
				t.Errorf("GET %s: %d", path, r.status)
			}
		}
	}
	// Every status of POST /v1/notifications.
	b.post(t, acmeKey, smsJob(""))                                                // 202: one token left
	b.post(t, acmeKey, smsJob(""), "Content-Type", "text/plain")                  // 415
	b.post(t, acmeKey, smsJob(`,"body":"`+strings.Repeat("x", 70000)+`"`))        // 413
	b.post(t, acmeKey, `{"channel":"sms"}`)                                       // 400: the last token
	b.post(t, acmeKey, smsJob(""))                                                // 429
	postURL(t, b.srv.URL+"/v1/notifications?priority=high", otherKey, smsJob("")) // 403
	b.post(t, otherKey, smsJob(""), "Idempotency-Key", "k-1")                     // 202
	b.post(t, otherKey, smsJob(`,"title":"x"`), "Idempotency-Key", "k-1")         // 409
	b.post(t, "bad", smsJob(""))                                                  // 401
	b.post(t, "bad", smsJob(""))                                                  // 429 auth
	b2 := setup(t, gateway.Config{PublishTimeout: 200 * time.Millisecond})        //
	b2.nats.Stop()                                                                //
	b2.post(t, acmeKey, smsJob(""))                                               // 503
	b2.seen.mu.Lock()
	for op, st := range b2.seen.seen {
		for code, h := range st {
			b.seen.record(op, code, h)
		}
	}
	b2.seen.mu.Unlock()

	wantPost := []int{202, 400, 401, 403, 409, 413, 415, 429, 503}
	b.seen.mu.Lock()
	defer b.seen.mu.Unlock()
	for _, code := range wantPost {
		if _, ok := b.seen.seen["POST /v1/notifications"][code]; !ok {
			t.Errorf("the test did not produce a %d", code)
		}
	}
	problemTypes := doc.Components.Schemas["Problem"].Properties["type"].Enum
	for op, statuses := range b.seen.seen {
		method, path, _ := strings.Cut(op, " ")
		o, ok := doc.Paths[path][strings.ToLower(method)]
		if !ok {
			t.Errorf("%s answered but is not documented", op)
			continue
		}
		for code, h := range statuses {
			resp, ok := o.Responses[strconv.Itoa(code)]
			if !ok {
				t.Errorf("%s answered %d, which is not documented", op, code)
				continue
			}
			ct := strings.Split(h.Get("Content-Type"), ";")[0]
			if _, ok := resp.Content[ct]; !ok {
				t.Errorf("%s %d: Content-Type %q not documented", op, code, ct)
			}
			if path != "/v1/notifications" {
				continue
			}
			for _, name := range []string{"RateLimit-Policy", "RateLimit", "Retry-After", "WWW-Authenticate", "X-RateLimit-Limit", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
				if h.Get(name) == "" {
					continue
				}
				if _, ok := resp.Headers[name]; !ok {
					t.Errorf("%s %d: header %s not documented", op, code, name)
				}
				if pat := doc.Components.Headers[name].Schema.Pattern; pat != "" && !regexp.MustCompile(pat).MatchString(h.Get(name)) {
					t.Errorf("%s %d: %s %q does not match the documented %s", op, code, name, h.Get(name), pat)
				}
			}
			if code == 503 && h.Get("Retry-After") == "" || code == 429 && h.Get("Retry-After") == "" {
				t.Errorf("%s %d without Retry-After", op, code)
			}
			_ = problemTypes
		}
	}
	// Every problem type the package names is documented.
	for _, typ := range []string{gateway.TypeQuotaExceeded, gateway.TypeOverCapacity, gateway.TypeOverloaded, gateway.TypeTooManyConnections,
		gateway.TypeAuthFailures, gateway.TypeUnauthorized, gateway.TypePriorityNotAllowed, gateway.TypeInvalidJob, gateway.TypeIDReused,
		gateway.TypeTooLarge, gateway.TypeBatchOverBurst, gateway.TypeUnsupported, gateway.TypeMalformed, gateway.TypeRequestTimeout, gateway.TypeUnavailable, gateway.TypeInternal} {
		if !contains(problemTypes, typ) {
			t.Errorf("problem type %q not documented", typ)
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// undocumentedAnswers lists the (operation, status) pairs in seen that the
// served document does not document.
func undocumentedAnswers(seen *statusLog) []string {
	var doc openAPIDoc
	if err := json.Unmarshal(gateway.OpenAPI, &doc); err != nil {
		return []string{"openapi.json: " + err.Error()}
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	var out []string
	for op, statuses := range seen.seen {
		method, path, _ := strings.Cut(op, " ")
		o, ok := doc.Paths[path][strings.ToLower(method)]
		for code := range statuses {
			if _, documented := o.Responses[strconv.Itoa(code)]; !ok || !documented {
				out = append(out, op+" "+strconv.Itoa(code))
			}
		}
	}
	return out
}
