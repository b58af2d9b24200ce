package providers

import (
	"context"
	"crypto/ecdsa"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Provider-token lifetimes. APNs refuses a token older than an hour
// (ExpiredProviderToken) and one replaced more often than every 20 minutes
// (TooManyProviderTokenUpdates).
const (
	// APNsTokenRefresh is the age at which the provider token is replaced.
	APNsTokenRefresh = 50 * time.Minute
	// APNsTokenMinAge is the youngest a token may be when it is replaced
	// after APNs called it expired.
	APNsTokenMinAge = 20 * time.Minute
)

// APNs payload limits, in bytes of the JSON body.
const (
	APNsMaxPayload     = 4096 // every push type but voip
	APNsMaxVoIPPayload = 5120 // push type voip
)

// apnsSenderReasons are the reasons by which APNs refuses the provider
// (its key, team, certificate or topic), whatever the notification:
// ErrSender.
var apnsSenderReasons = map[string]bool{
	"InvalidProviderToken":      true, // the token's key, key id or team is not valid, or its signature does not verify
	"MissingProviderToken":      true, // no provider token (nor certificate)
	"BadCertificate":            true,
	"BadCertificateEnvironment": true,
	"TopicDisallowed":           true, // pushing to this topic is not allowed
}

// APNs is the apns provider (SPEC §7): each Send is one HTTP/2
// `POST {url}/3/device/{token}` to the Apple Push Notification service,
// with token-based authentication: an ES256 JWT (header kid = key_id, claims
// iss = team_id and iat) signed with the .p8 key in key_file, made with
// github.com/golang-jwt/jwt/v5, replaced when it is APNsTokenRefresh old
// and never more often than every APNsTokenMinAge.
//
// Headers: apns-topic (topic), apns-push-type (push_type), apns-priority
// (priority), apns-id, and apns-expiration: the message's expiry as UNIX
// seconds (APNs stores the notification for an offline device and retries
// until that instant), or 0 when it has none (APNs tries once and does not
// store it: a notification without an expiry is not delivered late).
// apns-id must be a UUID: a message id that is one is sent as is (lower
// case); any other id is sent as the stable version-5 UUID APNsID derives
// from it, so a retry carries the same apns-id (APNs uses it to report
// errors, not to drop duplicates).
//
// The body is {"aps":{"alert":{"title":..,"body":..}}} with the message's
// data as further top-level keys (a data key "aps" is left out: the aps
// dictionary is APNs's own). Push type background sends
// {"aps":{"content-available":1}} and the data, without an alert. A body
// over APNsMaxPayload bytes (APNsMaxVoIPPayload for push type voip) is
// ErrPermanent without a request, as APNs would refuse it (413
// PayloadTooLarge).
//
// Answers (APNs's JSON {"reason": ...} is named in the detail): 200
// accepted; 429 TooManyRequests (too many notifications to one device
// token) a *RateLimitedError of ScopeRecipient, 429
// TooManyProviderTokenUpdates one of ScopeProvider; 403
// ExpiredProviderToken ErrTransient, the token being replaced for the next
// Send (if it is at least APNsTokenMinAge old: a younger token APNs calls
// expired points at a wrong clock, which a new token would not fix); 403
// InvalidProviderToken, MissingProviderToken, BadCertificate,
// BadCertificateEnvironment and 400 TopicDisallowed ErrSender (the key, the
// team or the topic is refused: no notification can go); 5xx, timeouts and
// connection errors ErrTransient (Ambiguous once the request was written
// whole); any other 4xx ErrPermanent: 410 Unregistered and ExpiredToken
// (the detail gives APNs's timestamp, "token inactive since
// 2026-11-30T12:00:00Z", so the token can be dropped), 400 BadDeviceToken,
// 413 PayloadTooLarge, 403 Forbidden.
//
// The url must be https: APNs speaks HTTP/2 over TLS only, and so does the
// provider (one multiplexed connection, pinged when silent). An APNs is
// safe for concurrent use; Close closes the idle connection.
type APNs struct {
	httpBase
	base     string
	topic    string
	pushType string
	priority string
	signer   *apnsSigner
}

var _ Provider = (*APNs)(nil)

// apnsKind is the apns entry of kinds.
var apnsKind = kind{
	name:     "apns",
	channel:  "push",
	keys:     []string{"url", "tls_ca_file", "key_file", "key_id", "team_id", "topic", "push_type", "priority"},
	defaults: apnsDefaults,
	validate: validateAPNs,
	build:    builder(newAPNs),
}

// Defaults of kind apns.
const (
	defaultAPNsURL      = "https://api.push.apple.com"
	defaultAPNsPushType = "alert"
	defaultAPNsPriority = 10
)

// apnsPushTypes are the apns-push-type values APNs accepts.
var apnsPushTypes = []string{"alert", "background", "voip", "complication", "fileprovider", "mdm",
	"liveactivity", "location", "pushtotalk", "controls", "widgets"}

// apnsDefaults fills in an apns entry's url, push_type and priority (5 for
// push type background, which takes no other).
func apnsDefaults(c *Config) {
	if c.URL == "" {
		c.URL = defaultAPNsURL
	}
	if c.PushType == "" {
		c.PushType = defaultAPNsPushType
	}
	if c.Priority == 0 {
		c.Priority = defaultAPNsPriority
		if c.PushType == "background" {
			c.Priority = 5
		}
	}
}

// validateAPNs checks an apns entry's own keys.
func validateAPNs(c Config, p *problems) {
	p.requiredURL(c.URL)
	if u, err := url.Parse(c.URL); err == nil && u.Scheme == "http" {
		p.add("url", "must be https for kind apns (APNs speaks HTTP/2 over TLS only), got %q", c.URL)
	}
	p.required("key_file", c.KeyFile)
	p.required("key_id", c.KeyID)
	p.required("team_id", c.TeamID)
	p.required("topic", c.Topic)
	if !slices.Contains(apnsPushTypes, c.PushType) {
		p.add("push_type", "%q is not one of %s", c.PushType, strings.Join(apnsPushTypes, ", "))
	}
	switch {
	case c.Priority != 10 && c.Priority != 5 && c.Priority != 1:
		p.add("priority", "must be 10, 5 or 1, got %d", c.Priority)
	case c.PushType == "background" && c.Priority != 5:
		p.add("priority", "must be 5 for push_type background (APNs refuses anything else), got %d", c.Priority)
	}
}

// NewAPNs builds an apns provider from a kind apns entry, reading the .p8
// signing key from key_file.
func NewAPNs(cfg Config, opts Options) (*APNs, error) {
	cfg, err := checkedEntry(cfg, "apns", "apns")
	if err != nil {
		return nil, err
	}
	return newAPNs(cfg, opts)
}

// newAPNs is NewAPNs for an entry already checked (kind apns,
// defaults applied, valid): NewRegistry checks every entry first.
func newAPNs(cfg Config, opts Options) (*APNs, error) {
	opts = opts.withDefaults()
	pem, err := os.ReadFile(cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("new apns %s: key_file: %w", cfg.Name, err)
	}
	key, err := jwt.ParseECPrivateKeyFromPEM(pem)
	if err != nil {
		// The error describes the encoding, never the key.
		return nil, fmt.Errorf("new apns %s: key_file %s: not a PEM-encoded EC (.p8) key: %w", cfg.Name, cfg.KeyFile, err)
	}
	base, err := newHTTPBase(cfg, opts, true)
	if err != nil {
		return nil, fmt.Errorf("new apns %s: %w", cfg.Name, err)
	}
	return &APNs{
		httpBase: base,
		base:     trimSlash(cfg.URL) + "/3/device/",
		topic:    cfg.Topic,
		pushType: cfg.PushType,
		priority: strconv.Itoa(cfg.Priority),
		signer:   &apnsSigner{key: key, keyID: cfg.KeyID, teamID: cfg.TeamID, now: opts.Now},
	}, nil
}

// Name returns the configured name.
func (a *APNs) Name() string { return a.name }

// String describes the provider without its key.
func (a *APNs) String() string { return "apns " + a.name }

// Close releases the provider's idle connections. Send still works after
// Close, opening a new connection.
func (a *APNs) Close() error {
	a.closeIdle()
	return nil
}

// Send posts m as one notification to the device token m.To.
func (a *APNs) Send(ctx context.Context, m *Message) error {
	s := newScrubber(m)
	if m == nil {
		return &Error{Provider: a.name, Class: ErrPermanent, Detail: "nil message"}
	}
	token, err := a.signer.current()
	if err != nil {
		return &Error{Provider: a.name, Class: ErrPermanent, Detail: "sign provider token: " + causeDetail(err, s), Err: err}
	}
	s.secrets = append(s.secrets, token)
	body, err := marshalJSON(a.payload(m))
	if err != nil {
		return &Error{Provider: a.name, Class: ErrPermanent, Detail: "encode payload: " + causeDetail(err, s), Err: err}
	}
	if limit := a.maxPayload(); len(body) > limit {
		return &Error{Provider: a.name, Class: ErrPermanent,
			Detail: fmt.Sprintf("payload of %d bytes is over APNs's limit of %d (PayloadTooLarge), not sent", len(body), limit)}
	}
	header := http.Header{}
	header.Set("Content-Type", "application/json")
	header.Set("Authorization", "bearer "+token)
	header.Set("apns-topic", a.topic)
	header.Set("apns-push-type", a.pushType)
	header.Set("apns-priority", a.priority)
	header.Set("apns-id", APNsID(m.ID))
	header.Set("apns-expiration", apnsExpiration(m.ExpiresAt))
	return a.post(ctx, a.base+url.PathEscape(m.To), header, body, s, func(status int, b []byte) answer {
		ans := readAPNsAnswer(status, b)
		if status == http.StatusForbidden && ans.reason == "ExpiredProviderToken" {
			a.signer.expired(token)
			ans.class = ErrTransient
		}
		return ans
	})
}

// maxPayload is the largest body APNs takes for the provider's push type.
func (a *APNs) maxPayload() int {
	if a.pushType == "voip" {
		return APNsMaxVoIPPayload
	}
	return APNsMaxPayload
}

// apnsExpiration is the apns-expiration header of a message expiring at
// exp: its UNIX seconds (at least 1: 0 means something else), or 0 for a
// message without an expiry (deliver once, do not store).
func apnsExpiration(exp *time.Time) string {
	if exp == nil {
		return "0"
	}
	return strconv.FormatInt(max(1, exp.Unix()), 10)
}

// payload is the notification's JSON object.
func (a *APNs) payload(m *Message) map[string]any {
	p := make(map[string]any, len(m.Data)+1)
	for k, v := range m.Data {
		if k != "aps" {
			p[k] = v
		}
	}
	if a.pushType == "background" {
		p["aps"] = map[string]any{"content-available": 1}
		return p
	}
	alert := map[string]string{"body": m.Body}
	if m.Title != "" {
		alert["title"] = m.Title
	}
	p["aps"] = map[string]any{"alert": alert}
	return p
}

// readAPNsAnswer reads APNs's error body, {"reason":"BadDeviceToken"}, and
// a 410's {"reason":"Unregistered","timestamp":1764504000000}: the last
// time APNs knew the token valid, in milliseconds since the epoch, goes into
// the detail. Any other body gives the generic reason and the status's
// class.
func readAPNsAnswer(status int, body []byte) answer {
	var e struct {
		Reason    string `json:"reason"`
		Timestamp int64  `json:"timestamp"`
	}
	if json.Unmarshal(body, &e) != nil || e.Reason == "" {
		return answer{reason: responseReason(body)}
	}
	a := answer{reason: e.Reason}
	switch {
	case status == http.StatusTooManyRequests && e.Reason == "TooManyRequests":
		a.scope = ScopeRecipient // too many notifications to this device token
	case apnsSenderReasons[e.Reason] && status >= 400 && status <= 499:
		a.class = ErrSender
	}
	if status == http.StatusGone && e.Timestamp > 0 {
		a.note = "token inactive since " + time.UnixMilli(e.Timestamp).UTC().Format(time.RFC3339)
	}
	return a
}

// apnsSigner makes and caches the provider token. Safe for concurrent use.
type apnsSigner struct {
	key    *ecdsa.PrivateKey
	keyID  string
	teamID string
	now    func() time.Time

	mu     sync.Mutex
	token  string
	issued time.Time
}

// current returns the cached token, or a new one when there is none or it
// is APNsTokenRefresh old.
func (s *apnsSigner) current() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.token != "" && now.Sub(s.issued) < APNsTokenRefresh {
		return s.token, nil
	}
	t := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": s.teamID, "iat": now.Unix()})
	t.Header["kid"] = s.keyID
	signed, err := t.SignedString(s.key)
	if err != nil {
		return "", err
	}
	s.token, s.issued = signed, now
	return signed, nil
}

// expired drops token, which APNs called expired, if it is still the
// cached one and at least APNsTokenMinAge old.
func (s *apnsSigner) expired(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token == token && s.now().Sub(s.issued) >= APNsTokenMinAge {
		s.token = ""
	}
}

// uuidRE is the canonical 8-4-4-4-12 form APNs accepts for apns-id.
var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// apnsNamespace is the RFC 9562 URL namespace the apns-id of a non-UUID
// message id is derived in.
var apnsNamespace = [16]byte{0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}

// APNsID is the apns-id header of the message with id: id itself, in lower
// case, when it is a UUID; otherwise the version-5 (SHA-1, RFC 9562 §5.5)
// UUID of the name "urn:notifier:job:<id>" in the URL namespace, so the same
// id always gives the same apns-id.
func APNsID(id string) string {
	if uuidRE.MatchString(id) {
		return strings.ToLower(id)
	}
	h := sha1.New()
	h.Write(apnsNamespace[:])
	h.Write([]byte("urn:notifier:job:" + id))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}
