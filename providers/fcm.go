package providers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/notifier/notifier/internal/text"
)

// FCM is the fcm provider (SPEC §7): each Send is one
// `POST {url}/v1/projects/{project_id}/messages:send` of Firebase Cloud
// Messaging HTTP v1 with the JSON body
//
//	{"message":{"token":"<to>","notification":{"title":"..","body":".."},"data":{..}}}
//
// authenticated with a bearer token: either the token in the environment
// variable named by credentials_env, or OAuth access tokens obtained with
// the service-account key in credentials_file (scope
// https://www.googleapis.com/auth/firebase.messaging) through
// golang.org/x/oauth2/google, each cached until a minute before it expires
// and replaced in the background from five minutes before, so only the
// first send waits for a token.
//
// A message with an expiry carries it to every platform: android.ttl (the
// whole seconds left, "300s", at least 0 and at most FCMMaxTTL),
// apns.headers["apns-expiration"] (its UNIX seconds) and webpush.headers.TTL
// (the seconds left); one without leaves FCM's defaults (four weeks). Data
// over FCMMaxData bytes (keys and values), or a data key FCM reserves
// ("from", "message_type", any key starting with "google" or "gcm"), is
// ErrPermanent without a request.
//
// The answer's google.rpc error body is read: the FCM error code in
// error.details[].errorCode, else error.status, decides the class.
// UNREGISTERED (with RecipientGone: the token is dead), INVALID_ARGUMENT,
// SENDER_ID_MISMATCH (the token belongs to another project) and NOT_FOUND
// are ErrPermanent. THIRD_PARTY_AUTH_ERROR
// (FCM's APNs certificate or web push key is invalid or missing) and a
// PERMISSION_DENIED without an FCM code (the credentials may not send for
// the project) are ErrSender. UNAUTHENTICATED (401) is ErrSender with a
// configured token, and ErrTransient with a service account, whose cached
// token is then dropped so the next Send fetches a fresh one (a
// THIRD_PARTY_AUTH_ERROR, also a 401, keeps it: the token is fine).
// QUOTA_EXCEEDED is a *RateLimitedError pausing at least FCMQuotaPause
// (FCM asks for exponential backoff from a minute), of ScopeRecipient when
// its google.rpc.QuotaFailure names a device's or a topic's message rate
// (the target of this one message) and ScopeProvider otherwise (the
// project's rate, or no detail), whose pause doubles over a run; another
// RESOURCE_EXHAUSTED or 429 is a provider rate limit honouring
// Retry-After, or without one pausing FCMOverloadPause, doubled over a run
// (see throttle). UNAVAILABLE (503, Retry-After kept in
// Error.RetryAfter), INTERNAL (500), 408, timeouts and connection errors
// are ErrTransient (Ambiguous once the request was written whole: FCM's
// send has no idempotency key). A failed token fetch is classed like a
// send: a 4xx from the token endpoint (a revoked or deleted key:
// invalid_grant) is ErrSender, anything else ErrTransient.
//
// An FCM is safe for concurrent use; its connections are pooled and kept
// alive until Close.
type FCM struct {
	httpBase
	endpoint string
	bearer   *credential  // the configured token; nil with a service account
	oauth    *oauthSource // nil with a configured token
}

var _ Provider = (*FCM)(nil)

// FCMScope is the OAuth scope of the access tokens FCM uses.
const FCMScope = "https://www.googleapis.com/auth/firebase.messaging"

// FCM's limits.
const (
	// FCMMaxData is the most bytes of data (keys and values) a message may
	// carry.
	FCMMaxData = 4096
	// FCMMaxTTL is the longest android.ttl FCM takes: 28 days.
	FCMMaxTTL = 28 * 24 * time.Hour
	// FCMQuotaPause is the least pause of a QUOTA_EXCEEDED, the first of a
	// run that doubles: Firebase's ErrorCode reference asks to "use
	// exponential backoff with a minimum initial delay of 1 minute".
	FCMQuotaPause = time.Minute
	// FCMOverloadPause is the pause of a 429 without an FCM code and
	// without Retry-After (FCM overloaded: "429 responses may also be
	// returned in overload situations", Firebase's "Throttling and
	// quotas"), the first of a run that doubles: Firebase's ErrorCode
	// reference asks for exponential back-off on overload ("if you waited
	// one second before the first retry, wait at least two seconds before
	// the next one, then 4 seconds and so on").
	FCMOverloadPause = time.Second
)

