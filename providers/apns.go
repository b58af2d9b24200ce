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

// Provider-token lifetimes. Apple, "Establishing a token-based connection
// to APNs": "Refresh your token no more than once every 20 minutes and no
// less than once every 60 minutes. APNs rejects any request whose token
// contains a timestamp that is more than one hour old" (403
// ExpiredProviderToken), and answers a token recreated more often than
// every 20 minutes with 429 TooManyProviderTokenUpdates.
const (
	// APNsTokenRefresh is the age at which the provider token is replaced
	// before its next use.
	APNsTokenRefresh = 50 * time.Minute
	// APNsTokenMinAge is the youngest a token made in answer to an
	// ExpiredProviderToken may be when APNs calls it expired too and it is
	// replaced again: a younger one is kept (replacing it at each request
	// would break the 20-minute rule, and cannot help a clock that is more
	// than an hour off), and the send is a refused sender.
	APNsTokenMinAge = 20 * time.Minute
)

// APNsRetry5xx is how long a notification APNs answered with a 5xx waits
// before it is sent again (Error.RetryAfter): Apple, "Handling notification
// responses from APNs": "After 15 minutes, you can retry JSON payloads that
// receive response status codes that begin with 5XX. While retrying, you
// may employ a back-off technique."
const APNsRetry5xx = 15 * time.Minute

// APNsMaxCollapseID is the longest apns-collapse-id, in bytes (Apple,
// "Sending notification requests to APNs": "When sending the same
// notification more than once, use the same value in this header to merge
// the requests. The value of this key must not exceed 64 bytes.").
const APNsMaxCollapseID = 64

// APNs payload limits, in bytes of the JSON body.
const (
	APNsMaxPayload     = 4096 // every push type but voip
	APNsMaxVoIPPayload = 5120 // push type voip
)

