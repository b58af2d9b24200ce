package testenv

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// FCMMessage is one message the FCM fake accepted.
type FCMMessage struct {
	At    time.Time
	Name  string // the message name the fake assigned, projects/<p>/messages/<id>
	Token string // the registration token it was sent to
	Title string
	Body  string
	Data  map[string]string
	// AndroidTTL is android.ttl as sent ("300s"; "" for none: FCM's
	// default, four weeks).
	AndroidTTL string
	// APNsExpiration is apns.headers["apns-expiration"] ("" for none).
	APNsExpiration string
	// WebpushTTL is webpush.headers["TTL"] ("" for none).
	WebpushTTL string
	// OAuth reports whether the bearer token was one the fake's token
	// endpoint issued (a service account), rather than BearerToken.
	OAuth bool
}

// FCMFake is a fake of Firebase Cloud Messaging HTTP v1: it answers
// `POST /v1/projects/{project}/messages:send` as FCM does, checking, in
// this order:
//
//   - the path and method (404 NOT_FOUND);
//   - Authorization: Bearer with BearerToken or an unexpired token its own
//     token endpoint issued (401 UNAUTHENTICATED);
//   - the project (403 PERMISSION_DENIED);
//   - Content-Type application/json and a JSON body of the v1 shape,
//     unknown fields refused (400 INVALID_ARGUMENT);
//   - exactly one target; a token of 20-4096 characters of
//     [A-Za-z0-9_:-] (400 INVALID_ARGUMENT, errorCode INVALID_ARGUMENT);
//     no reserved data key ("from", "message_type", any key starting with
//     "google" or "gcm": the v1 reference's list) and at most 4096 bytes of
//     data, keys and values (400 INVALID_ARGUMENT); android.ttl a
//     duration in seconds ("300s", "1.5s") of at most 28 days,
//     apns.headers["apns-expiration"] and webpush.headers["TTL"] whole
//     numbers (400 INVALID_ARGUMENT);
//   - a token unregistered with Unregister (404 NOT_FOUND, errorCode
//     UNREGISTERED), or throttled with ThrottleDevice (429
//     RESOURCE_EXHAUSTED, errorCode QUOTA_EXCEEDED, a google.rpc.QuotaFailure
//     naming the device's message rate).
//
// Then HangFor, AcceptThenHang, FailNext, FailFor, RateLimitFor (429
// RESOURCE_EXHAUSTED, errorCode QUOTA_EXCEEDED, a QuotaFailure naming the
// project's message rate, Retry-After) and the contract (429
// RESOURCE_EXHAUSTED without an FCM code, as FCM answers when overloaded,
// Retry-After: a per-second contract is not FCM's per-minute quota), then
// 200 with {"name": ...}. An injected status carries FCM's status and code
// for it (401 UNAUTHENTICATED without a code: the access token refused; 403
// SENDER_ID_MISMATCH, 404 UNREGISTERED, 429 QUOTA_EXCEEDED, 503
// UNAVAILABLE…), or the code set with ErrorCodeFor (401
// THIRD_PARTY_AUTH_ERROR). Errors are google.rpc bodies:
//
//	{"error":{"code":404,"message":"…","status":"NOT_FOUND",
//	  "details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"UNREGISTERED"}]}}
//
// Its token endpoint (TokenURL) implements the OAuth 2.0 JWT-bearer grant
// of a Google service account (ServiceAccountFile): it verifies the
// assertion's RS256 signature with the account's public key, its kid, iss,
// aud and scope, and issues access tokens valid for an hour of the fake's
// clock (SetTokenLifetime). Its methods are safe for concurrent use.
//
// Every request that reaches HangFor is an arrival (Arrivals,
// MaxArrivalsInWindow), whatever it is answered; MaxInWindow counts only
// the accepted ones.
type FCMFake struct {
	*httpFake
	t          testing.TB
	project    string
	bearer     string
	lifetime   time.Duration
	tokenFails int
	tokenFail  int
	tokenReqs  int
	issued     map[string]time.Time // access token → expiry, by the fake's clock
	unreg      map[string]bool
	throttle   map[string]bool
	codes      map[int]string // injected status → FCM error code, set by ErrorCodeFor
	overload   time.Time      // OverloadFor's end, by the fake's clock
	messages   []FCMMessage
	saFile     string
	saEmail    string
	saKeyID    string
	saKey      *rsa.PrivateKey
}

