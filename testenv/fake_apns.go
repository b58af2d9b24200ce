package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// APNsNotification is one notification the APNs fake accepted.
type APNsNotification struct {
	At         time.Time
	Token      string         // the device token of the path
	ID         string         // apns-id (as sent, or the one the fake assigned)
	Topic      string         // apns-topic
	PushType   string         // apns-push-type
	Priority   string         // apns-priority
	Expiration string         // apns-expiration ("" when absent)
	CollapseID string         // apns-collapse-id ("" when absent)
	Payload    map[string]any // the JSON body
	IssuedAt   time.Time      // the provider token's iat
}

// APNsFake is a fake of the Apple Push Notification service: an HTTP/2
// server over TLS (httptest with EnableHTTP2, the certificate signed by the
// CA in CAFile) answering `POST /3/device/{token}` as APNs does, checking,
// in this order:
//
//   - HTTP/2 (505 otherwise), the method (405 MethodNotAllowed) and path
//     (404 BadPath);
//   - the provider token: Authorization: bearer <JWT> (403
//     MissingProviderToken), an ES256 signature by KeyFile's key, header
//     kid = KeyID, iss = TeamID (403 InvalidProviderToken), iat not older
//     than an hour by the fake's clock (403 ExpiredProviderToken) nor in its
//     future; a connection's token replaced less than 20 minutes after the
//     previous one was first used (429 TooManyProviderTokenUpdates);
//   - apns-topic present (400 MissingTopic) and = Topic (400
//     TopicDisallowed); apns-push-type known (400 InvalidPushType);
//     apns-priority 1, 5 or 10 (400 BadPriority); apns-id a UUID (400
//     BadMessageId); apns-expiration a number (400 BadExpirationDate);
//     apns-collapse-id at most 64 bytes (400 BadCollapseId);
//   - the device token: 64-200 hex digits (400 BadDeviceToken), not
//     unregistered with Unregister (410 Unregistered with a timestamp), not
//     throttled with ThrottleDevice (429 TooManyRequests: too many
//     notifications to this one device);
//   - the payload: not empty (400 PayloadEmpty), at most 4096 bytes, 5120
//     for apns-push-type voip (413 PayloadTooLarge), a JSON object with an
//     "aps" dictionary (400 BadPayload: APNs documents no reason for this
//     case).
//
// Then HangFor, AcceptThenHang, FailNext, FailFor, RateLimitFor and the
// contract (429 TooManyRequests with Retry-After), then 200 with the
// apns-id header. Errors are APNs's JSON, {"reason":"BadDeviceToken"}; an
// injected status carries APNs's reason for it (403 InvalidProviderToken,
// 410 Unregistered, 429 TooManyRequests, 503 ServiceUnavailable…), or the
// one set with ReasonFor (403 UnrelatedKeyIdInToken, 400 BadTopic…). APNs
// has no provider-wide rate limit: its 429 TooManyRequests is about one
// device token, and the apns kind reads it so (a recipient-scoped limit),
// whether it comes from ThrottleDevice, RateLimitFor or the contract. Its
// methods are safe for concurrent use.
//
// Every request that reaches HangFor is an arrival (Arrivals,
// MaxArrivalsInWindow), whatever it is answered; MaxInWindow counts only
// the accepted ones.
type APNsFake struct {
	*httpFake
	key      *ecdsa.PrivateKey
	keyFile  string
	keyID    string
	teamID   string
	topic    string
	caFile   string
	unreg    map[string]bool
	throttle map[string]bool
	conns    map[string]apnsConnToken // remote address → its provider token
	tokens   map[string]bool
	notes    []APNsNotification
	updateOK time.Duration
	reasons  map[int]string // injected status → reason, set by ReasonFor
}

type apnsConnToken struct {
	token string
	since time.Time
}

// FakeAPNs starts an APNs fake on a loopback port with a fresh signing key
// (written as a .p8 file), key id, team id and TLS material, and closes it
// when the test ends. Its topic is "com.example.notifier". It takes
// WithContract and WithClock.
func FakeAPNs(t testing.TB, opts ...FakeOption) *APNsFake {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testenv: apns key: %v", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("testenv: apns key: %v", err)
	}
	dir := t.TempDir()
	f := &APNsFake{key: key, keyFile: filepath.Join(dir, "AuthKey.p8"), keyID: strings.ToUpper(randomHex(5)),
		teamID: strings.ToUpper(randomHex(5)), topic: "com.example.notifier", unreg: map[string]bool{}, throttle: map[string]bool{},
		conns: map[string]apnsConnToken{}, tokens: map[string]bool{}, updateOK: 20 * time.Minute, reasons: map[int]string{}}
	if err := os.WriteFile(f.keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatalf("testenv: write apns key: %v", err)
	}
	certs := NewCerts(t)
	pair, err := tls.LoadX509KeyPair(certs.ServerCertFile, certs.ServerKeyFile)
	if err != nil {
		t.Fatalf("testenv: apns server certificate: %v", err)
	}
	f.caFile = certs.CAFile
	f.httpFake = newHTTPFake(newFaultState(t, opts), f)
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	f.srv.EnableHTTP2 = true
	f.srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	f.srv.StartTLS()
	t.Cleanup(f.Close)
	return f
}