// fcmKind is the fcm entry of kinds.
var fcmKind = kind{
	name:     "fcm",
	channel:  "push",
	keys:     []string{"url", "project_id", "credentials_env", "credentials_file", "tls_ca_file"},
	defaults: urlDefault(defaultFCMURL),
	validate: validateFCM,
	build:    builder(newFCM),
}

// defaultFCMURL is the default url of kind fcm.
const defaultFCMURL = "https://fcm.googleapis.com"

// validateFCM checks an fcm entry's own keys.
func validateFCM(c Config, p *problems) {
	p.requiredURL(c.URL)
	p.required("project_id", c.ProjectID)
	switch {
	case c.CredentialsEnv == "" && c.CredentialsFile == "":
		p.add("credentials_env", "required for kind fcm unless credentials_file is set")
	case c.CredentialsEnv != "" && c.CredentialsFile != "":
		p.add("credentials_file", "set either credentials_env (a bearer token) or credentials_file (a service-account key), not both")
	}
}

// NewFCM builds an fcm provider from a kind fcm entry, reading the bearer
// token from credentials_env through opts.Getenv or the service-account key
// from credentials_file.
func NewFCM(cfg Config, opts Options) (*FCM, error) {
	return newChecked(cfg, opts, "fcm", "fcm", newFCM)
}

// newFCM is NewFCM for an entry already checked (kind fcm,
// defaults applied, valid): NewRegistry checks every entry first.
func newFCM(cfg Config, opts Options) (*FCM, error) {
	opts = opts.withDefaults()
	base, err := newHTTPBase(cfg, opts, false)
	if err != nil {
		return nil, fmt.Errorf("new fcm %s: %w", cfg.Name, err)
	}
	base.floor = FCMOverloadPause
	f := &FCM{
		httpBase: base,
		endpoint: trimSlash(cfg.URL) + "/v1/projects/" + url.PathEscape(cfg.ProjectID) + "/messages:send",
	}
	if cfg.CredentialsEnv != "" {
		token, err := lookupSecret(opts, cfg.CredentialsEnv)
		if err != nil {
			return nil, fmt.Errorf("new fcm %s: credentials_env: %w", cfg.Name, err)
		}
		f.bearer = &credential{token}
		return f, nil
	}
	key, err := os.ReadFile(cfg.CredentialsFile)
	if err != nil {
		return nil, fmt.Errorf("new fcm %s: credentials_file: %w", cfg.Name, err)
	}
	var rt http.RoundTripper = base.transport
	if base.transport == nil {
		rt = base.client.Transport
	}
	f.oauth, err = newOAuthSource(key, rt, opts.Now)
	if err != nil {
		return nil, fmt.Errorf("new fcm %s: credentials_file %s: %w", cfg.Name, cfg.CredentialsFile, err)
	}
	return f, nil
}

// Name returns the configured name.
func (f *FCM) Name() string { return f.name }

// String describes the provider without its secret.
func (f *FCM) String() string { return "fcm " + f.name }

// Close ends a background token fetch and releases the provider's idle
// connections. Send still works after Close, opening new connections.
func (f *FCM) Close() error {
	if f.oauth != nil {
		f.oauth.close()
	}
	f.closeIdle()
	return nil
}

type fcmRequest struct {
	Message fcmMessage `json:"message"`
}

type fcmMessage struct {
	Token        string            `json:"token"`
	Notification fcmNotification   `json:"notification"`
	Data         map[string]string `json:"data,omitempty"`
	Android      *fcmAndroid       `json:"android,omitempty"`
	APNs         *fcmHeaders       `json:"apns,omitempty"`
	Webpush      *fcmHeaders       `json:"webpush,omitempty"`
}