// FakeFCM starts an FCM fake on a loopback port (plain HTTP) for project
// "notifier-test" with a fresh bearer token, and closes it when the test
// ends. It takes WithContract and WithClock.
func FakeFCM(t testing.TB, opts ...FakeOption) *FCMFake {
	t.Helper()
	f := &FCMFake{t: t, project: "notifier-test", bearer: "fcm-" + randomHex(24), lifetime: time.Hour,
		issued: map[string]time.Time{}, unreg: map[string]bool{}, throttle: map[string]bool{},
		codes: map[int]string{}}
	f.httpFake = newHTTPFake(newFaultState(t, opts), f)
	mux := http.NewServeMux()
	mux.HandleFunc("/token", f.tokenEndpoint)
	mux.HandleFunc("/", f.serve)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

// URL is the API base URL, http://127.0.0.1:<port> (the fcm kind's url).
func (f *FCMFake) URL() string { return f.srv.URL }

// ProjectID is the Firebase project the fake serves.
func (f *FCMFake) ProjectID() string { return f.project }

// BearerToken is a token the fake always accepts (the credentials_env way).
func (f *FCMFake) BearerToken() string { return f.bearer }

// TokenURL is the fake's OAuth token endpoint, the token_uri of
// ServiceAccountFile.
func (f *FCMFake) TokenURL() string { return f.srv.URL + "/token" }

// ServiceAccountFile writes (once) a Google service-account JSON key whose
// token_uri is TokenURL, and returns its path.
func (f *FCMFake) ServiceAccountFile() string {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.saFile != "" {
		return f.saFile
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		f.t.Fatalf("testenv: service-account key: %v", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		f.t.Fatalf("testenv: service-account key: %v", err)
	}
	f.saKey, f.saKeyID = key, randomHex(20)
	f.saEmail = "notifier@" + f.project + ".iam.gserviceaccount.com"
	b, _ := json.MarshalIndent(map[string]string{
		"type": "service_account", "project_id": f.project, "private_key_id": f.saKeyID,
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": f.saEmail, "client_id": "1234567890", "token_uri": f.srv.URL + "/token",
		"auth_uri": "https://accounts.google.com/o/oauth2/auth",
	}, "", "  ")
	path := filepath.Join(f.t.TempDir(), "service-account.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		f.t.Fatalf("testenv: write service-account key: %v", err)
	}
	f.saFile = path
	return path
}

// SetTokenLifetime sets the expires_in of the access tokens issued from now
// on (default an hour).
func (f *FCMFake) SetTokenLifetime(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lifetime = d
}

// FailTokens answers the next n token requests with status (a 400 is
// invalid_grant, anything else a plain error).
func (f *FCMFake) FailTokens(n, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokenFails, f.tokenFail = n, status
}

// TokenRequests is how many requests the token endpoint received.
func (f *FCMFake) TokenRequests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tokenReqs
}

// Unregister makes every message to the registration token answer 404
// UNREGISTERED, as FCM does after an app was uninstalled.
func (f *FCMFake) Unregister(token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unreg[token] = true
}

// ErrorCodeFor makes the requests FailNext or FailFor answer with status
// carry the FCM error code errorCode ("" for none) instead of the status's
// own: ErrorCodeFor(401, "THIRD_PARTY_AUTH_ERROR") then FailNext(1, 401)
// answers as FCM does when its APNs certificate or web push key is
// refused.
func (f *FCMFake) ErrorCodeFor(status int, errorCode string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.codes[status] = errorCode
}

// OverloadFor answers every message arriving in the next d (once past the
// protocol checks, the device's state included) as FCM does when it is
// overloaded rather than over a quota: 429 RESOURCE_EXHAUSTED without an
// FCM error code and without Retry-After. Firebase's "Throttling and
// quotas": "429 responses may also be returned in overload situations";
// its "Best practices when sending FCM messages at scale": "429 error
// responses with retry-after headers may be returned" (may: here they are
// not). These answers are not arrivals.
func (f *FCMFake) OverloadFor(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.overload = f.now().Add(d)
}

// ThrottleDevice makes every message to the registration token answer 429
// QUOTA_EXCEEDED for the device's message rate, as FCM does when one device
// gets too many (240 a minute on Android).
func (f *FCMFake) ThrottleDevice(token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.throttle[token] = true
}

// Messages returns the accepted messages in order of acceptance.
func (f *FCMFake) Messages() []FCMMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]FCMMessage(nil), f.messages...)
}