// URL is the service's base URL, https://127.0.0.1:<port> (the apns kind's
// url).
func (f *APNsFake) URL() string { return f.srv.URL }

// CAFile is the PEM file of the CA that signed the fake's certificate (the
// apns kind's tls_ca_file).
func (f *APNsFake) CAFile() string { return f.caFile }

// KeyFile is the .p8 signing key (PKCS #8 PEM) the fake verifies tokens
// with.
func (f *APNsFake) KeyFile() string { return f.keyFile }

// KeyID is the key's 10-character id.
func (f *APNsFake) KeyID() string { return f.keyID }

// TeamID is the 10-character developer team id.
func (f *APNsFake) TeamID() string { return f.teamID }

// Topic is the one apns-topic the fake accepts.
func (f *APNsFake) Topic() string { return f.topic }

// Unregister makes every notification to the device token answer 410
// Unregistered.
func (f *APNsFake) Unregister(token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unreg[token] = true
}

// ReasonFor makes the requests FailNext or FailFor answer with status
// carry APNs's reason reason instead of the status's own (apnsReasons):
// ReasonFor(403, "UnrelatedKeyIdInToken") then FailNext(1, 403) answers as
// APNs does to a key of another team; ReasonFor(400, "BadTopic") as it
// does to an apns-topic it finds invalid.
func (f *APNsFake) ReasonFor(status int, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reasons[status] = reason
}

// ThrottleDevice makes every notification to the device token answer 429
// TooManyRequests, as APNs does when one device gets too many.
func (f *APNsFake) ThrottleDevice(token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.throttle[token] = true
}

// Notifications returns the accepted notifications in order of acceptance.
func (f *APNsFake) Notifications() []APNsNotification {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]APNsNotification(nil), f.notes...)
}

// ProviderTokens is how many distinct provider tokens were presented.
func (f *APNsFake) ProviderTokens() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.tokens)
}

var (
	apnsPathRE   = regexp.MustCompile(`^/3/device/([^/]*)$`)
	apnsTokenRE  = regexp.MustCompile(`^[0-9a-fA-F]{64,200}$`)
	fakeUUIDRE   = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	apnsPushType = []string{"alert", "background", "voip", "complication", "fileprovider", "mdm",
		"liveactivity", "location", "pushtotalk", "controls", "widgets"}
)

func apnsError(status int, reason string) fakeReply {
	return jsonReply(status, map[string]string{"reason": reason})
}

// providerToken verifies the bearer JWT and returns its iat, or the reason
// to refuse it.
func (f *APNsFake) providerToken(r *http.Request, now time.Time) (time.Time, int, string) {
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "bearer ")
	if !ok || raw == "" {
		return time.Time{}, 403, "MissingProviderToken"
	}
	tok, err := jwt.Parse(raw, func(t *jwt.Token) (any, error) {
		if t.Header["kid"] != f.keyID {
			return nil, errors.New("unknown key id")
		}
		return &f.key.PublicKey, nil
	}, jwt.WithValidMethods([]string{"ES256"}), jwt.WithoutClaimsValidation())
	if err != nil {
		return time.Time{}, 403, "InvalidProviderToken"
	}
	claims, _ := tok.Claims.(jwt.MapClaims)
	iss, _ := claims["iss"].(string)
	iatF, ok := claims["iat"].(float64)
	if iss != f.teamID || !ok {
		return time.Time{}, 403, "InvalidProviderToken"
	}
	iat := time.Unix(int64(iatF), 0)
	switch {
	case iat.After(now.Add(time.Minute)):
		return iat, 403, "InvalidProviderToken"
	case now.Sub(iat) > time.Hour:
		return iat, 403, "ExpiredProviderToken"
	}
	prev, seen := f.conns[r.RemoteAddr]
	if seen && prev.token != raw && now.Sub(prev.since) < f.updateOK {
		return iat, 429, "TooManyProviderTokenUpdates"
	}
	if !seen || prev.token != raw {
		f.conns[r.RemoteAddr] = apnsConnToken{token: raw, since: now}
	}
	f.tokens[raw] = true
	return iat, 0, ""
}