type fcmAndroid struct {
	TTL string `json:"ttl"`
}

type fcmHeaders struct {
	Headers map[string]string `json:"headers"`
}

type fcmNotification struct {
	Title string `json:"title,omitempty"`
	Body  string `json:"body,omitempty"`
}

// Send posts m as one FCM message to the device token m.To.
func (f *FCM) Send(ctx context.Context, m *Message) error {
	var token string
	if f.bearer != nil {
		token = f.bearer.value
	}
	s := newScrubber(m, token)
	if m == nil {
		return &Error{Provider: f.name, Class: ErrPermanent, Detail: "nil message"}
	}
	if detail := fcmDataProblem(m.Data, s); detail != "" {
		return &Error{Provider: f.name, Class: ErrPermanent, Detail: detail + ", not sent"}
	}
	msg := fcmMessage{Token: m.To, Notification: fcmNotification{Title: m.Title, Body: m.Body}, Data: m.Data}
	if !m.ExpiresAt.IsZero() {
		left := min(max(m.ExpiresAt.Sub(f.now()), 0), FCMMaxTTL) / time.Second
		secs := strconv.FormatInt(int64(left), 10)
		msg.Android = &fcmAndroid{TTL: secs + "s"}
		msg.APNs = &fcmHeaders{Headers: map[string]string{"apns-expiration": apnsExpiration(m.ExpiresAt)}}
		msg.Webpush = &fcmHeaders{Headers: map[string]string{"TTL": secs}}
	}
	body, err := marshalJSON(fcmRequest{Message: msg})
	if err != nil {
		return &Error{Provider: f.name, Class: ErrPermanent, Detail: "encode message: " + causeDetail(err, s), Err: err}
	}
	if f.oauth != nil {
		if token, err = f.oauth.token(ctx, f.name, f.timeout, s); err != nil {
			return err
		}
		s.secrets = append(s.secrets, token)
	}
	header := http.Header{}
	header.Set("Content-Type", "application/json; charset=utf-8")
	header.Set("Authorization", "Bearer "+token)
	oauth := f.oauth != nil
	return f.post(ctx, f.endpoint, header, body, s, func(status int, body []byte) answer {
		a, code := readFCMAnswer(status, body)
		if status == http.StatusUnauthorized && code != "THIRD_PARTY_AUTH_ERROR" {
			if oauth {
				// The access token was refused before it expired (revoked,
				// or the clocks disagree): fetch a new one next time.
				f.oauth.invalidate(token)
				a.class = ErrTransient
			} else {
				a.class = ErrSender // the configured token: only an operator can replace it
			}
		}
		return a
	})
}

// fcmDataProblem is why FCM would refuse data (too large, a reserved key),
// or "".
func fcmDataProblem(data map[string]string, s scrubber) string {
	size := 0
	for k, v := range data {
		size += len(k) + len(v)
		if fcmReservedKey(k) {
			return "data key " + strconv.Quote(text.OneLine(s.scrub(k), 40)) + " is reserved by FCM"
		}
	}
	if size > FCMMaxData {
		return fmt.Sprintf("data of %d bytes is over FCM's limit of %d", size, FCMMaxData)
	}
	return ""
}

// fcmReservedKey reports whether FCM reserves the data key k: "from",
// "message_type", and any key starting with "google" or "gcm".
func fcmReservedKey(k string) bool {
	return k == "from" || k == "message_type" || strings.HasPrefix(k, "google") || strings.HasPrefix(k, "gcm")
}

// googleError is a google.rpc error body.
type googleError struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
		Details []struct {
			Type       string           `json:"@type"`
			ErrorCode  string           `json:"errorCode"`  // google.firebase.fcm.v1.FcmError
			Reason     string           `json:"reason"`     // google.rpc.ErrorInfo
			Violations []quotaViolation `json:"violations"` // google.rpc.QuotaFailure
		} `json:"details"`
	} `json:"error"`
}

