package testenv_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/notifier/notifier/testenv"
)

// fcmPost sends one messages:send request and decodes the answer.
func fcmPost(t *testing.T, url, auth, contentType, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("status %d body %q is not JSON", resp.StatusCode, b)
	}
	return resp.StatusCode, out
}

// rpc returns a google.rpc body's status and first errorCode.
func rpc(body map[string]any) (string, string) {
	e, _ := body["error"].(map[string]any)
	status, _ := e["status"].(string)
	code := ""
	if d, ok := e["details"].([]any); ok && len(d) > 0 {
		code, _ = d[0].(map[string]any)["errorCode"].(string)
	}
	return status, code
}

func TestFakeFCMChecksWhatFCMChecks(t *testing.T) {
	t.Parallel()
	f := testenv.FakeFCM(t)
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	send := f.URL() + "/v1/projects/" + f.ProjectID() + "/messages:send"
	bearer := "Bearer " + f.BearerToken()
	const js = "application/json"
	token := "dKx9:APA91b" + strings.Repeat("x", 60)
	msg := `{"message":{"token":"` + token + `","notification":{"title":"t","body":"b"},"data":{"k":"v"}}}`
	cases := []struct {
		name, url, auth, ct, body string
		status                    int
		rpcStatus, errorCode      string
	}{
		{"wrong path", f.URL() + "/v1/messages", bearer, js, msg, 404, "NOT_FOUND", ""},
		{"no auth", send, "", js, msg, 401, "UNAUTHENTICATED", ""},
		{"wrong token", send, "Bearer nope", js, msg, 401, "UNAUTHENTICATED", ""},
		{"other project", f.URL() + "/v1/projects/other/messages:send", bearer, js, msg, 403, "PERMISSION_DENIED", ""},
		{"form body", send, bearer, "application/x-www-form-urlencoded", msg, 400, "INVALID_ARGUMENT", ""},
		{"unknown field", send, bearer, js, `{"message":{"token":"` + token + `","colour":"red"}}`, 400, "INVALID_ARGUMENT", ""},
		{"no message", send, bearer, js, `{}`, 400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"},
		{"two targets", send, bearer, js, `{"message":{"token":"` + token + `","topic":"news"}}`, 400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"},
		{"bad token", send, bearer, js, `{"message":{"token":"short"}}`, 400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"},
		{"reserved data key", send, bearer, js, `{"message":{"token":"` + token + `","data":{"gcm.x":"1"}}}`, 400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"},
		{"data not strings", send, bearer, js, `{"message":{"token":"` + token + `","data":{"n":1}}}`, 400, "INVALID_ARGUMENT", ""},
		{"reserved key from", send, bearer, js, `{"message":{"token":"` + token + `","data":{"from":"x"}}}`, 400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"},
		{"reserved key message_type", send, bearer, js, `{"message":{"token":"` + token + `","data":{"message_type":"x"}}}`, 400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"},
		{"reserved prefix google", send, bearer, js, `{"message":{"token":"` + token + `","data":{"googleFoo":"x"}}}`, 400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"},
		{"data over 4096 bytes", send, bearer, js, `{"message":{"token":"` + token + `","data":{"k":"` + strings.Repeat("v", 4096) + `"}}}`,
			400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"},
		{"ttl without unit", send, bearer, js, `{"message":{"token":"` + token + `","android":{"ttl":"300"}}}`, 400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"},
		{"ttl over 28 days", send, bearer, js, `{"message":{"token":"` + token + `","android":{"ttl":"2419201s"}}}`, 400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"},
		{"apns-expiration not a number", send, bearer, js, `{"message":{"token":"` + token + `","apns":{"headers":{"apns-expiration":"soon"}}}}`,
			400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"},
		{"webpush TTL not a number", send, bearer, js, `{"message":{"token":"` + token + `","webpush":{"headers":{"TTL":"-1"}}}}`,
			400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"},
	}
	for _, c := range cases {
		status, body := fcmPost(t, c.url, c.auth, c.ct, c.body)
		rs, ec := rpc(body)
		if status != c.status || rs != c.rpcStatus || ec != c.errorCode {
			t.Errorf("%s: %d %s %s, want %d %s %q (%v)", c.name, status, rs, ec, c.status, c.rpcStatus, c.errorCode, body)
		}
	}
	status, body := fcmPost(t, send, bearer, "application/json; charset=utf-8", msg)
	if name, _ := body["name"].(string); status != 200 || !strings.HasPrefix(name, "projects/"+f.ProjectID()+"/messages/") {
		t.Fatalf("valid message: %d %v", status, body)
	}
	f.Unregister(token)
	if status, body := fcmPost(t, send, bearer, js, msg); status != 404 {
		t.Errorf("unregistered: %d %v", status, body)
	} else if rs, ec := rpc(body); rs != "NOT_FOUND" || ec != "UNREGISTERED" {
		t.Errorf("unregistered: %s %s", rs, ec)
	}
	// The largest data, a key FCM does not reserve ("notification": not in
	// the v1 reference's list), and the expiries of every platform.
	full := `{"message":{"token":"` + token + `y","data":{"notification":"` + strings.Repeat("v", 4096-len("notification")) + `"},` +
		`"android":{"ttl":"2419200s"},"apns":{"headers":{"apns-expiration":"1924992000"}},"webpush":{"headers":{"TTL":"300"}}}}`
	if status, body := fcmPost(t, send, bearer, js, full); status != 200 {
		t.Errorf("4096 bytes of data and expiries: %d %v", status, body)
	}
	got := f.Messages()
	if len(got) != 2 || got[0].Token != token || got[0].Title != "t" || got[0].Body != "b" || got[0].Data["k"] != "v" || got[0].OAuth ||
		got[0].AndroidTTL != "" || got[0].APNsExpiration != "" || got[0].WebpushTTL != "" {
		t.Errorf("messages %+v", got)
	}
	if m := got[1]; m.AndroidTTL != "2419200s" || m.APNsExpiration != "1924992000" || m.WebpushTTL != "300" {
		t.Errorf("expiries recorded: %q %q %q", m.AndroidTTL, m.APNsExpiration, m.WebpushTTL)
	}

	f.FailNext(1, 503)
	if status, body := fcmPost(t, send, bearer, js, `{"message":{"token":"`+token+`x"}}`); status != 503 {
		t.Errorf("injected 503: %d", status)
	} else if rs, ec := rpc(body); rs != "UNAVAILABLE" || ec != "UNAVAILABLE" {
		t.Errorf("injected 503: %s %s", rs, ec)
	}
	f.RateLimitFor(time.Hour, "5")
	if status, body := fcmPost(t, send, bearer, js, `{"message":{"token":"`+token+`x"}}`); status != 429 {
		t.Errorf("rate limited: %d", status)
	} else if rs, ec := rpc(body); rs != "RESOURCE_EXHAUSTED" || ec != "QUOTA_EXCEEDED" || !strings.Contains(fmt.Sprint(body), "QuotaFailure") {
		t.Errorf("rate limited: %s %s %v", rs, ec, body)
	}
	f.Reset()
	f.ThrottleDevice(token + "z")
	if status, body := fcmPost(t, send, bearer, js, `{"message":{"token":"`+token+`z"}}`); status != 429 ||
		!strings.Contains(fmt.Sprint(body), "Device message rate exceeded") {
		t.Errorf("throttled device: %d %v", status, body)
	}
}

// TestFakeFCMContractIsAnOverload: over the contract, FCM's overload 429
// (no FCM code), not its per-minute QUOTA_EXCEEDED.
func TestFakeFCMContractIsAnOverload(t *testing.T) {
	t.Parallel()
	f := testenv.FakeFCM(t, testenv.WithContract(1))
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	send := f.URL() + "/v1/projects/" + f.ProjectID() + "/messages:send"
	msg := `{"message":{"token":"dKx9:APA91b` + strings.Repeat("x", 60) + `"}}`
	if status, _ := fcmPost(t, send, "Bearer "+f.BearerToken(), "application/json", msg); status != 200 {
		t.Fatalf("first: %d", status)
	}
	status, body := fcmPost(t, send, "Bearer "+f.BearerToken(), "application/json", msg)
	if rs, ec := rpc(body); status != 429 || rs != "RESOURCE_EXHAUSTED" || ec != "" {
		t.Errorf("over the contract: %d %s %q, want 429 RESOURCE_EXHAUSTED without an FCM code", status, rs, ec)
	}
}

// TestFakeFCMOverloadFor: FCM overloaded, as Firebase's "Throttling and
// quotas" says it may answer: 429 RESOURCE_EXHAUSTED without an FCM code,
// and no Retry-After.
func TestFakeFCMOverloadFor(t *testing.T) {
	t.Parallel()
	f := testenv.FakeFCM(t)
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	f.OverloadFor(time.Hour)
	req, _ := http.NewRequest(http.MethodPost, f.URL()+"/v1/projects/"+f.ProjectID()+"/messages:send",
		strings.NewReader(`{"message":{"token":"dKx9:APA91b`+strings.Repeat("x", 60)+`"}}`))
	req.Header.Set("Authorization", "Bearer "+f.BearerToken())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if rs, ec := rpc(body); resp.StatusCode != 429 || rs != "RESOURCE_EXHAUSTED" || ec != "" || resp.Header.Get("Retry-After") != "" {
		t.Errorf("overloaded: %d %s %q Retry-After %q, want 429 RESOURCE_EXHAUSTED without a code or Retry-After", resp.StatusCode, rs, ec, resp.Header.Get("Retry-After"))
	}
	f.OverloadFor(0)
	if status, _ := fcmPost(t, req.URL.String(), "Bearer "+f.BearerToken(), "application/json", `{"message":{"token":"dKx9:APA91b`+strings.Repeat("x", 60)+`"}}`); status != 200 {
		t.Errorf("after the overload: %d", status)
	}
}

// TestFakeFCMTokenEndpoint exchanges the fake's service-account key with
// the oauth2 library, as a real client does.
func TestFakeFCMTokenEndpoint(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	f := testenv.FakeFCM(t, testenv.WithClock(clk.Now))
	key, err := os.ReadFile(f.ServiceAccountFile())
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, &http.Client{Transport: tr})
	fetch := func(scope string) (*oauth2.Token, error) {
		conf, err := google.JWTConfigFromJSON(key, scope)
		if err != nil {
			t.Fatal(err)
		}
		return conf.TokenSource(ctx).Token()
	}
	tok, err := fetch("https://www.googleapis.com/auth/firebase.messaging")
	if err != nil || !strings.HasPrefix(tok.AccessToken, "ya29.") {
		t.Fatalf("token: %v %v", tok, err)
	}
	if _, err := fetch("https://www.googleapis.com/auth/cloud-platform.read-only"); err == nil {
		t.Error("a token was issued for another scope")
	}
	forged := strings.Replace(string(key), f.TokenURL(), f.TokenURL()+"?", 1) // another audience
	if conf, err := google.JWTConfigFromJSON([]byte(forged), "https://www.googleapis.com/auth/firebase.messaging"); err == nil {
		if _, err := conf.TokenSource(ctx).Token(); err == nil {
			t.Error("an assertion for another audience was accepted")
		}
	}
	f.FailTokens(1, 400)
	if _, err := fetch("https://www.googleapis.com/auth/firebase.messaging"); err == nil || !strings.Contains(err.Error(), "invalid_grant") {
		t.Errorf("injected invalid_grant: %v", err)
	}
	if n := f.TokenRequests(); n != 4 {
		t.Errorf("TokenRequests = %d, want 4", n)
	}

	send := f.URL() + "/v1/projects/" + f.ProjectID() + "/messages:send"
	msg := `{"message":{"token":"` + strings.Repeat("t", 40) + `"}}`
	if status, _ := fcmPost(t, send, "Bearer "+tok.AccessToken, "application/json", msg); status != 200 {
		t.Fatalf("issued token refused: %d", status)
	}
	if got := f.Messages(); len(got) != 1 || !got[0].OAuth {
		t.Errorf("messages %+v", got)
	}
	clk.Advance(time.Hour)
	if status, _ := fcmPost(t, send, "Bearer "+tok.AccessToken, "application/json", msg); status != 401 {
		t.Errorf("expired token: %d, want 401", status)
	}
}