func (f *FCMFake) tokenEndpoint(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokenReqs++
	reply := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	grantErr := func(desc string) {
		reply(http.StatusBadRequest, map[string]string{"error": "invalid_grant", "error_description": desc})
	}
	if f.tokenFails > 0 {
		f.tokenFails--
		if f.tokenFail == http.StatusBadRequest {
			grantErr("Invalid grant: account not found")
		} else {
			reply(f.tokenFail, map[string]string{"error": "internal_failure", "error_description": "injected " + strconv.Itoa(f.tokenFail)})
		}
		return
	}
	if r.Method != http.MethodPost || r.ParseForm() != nil {
		reply(http.StatusBadRequest, map[string]string{"error": "invalid_request", "error_description": "POST a form"})
		return
	}
	if g := r.PostForm.Get("grant_type"); g != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		reply(http.StatusBadRequest, map[string]string{"error": "unsupported_grant_type", "error_description": "Invalid grant_type: " + g})
		return
	}
	if f.saKey == nil {
		grantErr("no service account")
		return
	}
	tok, err := jwt.Parse(r.PostForm.Get("assertion"), func(t *jwt.Token) (any, error) {
		if t.Header["kid"] != f.saKeyID {
			return nil, fmt.Errorf("unknown kid %v", t.Header["kid"])
		}
		return &f.saKey.PublicKey, nil
	}, jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuer(f.saEmail), jwt.WithAudience(f.TokenURL()),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt())
	if err != nil {
		grantErr("Invalid JWT: " + err.Error())
		return
	}
	claims, _ := tok.Claims.(jwt.MapClaims)
	scope, _ := claims["scope"].(string)
	if !strings.Contains(" "+scope+" ", " https://www.googleapis.com/auth/firebase.messaging ") {
		grantErr("Invalid scope: " + scope)
		return
	}
	access := "ya29.fake-" + randomHex(24)
	f.issued[access] = f.now().Add(f.lifetime)
	reply(http.StatusOK, map[string]any{"access_token": access, "expires_in": int(f.lifetime / time.Second), "token_type": "Bearer"})
}

var (
	fcmPathRE  = regexp.MustCompile(`^/v1/projects/([^/]+)/messages:send$`)
	fcmTokenRE = regexp.MustCompile(`^[A-Za-z0-9_:\-]+$`)
)

// fcmStatuses names the google.rpc status and FCM error code of an HTTP
// status.
var fcmStatuses = map[int][2]string{
	400: {"INVALID_ARGUMENT", "INVALID_ARGUMENT"},
	401: {"UNAUTHENTICATED", ""},
	403: {"PERMISSION_DENIED", "SENDER_ID_MISMATCH"},
	404: {"NOT_FOUND", "UNREGISTERED"},
	429: {"RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED"},
	500: {"INTERNAL", "INTERNAL"},
	503: {"UNAVAILABLE", "UNAVAILABLE"},
}