// quotaViolation is one violation of a google.rpc.QuotaFailure.
type quotaViolation struct {
	Subject     string `json:"subject"`
	Description string `json:"description"`
	QuotaMetric string `json:"quotaMetric"`
	QuotaID     string `json:"quotaId"`
}

// fcmClasses maps FCM error codes and google.rpc statuses to a class.
var fcmClasses = map[string]error{
	"UNREGISTERED":           ErrPermanent,
	"INVALID_ARGUMENT":       ErrPermanent,
	"SENDER_ID_MISMATCH":     ErrPermanent, // the token is another project's: the recipient's
	"THIRD_PARTY_AUTH_ERROR": ErrSender,    // FCM's APNs certificate or web push key
	"NOT_FOUND":              ErrPermanent,
	"PERMISSION_DENIED":      ErrSender, // without an FCM code: the credentials may not send
	"QUOTA_EXCEEDED":         ErrRateLimited,
	"RESOURCE_EXHAUSTED":     ErrRateLimited,
	"UNAVAILABLE":            ErrTransient,
	"INTERNAL":               ErrTransient,
}

// readFCMAnswer reads a google.rpc error body:
//
//	{"error":{"code":404,"message":"Requested entity was not found.","status":"NOT_FOUND",
//	  "details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"UNREGISTERED"}]}}
//
// The reason is "UNREGISTERED (NOT_FOUND): Requested entity was not
// found."; code is the FCM error code ("" for none). A body of another
// shape gives way to the generic reason and the status's class.
func readFCMAnswer(status int, body []byte) (answer, string) {
	var e googleError
	if json.Unmarshal(body, &e) != nil || (e.Error.Status == "" && e.Error.Message == "") {
		return answer{reason: responseReason(body)}, ""
	}
	code, quota := "", false
	var violations []quotaViolation
	for _, d := range e.Error.Details {
		if d.ErrorCode != "" && code == "" {
			code = d.ErrorCode
		}
		// FCM's quota code, or Google's quota reasons in an ErrorInfo.
		switch d.Reason {
		case "QUOTA_EXCEEDED", "RATE_LIMIT_EXCEEDED":
			quota = true
		}
		violations = append(violations, d.Violations...)
	}
	var words []string
	switch {
	case code != "" && e.Error.Status != "" && code != e.Error.Status:
		words = append(words, code+" ("+e.Error.Status+")")
	case code != "":
		words = append(words, code)
	case e.Error.Status != "":
		words = append(words, e.Error.Status)
	}
	if e.Error.Message != "" {
		words = append(words, e.Error.Message)
	}
	a := answer{reason: strings.Join(words, ": ")}
	if class, ok := fcmClasses[code]; ok {
		a.class = class
	} else if class, ok := fcmClasses[e.Error.Status]; ok {
		a.class = class
	}
	if a.class == ErrSender && (status < 400 || status > 499) {
		a.class = nil // a sender's refusal is a 4xx; anything else goes by its status
	}
	if code == "QUOTA_EXCEEDED" || quota {
		a.minPause = FCMQuotaPause
		a.scope = quotaScope(violations)
	}
	a.gone = code == "UNREGISTERED" && status >= 400 && status <= 499
	return a, code
}

// quotaScope is what a QUOTA_EXCEEDED's violations say was exceeded: the
// message rate of a device or of a topic, the target of this message alone
// (ScopeRecipient), or the project's (ScopeProvider), which also stands for
// no violation or one it cannot read. A project quota among them wins.
func quotaScope(violations []quotaViolation) Scope {
	scope := ScopeProvider
	for _, v := range violations {
		text := strings.ToLower(v.Subject + " " + v.Description + " " + v.QuotaMetric + " " + v.QuotaID)
		if !strings.Contains(text, "device") && !strings.Contains(text, "topic") {
			return ScopeProvider
		}
		scope = ScopeRecipient
	}
	return scope
}

// marshalJSON encodes v without HTML escaping (a body "<b>" stays "<b>").
func marshalJSON(v any) ([]byte, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return []byte(strings.TrimSuffix(b.String(), "\n")), nil
}
