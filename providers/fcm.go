package providers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
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
// The answer's google.rpc error body is read: the FCM error code in
// error.details[].errorCode, else error.status, decides the class.
// UNREGISTERED, INVALID_ARGUMENT, SENDER_ID_MISMATCH, THIRD_PARTY_AUTH_ERROR,
// NOT_FOUND and PERMISSION_DENIED are ErrPermanent; QUOTA_EXCEEDED and
// RESOURCE_EXHAUSTED (429) are a *RateLimitedError honouring Retry-After;
// UNAVAILABLE (503, Retry-After kept in Error.RetryAfter), INTERNAL (500),
// 408, timeouts and connection errors are ErrTransient. UNAUTHENTICATED
// (401) is ErrPermanent with a configured token, and ErrTransient with a
// service account, whose cached token is then dropped so the next Send
// fetches a fresh one. A failed token fetch is classed like a send: a 4xx
// from the token endpoint (a revoked key: invalid_grant) is ErrPermanent,
// anything else ErrTransient.
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

// NewFCM builds an fcm provider from a kind fcm entry, reading the bearer
// token from credentials_env through opts.Getenv or the service-account key
// from credentials_file.
func NewFCM(cfg Config, opts Options) (*FCM, error) {
	cfg = cfg.WithDefaults()
	if cfg.Kind != "fcm" {
		return nil, fmt.Errorf("new fcm %s: kind is %q, not fcm", cfg.Name, cfg.Kind)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new fcm %s: %w", cfg.Name, err)
	}
	opts = opts.withDefaults()
	base, err := newHTTPBase(cfg, opts, false)
	if err != nil {
		return nil, fmt.Errorf("new fcm %s: %w", cfg.Name, err)
	}
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
	body, err := marshalJSON(fcmRequest{Message: fcmMessage{
		Token: m.To, Notification: fcmNotification{Title: m.Title, Body: m.Body}, Data: m.Data,
	}})
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
	read := readFCMAnswer
	if f.oauth != nil {
		read = func(status int, body []byte) answer {
			a := readFCMAnswer(status, body)
			if status == http.StatusUnauthorized {
				// The access token was refused before it expired (revoked,
				// or the clocks disagree): fetch a new one next time.
				f.oauth.invalidate(token)
				a.class = ErrTransient
			}
			return a
		}
	}
	return f.post(ctx, f.endpoint, header, body, s, read)
}

// googleError is a google.rpc error body.
type googleError struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
		Details []struct {
			Type      string `json:"@type"`
			ErrorCode string `json:"errorCode"`
		} `json:"details"`
	} `json:"error"`
}

// fcmClasses maps FCM error codes and google.rpc statuses to a class.
var fcmClasses = map[string]error{
	"UNREGISTERED":           ErrPermanent,
	"INVALID_ARGUMENT":       ErrPermanent,
	"SENDER_ID_MISMATCH":     ErrPermanent,
	"THIRD_PARTY_AUTH_ERROR": ErrPermanent,
	"NOT_FOUND":              ErrPermanent,
	"PERMISSION_DENIED":      ErrPermanent,
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
// found.". A body of another shape gives way to the generic reason and the
// status's class.
func readFCMAnswer(status int, body []byte) answer {
	var e googleError
	if json.Unmarshal(body, &e) != nil || (e.Error.Status == "" && e.Error.Message == "") {
		return answer{reason: responseReason(body)}
	}
	code := ""
	for _, d := range e.Error.Details {
		if d.ErrorCode != "" {
			code = d.ErrorCode
			break
		}
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
	return a
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