// apnsSenderReasons are the reasons by which APNs refuses the provider
// (its key, team, certificate or topic: its configuration), whatever the
// notification: ErrSender.
var apnsSenderReasons = map[string]bool{
	"InvalidProviderToken":       true, // the token's key, key id or team is not valid, or its signature does not verify
	"MissingProviderToken":       true, // no provider token (nor certificate)
	"BadCertificate":             true,
	"BadCertificateEnvironment":  true,
	"UnrelatedKeyIdInToken":      true, // a key of another team, or another key than the connection's first
	"BadEnvironmentKeyIdInToken": true, // a key for the other environment (a sandbox-only key on production)
	"TopicDisallowed":            true, // pushing to this topic is not allowed
	"BadTopic":                   true, // the configured apns-topic is not valid
	"MissingTopic":               true, // no apns-topic where the credentials need one
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
// apns-id must be a UUID: a message key (Message.Key, else its id) that is
// one is sent as is (lower case); any other key is sent as the stable version-5 UUID APNsID derives
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
// TooManyProviderTokenUpdates one of ScopeProvider; 403 ExpiredProviderToken
// makes a new token at once and sends the notification once more with it
// (APNs refused it without acting on it), and if APNs calls that one
// expired too (or the token it refused was itself made so less than
// APNsTokenMinAge ago) the send is ErrSender, its detail saying the host's
// clock is probably wrong; 403 InvalidProviderToken, MissingProviderToken,
// BadCertificate, BadCertificateEnvironment, UnrelatedKeyIdInToken,
// BadEnvironmentKeyIdInToken and 400 TopicDisallowed, BadTopic and
// MissingTopic ErrSender (the key, the team or the topic is refused: the
// configuration is wrong, no notification can go), and so is a provider
// token the key fails to sign; 5xx, timeouts and
// connection errors ErrTransient (Ambiguous once the request was written
// whole), a 5xx with Error.RetryAfter APNsRetry5xx as Apple asks; 410
// Unregistered and ExpiredToken ErrPermanent with RecipientGone (the
// detail gives APNs's timestamp, "token inactive since
// 2026-11-30T12:00:00Z"); any other 4xx ErrPermanent: 400 BadDeviceToken,
// 413 PayloadTooLarge, 403 Forbidden.
//
// apns-collapse-id is the message's key (Message.Key, else its id;
// APNsCollapseID), so a notification
// sent twice (a retry after an ambiguous failure, a redelivery) replaces
// the first on the device rather than showing twice; it does not stop the
// second delivery.
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
	return newChecked(cfg, opts, "apns", "apns", newAPNs)
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

// Send posts m as one notification to the device token m.To, and once
// more with a new provider token if APNs called the token expired.
func (a *APNs) Send(ctx context.Context, m *Message) error {
	s := newScrubber(m)
	if m == nil {
		return &Error{Provider: a.name, Class: ErrPermanent, Detail: "nil message"}
	}
	token, err := a.signer.current()
	if err != nil {
		// The key cannot sign: no notification can go, and none is at
		// fault.
		return &Error{Provider: a.name, Class: ErrSender, Detail: "sign provider token: " + causeDetail(err, s), Err: err}
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
	endpoint := a.base + url.PathEscape(m.To)
	var expired bool // APNs called the token expired
	read := func(status int, b []byte) answer {
		ans := readAPNsAnswer(status, b)
		if expired = status == http.StatusForbidden && ans.reason == "ExpiredProviderToken"; expired {
			ans.class, ans.note = ErrSender, a.signer.skew(token)
		}
		return ans
	}
	err = a.post(ctx, endpoint, a.header(m, token), body, s, read)
	if !expired {
		return err
	}
	next, ok, serr := a.signer.replaceExpired(token)
	switch {
	case serr != nil:
		return &Error{Provider: a.name, Class: ErrSender, Detail: "sign provider token: " + causeDetail(serr, s), Err: serr}
	case !ok:
		return err
	}
	token = next
	s.secrets = append(s.secrets, token)
	return a.post(ctx, endpoint, a.header(m, token), body, s, read)
}

// header is the request header of m with the provider token.
func (a *APNs) header(m *Message, token string) http.Header {
	header := http.Header{}
	header.Set("Content-Type", "application/json")
	header.Set("Authorization", "bearer "+token)
	header.Set("apns-topic", a.topic)
	header.Set("apns-push-type", a.pushType)
	header.Set("apns-priority", a.priority)
	header.Set("apns-id", APNsID(m.key()))
	header.Set("apns-collapse-id", APNsCollapseID(m.key()))
	header.Set("apns-expiration", apnsExpiration(m.ExpiresAt))
	return header
}

// APNsCollapseID is the apns-collapse-id header of the message with id:
// the id itself when it is at most APNsMaxCollapseID bytes (job ids are
// ASCII), else its version-5 UUID (as APNsID makes it). APNs shows
// notifications with one collapse id as one: a second delivery of the same
// message replaces the first on the device instead of stacking beside it.
func APNsCollapseID(id string) string {
	if len(id) <= APNsMaxCollapseID {
		return id
	}
	return jobUUID(id)
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
func apnsExpiration(exp time.Time) string {
	if exp.IsZero() {
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
		a := answer{reason: responseReason(body), gone: status == http.StatusGone}
		if status >= 500 {
			a.minRetry = APNsRetry5xx
		}
		return a
	}
	a := answer{reason: e.Reason, gone: status == http.StatusGone}
	switch {
	case status == http.StatusTooManyRequests && e.Reason == "TooManyRequests":
		a.scope = ScopeRecipient // too many notifications to this device token
	case apnsSenderReasons[e.Reason] && status >= 400 && status <= 499:
		a.class = ErrSender
	}
	if status >= 500 {
		a.minRetry = APNsRetry5xx
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

	mu       sync.Mutex
	token    string
	issued   time.Time
	reactive bool // made in answer to an ExpiredProviderToken
}

// current returns the cached token, or a new one when there is none or it
// is APNsTokenRefresh old.
func (s *apnsSigner) current() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token != "" && s.now().Sub(s.issued) < APNsTokenRefresh {
		return s.token, nil
	}
	return s.mint(false)
}

// mint makes a new token and caches it. s.mu is held.
func (s *apnsSigner) mint(reactive bool) (string, error) {
	now := s.now()
	t := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": s.teamID, "iat": now.Unix()})
	t.Header["kid"] = s.keyID
	signed, err := t.SignedString(s.key)
	if err != nil {
		return "", err
	}
	s.token, s.issued, s.reactive = signed, now, reactive
	return signed, nil
}

// replaceExpired returns the token to send with once more after APNs called
// token expired: the one another send already put in its place, or a new
// one made now whatever the old one's age. It returns false, and no token,
// when token is itself one made so less than APNsTokenMinAge ago: APNs
// calls a token expired once its iat is an hour old by APNs's clock, so a
// fresh one refused too means this host's clock is more than an hour
// behind, which another token cannot fix (and making one at each request
// would be refused as TooManyProviderTokenUpdates).
func (s *apnsSigner) replaceExpired(token string) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.token != token && s.token != "":
		return s.token, true, nil
	case s.token == token && s.reactive && s.now().Sub(s.issued) < APNsTokenMinAge:
		return "", false, nil
	}
	t, err := s.mint(true)
	return t, err == nil, err
}

// skew is the note of an ExpiredProviderToken answered to token: its age
// by this host's clock, and what a refusal of a young token means.
func (s *apnsSigner) skew(token string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token != token {
		return "the provider token was refused as expired; a new one is made"
	}
	age := s.now().Sub(s.issued).Truncate(time.Second)
	if s.reactive && age < APNsTokenMinAge {
		return fmt.Sprintf("APNs refused as expired a provider token made %s ago, after refusing the one before it: "+
			"APNs does so once a token is an hour old by its clock, so this host's clock is probably skewed; check its time sync", age)
	}
	return fmt.Sprintf("APNs refused as expired a provider token issued %s ago by this host's clock", age)
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
	return jobUUID(id)
}

// jobUUID is the version-5 UUID of "urn:notifier:job:<id>" in the URL
// namespace: a stable, ASCII stand-in for a job id where the id itself
// does not fit.
func jobUUID(id string) string {
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