func (f *APNsFake) check(r *http.Request, body []byte, now time.Time) *fakeReply {
	fail := func(status int, reason string) *fakeReply {
		reply := apnsError(status, reason)
		return &reply
	}
	if r.ProtoMajor != 2 {
		return fail(http.StatusHTTPVersionNotSupported, "HTTP/2 required")
	}
	if r.Method != http.MethodPost {
		return fail(405, "MethodNotAllowed")
	}
	m := apnsPathRE.FindStringSubmatch(r.URL.Path)
	if m == nil {
		return fail(404, "BadPath")
	}
	if _, status, reason := f.providerToken(r, now); status != 0 {
		return fail(status, reason)
	}
	h := r.Header
	switch topic := h.Get("apns-topic"); {
	case topic == "":
		return fail(400, "MissingTopic")
	case topic != f.topic:
		return fail(400, "TopicDisallowed")
	}
	if pt := h.Get("apns-push-type"); pt != "" && !slices.Contains(apnsPushType, pt) {
		return fail(400, "InvalidPushType")
	}
	if p := h.Get("apns-priority"); p != "" && p != "10" && p != "5" && p != "1" {
		return fail(400, "BadPriority")
	}
	if id := h.Get("apns-id"); id != "" && !fakeUUIDRE.MatchString(id) {
		return fail(400, "BadMessageId")
	}
	if e := h.Get("apns-expiration"); e != "" {
		if _, err := strconv.ParseInt(e, 10, 64); err != nil {
			return fail(400, "BadExpirationDate")
		}
	}
	if len(h.Get("apns-collapse-id")) > 64 {
		return fail(400, "BadCollapseId") // "The collapse identifier exceeds the maximum allowed size."
	}
	switch {
	case m[1] == "":
		return fail(400, "MissingDeviceToken")
	case !apnsTokenRE.MatchString(m[1]):
		return fail(400, "BadDeviceToken")
	case f.unreg[m[1]]:
		reply := jsonReply(410, map[string]any{"reason": "Unregistered", "timestamp": now.UnixMilli()})
		return &reply
	case f.throttle[m[1]]:
		return fail(429, "TooManyRequests")
	}
	limit := 4096
	if h.Get("apns-push-type") == "voip" {
		limit = 5120
	}
	var payload map[string]any
	switch {
	case len(body) == 0:
		return fail(400, "PayloadEmpty")
	case len(body) > limit:
		return fail(413, "PayloadTooLarge")
	case json.Unmarshal(body, &payload) != nil:
		return fail(400, "BadPayload")
	}
	if _, ok := payload["aps"].(map[string]any); !ok {
		return fail(400, "BadPayload")
	}
	return nil
}

// apnsReasons names the reason of an injected status.
var apnsReasons = map[int]string{400: "BadDeviceToken", 403: "InvalidProviderToken", 404: "BadPath", 405: "MethodNotAllowed",
	410: "Unregistered", 413: "PayloadTooLarge", 429: "TooManyRequests", 500: "InternalServerError", 503: "ServiceUnavailable"}

func (f *APNsFake) refuse(v verdict) fakeReply {
	status := v.status
	reason, ok := f.reasons[status]
	if !ok {
		reason, ok = apnsReasons[status]
	}
	if !ok {
		reason = "InternalServerError"
	}
	return apnsError(status, reason)
}

func (f *APNsFake) accept(r *http.Request, body []byte, now time.Time) fakeReply {
	h := r.Header
	n := APNsNotification{At: now, Token: strings.TrimPrefix(r.URL.Path, "/3/device/"), ID: h.Get("apns-id"),
		Topic: h.Get("apns-topic"), PushType: h.Get("apns-push-type"), Priority: h.Get("apns-priority"),
		Expiration: h.Get("apns-expiration"), CollapseID: h.Get("apns-collapse-id")}
	_ = json.Unmarshal(body, &n.Payload)
	n.IssuedAt, _, _ = f.providerToken(r, now)
	if n.ID == "" {
		u := randomHex(16)
		n.ID = u[0:8] + "-" + u[8:12] + "-" + u[12:16] + "-" + u[16:20] + "-" + u[20:]
	}
	f.notes = append(f.notes, n)
	return fakeReply{status: http.StatusOK, header: http.Header{"Apns-Id": {n.ID}}}
}