// googleError is a google.rpc error body; errorCode "" leaves out the FCM
// details. extra are further details (a QuotaFailure).
func googleError(status int, rpcStatus, errorCode, message string, extra ...map[string]any) fakeReply {
	e := map[string]any{"code": status, "message": message, "status": rpcStatus}
	var details []map[string]any
	if errorCode != "" {
		details = append(details, map[string]any{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": errorCode})
	}
	if details = append(details, extra...); len(details) > 0 {
		e["details"] = details
	}
	return jsonReply(status, map[string]any{"error": e})
}

// quotaFailure is a google.rpc.QuotaFailure detail with one violation.
func quotaFailure(subject, description string) map[string]any {
	return map[string]any{"@type": "type.googleapis.com/google.rpc.QuotaFailure",
		"violations": []map[string]string{{"subject": subject, "description": description}}}
}

// fakeTTLRE is a google.protobuf.Duration in JSON: seconds with up to nine
// decimals and an "s".
var fakeTTLRE = regexp.MustCompile(`^[0-9]+(\.[0-9]{1,9})?s$`)

// checkExpiry checks the platform expiries of a message: "" or why FCM
// would refuse them.
func checkExpiry(android, apns, webpush json.RawMessage) (ttl, expiration, webTTL, problem string) {
	var a struct {
		TTL string `json:"ttl"`
	}
	var h struct {
		Headers map[string]string `json:"headers"`
	}
	if len(android) > 0 {
		if json.Unmarshal(android, &a) != nil {
			return "", "", "", "Invalid JSON payload received. Invalid value at 'message.android'"
		}
		if ttl = a.TTL; ttl != "" {
			secs, err := strconv.ParseFloat(strings.TrimSuffix(ttl, "s"), 64)
			if !fakeTTLRE.MatchString(ttl) || err != nil || secs > 28*24*3600 {
				return "", "", "", "Invalid value at 'message.android.ttl' (type.googleapis.com/google.protobuf.Duration), " + ttl
			}
		}
	}
	if len(apns) > 0 {
		if json.Unmarshal(apns, &h) != nil {
			return "", "", "", "Invalid JSON payload received. Invalid value at 'message.apns'"
		}
		if expiration = h.Headers["apns-expiration"]; expiration != "" {
			if _, err := strconv.ParseInt(expiration, 10, 64); err != nil {
				return "", "", "", "Invalid APNs header apns-expiration: " + expiration
			}
		}
	}
	if len(webpush) > 0 {
		h.Headers = nil
		if json.Unmarshal(webpush, &h) != nil {
			return "", "", "", "Invalid JSON payload received. Invalid value at 'message.webpush'"
		}
		if webTTL = h.Headers["TTL"]; webTTL != "" {
			if _, err := strconv.ParseUint(webTTL, 10, 64); err != nil {
				return "", "", "", "Invalid Webpush header TTL: " + webTTL
			}
		}
	}
	return ttl, expiration, webTTL, ""
}

// fcmRequest is the accepted request shape (proto JSON: both spellings of
// the multi-word fields).
type fcmRequest struct {
	ValidateOnly  bool `json:"validate_only"`
	ValidateOnly2 bool `json:"validateOnly"`
	Message       *struct {
		Name         string `json:"name"`
		Token        string `json:"token"`
		Topic        string `json:"topic"`
		Condition    string `json:"condition"`
		Notification *struct {
			Title string `json:"title"`
			Body  string `json:"body"`
			Image string `json:"image"`
		} `json:"notification"`
		Data        map[string]string `json:"data"`
		Android     json.RawMessage   `json:"android"`
		Webpush     json.RawMessage   `json:"webpush"`
		APNs        json.RawMessage   `json:"apns"`
		FCMOptions  json.RawMessage   `json:"fcm_options"`
		FCMOptions2 json.RawMessage   `json:"fcmOptions"`
	} `json:"message"`
}

func (f *FCMFake) check(r *http.Request, body []byte, now time.Time) *fakeReply {
	fail := func(status int, errorCode, message string) *fakeReply {
		s := fcmStatuses[status]
		reply := googleError(status, s[0], errorCode, message)
		return &reply
	}
	m := fcmPathRE.FindStringSubmatch(r.URL.Path)
	if m == nil || r.Method != http.MethodPost {
		return fail(404, "", "Method or path not found: "+r.Method+" "+r.URL.Path)
	}
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	switch {
	case r.Header.Get("Authorization") == "":
		return fail(401, "", "Request is missing required authentication credential. Expected OAuth 2 access token.")
	case !ok:
		return fail(401, "", "Request had invalid authentication credentials. Expected OAuth 2 access token.")
	case auth == f.bearer:
	default:
		expiry, known := f.issued[auth]
		if !known || !now.Before(expiry) {
			return fail(401, "", "Request had invalid authentication credentials. Expected OAuth 2 access token.")
		}
	}
	if m[1] != f.project {
		return fail(403, "", "Permission 'cloudmessaging.messages.create' denied on resource '//cloudresourcemanager.googleapis.com/projects/"+m[1]+"' (or it may not exist).")
	}
	if mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" ||
		(params["charset"] != "" && !strings.EqualFold(params["charset"], "utf-8")) {
		return fail(400, "", "Invalid Content-Type, expected application/json; charset=utf-8")
	}
	var req fcmRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return fail(400, "", "Invalid JSON payload received. "+err.Error())
	}
	msg := req.Message
	if msg == nil {
		return fail(400, "INVALID_ARGUMENT", "Request contains an invalid argument: message is required.")
	}
	targets := 0
	for _, v := range []string{msg.Token, msg.Topic, msg.Condition} {
		if v != "" {
			targets++
		}
	}
	if targets != 1 {
		return fail(400, "INVALID_ARGUMENT", "Request contains an invalid argument: exactly one of token, topic or condition is required.")
	}
	if msg.Token != "" && (len(msg.Token) < 20 || len(msg.Token) > 4096 || !fcmTokenRE.MatchString(msg.Token)) {
		return fail(400, "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token")
	}
	size := 0
	for k, v := range msg.Data {
		size += len(k) + len(v)
		if k == "from" || k == "message_type" || strings.HasPrefix(k, "google") || strings.HasPrefix(k, "gcm") {
			return fail(400, "INVALID_ARGUMENT", "Invalid data payload key: "+k)
		}
	}
	if size > 4096 {
		return fail(400, "INVALID_ARGUMENT", "Request contains an invalid argument: message is too big ("+strconv.Itoa(size)+" bytes of data, at most 4096).")
	}
	if _, _, _, problem := checkExpiry(msg.Android, msg.APNs, msg.Webpush); problem != "" {
		return fail(400, "INVALID_ARGUMENT", problem)
	}
	if f.unreg[msg.Token] {
		return fail(404, "UNREGISTERED", "Requested entity was not found.")
	}
	if f.throttle[msg.Token] {
		reply := googleError(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", "Quota exceeded for the device's message rate.",
			quotaFailure("device", "Device message rate exceeded"))
		return &reply
	}
	if now.Before(f.overload) {
		reply := googleError(429, "RESOURCE_EXHAUSTED", "", "The service is currently unavailable.")
		return &reply
	}
	return nil
}

func (f *FCMFake) refuse(v verdict) fakeReply {
	switch {
	case v.status == http.StatusTooManyRequests && v.contract:
		return googleError(v.status, "RESOURCE_EXHAUSTED", "", "The service is overloaded: "+v.why)
	case v.status == http.StatusTooManyRequests:
		return googleError(v.status, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", "Quota exceeded: "+v.why,
			quotaFailure("project:"+f.project, "Message rate exceeded"))
	}
	s, ok := fcmStatuses[v.status]
	if !ok {
		s = [2]string{"UNKNOWN", ""}
	}
	if code, ok := f.codes[v.status]; ok {
		s[1] = code
	}
	return googleError(v.status, s[0], s[1], v.why)
}

func (f *FCMFake) accept(r *http.Request, body []byte, now time.Time) fakeReply {
	var req fcmRequest
	_ = json.Unmarshal(body, &req)
	auth := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	msg := FCMMessage{At: now, Token: req.Message.Token, Data: req.Message.Data, OAuth: auth != f.bearer,
		Name: fmt.Sprintf("projects/%s/messages/0:%d%%%s", f.project, now.UnixNano(), randomHex(8))}
	msg.AndroidTTL, msg.APNsExpiration, msg.WebpushTTL, _ = checkExpiry(req.Message.Android, req.Message.APNs, req.Message.Webpush)
	if n := req.Message.Notification; n != nil {
		msg.Title, msg.Body = n.Title, n.Body
	}
	f.messages = append(f.messages, msg)
	return jsonReply(http.StatusOK, map[string]string{"name": msg.Name})
}
