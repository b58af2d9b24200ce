package testenv_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/notifier/notifier/testenv"
)

// apnsClient is an HTTP/2 client trusting the fake's CA.
func apnsClient(t *testing.T, f *testenv.APNsFake, http2 bool) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(f.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	if !http2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // HTTP/1.1 only
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// providerToken signs an APNs provider token.
func providerToken(t *testing.T, key *ecdsa.PrivateKey, kid, iss string, iat time.Time) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": iss, "iat": iat.Unix()})
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type apnsReq struct {
	path   string
	header map[string]string
	body   string
}

func apnsDo(t *testing.T, c *http.Client, base string, r apnsReq) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+r.path, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(b, &out)
	return resp.StatusCode, out.Reason, resp.Header
}

func TestFakeAPNsChecksWhatAPNsChecks(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	f := testenv.FakeAPNs(t, testenv.WithClock(clk.Now))
	pemKey, err := os.ReadFile(f.KeyFile())
	if err != nil {
		t.Fatal(err)
	}
	key, err := jwt.ParseECPrivateKeyFromPEM(pemKey)
	if err != nil {
		t.Fatalf("the fake's .p8 key: %v", err)
	}
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	good := providerToken(t, key, f.KeyID(), f.TeamID(), clk.Now())
	device := strings.Repeat("ab", 32)
	ok := func(edit func(r *apnsReq)) apnsReq {
		r := apnsReq{path: "/3/device/" + device, body: `{"aps":{"alert":{"body":"hi"}}}`, header: map[string]string{
			"authorization": "bearer " + good, "apns-topic": f.Topic(), "apns-push-type": "alert", "apns-priority": "10",
			"apns-id": "8e3d1a5c-2b4f-4c6d-9e8f-0a1b2c3d4e5f"}}
		if edit != nil {
			edit(&r)
		}
		return r
	}
	cases := []struct {
		name   string
		req    apnsReq
		status int
		reason string
	}{
		{"no token", ok(func(r *apnsReq) { delete(r.header, "authorization") }), 403, "MissingProviderToken"},
		{"other key", ok(func(r *apnsReq) {
			r.header["authorization"] = "bearer " + providerToken(t, other, f.KeyID(), f.TeamID(), clk.Now())
		}), 403, "InvalidProviderToken"},
		{"other kid", ok(func(r *apnsReq) {
			r.header["authorization"] = "bearer " + providerToken(t, key, "OTHERKEY12", f.TeamID(), clk.Now())
		}), 403, "InvalidProviderToken"},
		{"other team", ok(func(r *apnsReq) {
			r.header["authorization"] = "bearer " + providerToken(t, key, f.KeyID(), "OTHERTEAM1", clk.Now())
		}), 403, "InvalidProviderToken"},
		{"old token", ok(func(r *apnsReq) {
			r.header["authorization"] = "bearer " + providerToken(t, key, f.KeyID(), f.TeamID(), clk.Now().Add(-61*time.Minute))
		}), 403, "ExpiredProviderToken"},
		{"no topic", ok(func(r *apnsReq) { delete(r.header, "apns-topic") }), 400, "MissingTopic"},
		{"other topic", ok(func(r *apnsReq) { r.header["apns-topic"] = "com.other" }), 400, "TopicDisallowed"},
		{"bad push type", ok(func(r *apnsReq) { r.header["apns-push-type"] = "loud" }), 400, "InvalidPushType"},
		{"bad priority", ok(func(r *apnsReq) { r.header["apns-priority"] = "7" }), 400, "BadPriority"},
		{"bad apns-id", ok(func(r *apnsReq) { r.header["apns-id"] = "job-42" }), 400, "BadMessageId"},
		{"bad expiration", ok(func(r *apnsReq) { r.header["apns-expiration"] = "tomorrow" }), 400, "BadExpirationDate"},
		{"long collapse id", ok(func(r *apnsReq) { r.header["apns-collapse-id"] = strings.Repeat("c", 65) }), 400, "BadCollapseId"},
		{"bad device token", ok(func(r *apnsReq) { r.path = "/3/device/not-hex" }), 400, "BadDeviceToken"},
		{"bad path", ok(func(r *apnsReq) { r.path = "/2/device/" + device }), 404, "BadPath"},
		{"empty payload", ok(func(r *apnsReq) { r.body = "" }), 400, "PayloadEmpty"},
		{"no aps", ok(func(r *apnsReq) { r.body = `{"x":1}` }), 400, "BadPayload"},
		{"too large", ok(func(r *apnsReq) { r.body = `{"aps":{"alert":"` + strings.Repeat("x", 4100) + `"}}` }), 413, "PayloadTooLarge"},
		{"too large for voip", ok(func(r *apnsReq) {
			r.header["apns-push-type"], r.body = "voip", `{"aps":{"alert":"`+strings.Repeat("x", 5110)+`"}}`
		}), 413, "PayloadTooLarge"},
	}
	c := apnsClient(t, f, true)
	for _, tc := range cases {
		if status, reason, _ := apnsDo(t, c, f.URL(), tc.req); status != tc.status || reason != tc.reason {
			t.Errorf("%s: %d %q, want %d %q", tc.name, status, reason, tc.status, tc.reason)
		}
	}
	status, _, h := apnsDo(t, c, f.URL(), ok(nil))
	if status != 200 || h.Get("apns-id") != "8e3d1a5c-2b4f-4c6d-9e8f-0a1b2c3d4e5f" {
		t.Fatalf("valid notification: %d %v", status, h)
	}
	if status, _, h := apnsDo(t, c, f.URL(), ok(func(r *apnsReq) { delete(r.header, "apns-id") })); status != 200 || len(h.Get("apns-id")) != 36 {
		t.Fatalf("without apns-id: %d %v", status, h)
	}
	// A voip notification may be up to 5120 bytes.
	voip := ok(func(r *apnsReq) {
		r.header["apns-push-type"], r.body = "voip", `{"aps":{"alert":"`+strings.Repeat("x", 4500)+`"}}`
	})
	if status, reason, _ := apnsDo(t, c, f.URL(), voip); status != 200 {
		t.Fatalf("4.5 KB voip notification: %d %q", status, reason)
	}
	f.ThrottleDevice(device)
	if status, reason, _ := apnsDo(t, c, f.URL(), ok(nil)); status != 429 || reason != "TooManyRequests" {
		t.Errorf("throttled device: %d %q", status, reason)
	}
	f.Unregister(device)
	if status, reason, _ := apnsDo(t, c, f.URL(), ok(nil)); status != 410 || reason != "Unregistered" {
		t.Errorf("unregistered: %d %q", status, reason)
	}
	// A new token on the same connection within 20 minutes.
	clk.Advance(5 * time.Minute)
	fresh := providerToken(t, key, f.KeyID(), f.TeamID(), clk.Now())
	other2 := strings.Repeat("cd", 32)
	if status, reason, _ := apnsDo(t, c, f.URL(), ok(func(r *apnsReq) { r.path, r.header["authorization"] = "/3/device/"+other2, "bearer "+fresh })); status != 429 || reason != "TooManyProviderTokenUpdates" {
		t.Errorf("token replaced after 5 min: %d %q", status, reason)
	}
	if status, _, _ := apnsDo(t, apnsClient(t, f, true), f.URL(), ok(func(r *apnsReq) { r.path, r.header["authorization"] = "/3/device/"+other2, "bearer "+fresh })); status != 200 {
		t.Errorf("the new token on a new connection: %d", status)
	}
	if status, _, _ := apnsDo(t, apnsClient(t, f, false), f.URL(), ok(nil)); status != http.StatusHTTPVersionNotSupported {
		t.Errorf("HTTP/1.1: %d, want 505", status)
	}
	got := f.Notifications()
	if len(got) != 4 || got[0].Token != device || got[0].Topic != f.Topic() || got[0].Priority != "10" || got[0].PushType != "alert" ||
		got[0].Payload["aps"] == nil || !got[0].IssuedAt.Equal(clk.Now().Add(-5*time.Minute).Truncate(time.Second)) {
		t.Errorf("notifications %+v", got)
	}
	if n := f.ProviderTokens(); n != 2 {
		t.Errorf("ProviderTokens = %d, want 2", n)
	}

	f.FailNext(1, 500)
	if status, reason, _ := apnsDo(t, c, f.URL(), ok(func(r *apnsReq) { r.path = "/3/device/" + other2 })); status != 500 || reason != "InternalServerError" {
		t.Errorf("injected 500: %d %q", status, reason)
	}
	f.ReasonFor(403, "UnrelatedKeyIdInToken")
	f.FailNext(1, 403)
	if status, reason, _ := apnsDo(t, c, f.URL(), ok(func(r *apnsReq) { r.path = "/3/device/" + other2 })); status != 403 || reason != "UnrelatedKeyIdInToken" {
		t.Errorf("injected 403 with a reason: %d %q", status, reason)
	}
	f.RateLimitFor(time.Hour, "2")
	if status, reason, h := apnsDo(t, c, f.URL(), ok(func(r *apnsReq) { r.path = "/3/device/" + other2 })); status != 429 || reason != "TooManyRequests" || h.Get("Retry-After") != "2" {
		t.Errorf("rate limited: %d %q %v", status, reason, h)
	}
	f.Reset()
	if status, _, _ := apnsDo(t, c, f.URL(), ok(func(r *apnsReq) { r.path, r.header["apns-collapse-id"] = "/3/device/"+other2, "job-42" })); status != 200 {
		t.Fatalf("with a collapse id: %d", status)
	}
	if got := f.Notifications(); got[len(got)-1].CollapseID != "job-42" {
		t.Errorf("collapse id recorded %q", got[len(got)-1].CollapseID)
	}
}
