package providers_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/testenv"
)

// whsec is a Standard Webhooks secret of n bytes, all b.
func whsec(b byte, n int) string {
	return "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, n))
}

// signedWebhook builds a webhook provider signing with the secrets of
// HOOK_SIGNING_SECRET, on clock.
func signedWebhook(t *testing.T, url, secrets string, clock *testenv.Clock) *providers.Webhook {
	t.Helper()
	w, err := providers.NewWebhook(providers.Config{Name: "hooks", Channel: "sms", Kind: "webhook", URL: url, Rate: 10,
		SigningSecretEnv: "HOOK_SIGNING_SECRET"},
		providers.Options{Getenv: env(map[string]string{"HOOK_SIGNING_SECRET": secrets}), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// TestSignedWebhookVerifiesIndependently: with signing_secret_env holding
// two secrets (a rotation), every webhook carries webhook-id (the job id,
// the same on a retry), webhook-timestamp (the attempt's, UNIX seconds)
// and webhook-signature with one v1 signature per secret; VerifyWebhook,
// the receiver's code written from the Standard Webhooks specification
// without calling the notifier, accepts the request under either secret
// alone and refuses a third secret, a changed body, id or timestamp, and a
// timestamp outside its tolerance. A job id with a '.' (which the
// specification forbids in what is signed) is sent as msg_<uuid>.
func TestSignedWebhookVerifiesIndependently(t *testing.T) {
	t.Parallel()
	oldSecret, newSecret, other := whsec(1, 32), whsec(2, 24), whsec(3, 32)
	clock := testenv.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	fake := testenv.FakeProvider(t)
	w := signedWebhook(t, fake.URL(), newSecret+" "+oldSecret, clock)
	ctx := context.Background()
	if err := w.Send(ctx, smsMessage()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(90 * time.Second)
	dotted := smsMessage()
	dotted.ID = "order.2030-01-02.7"
	for _, m := range []*providers.Message{smsMessage(), dotted} {
		if err := w.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	reqs := fake.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	now := clock.Now()
	const tolerance = 5 * time.Minute
	first, retry, dot := reqs[0], reqs[1], reqs[2]
	if id := first.Header.Get("webhook-id"); id != "job-42" || retry.Header.Get("webhook-id") != id {
		t.Errorf("webhook-id %q then %q, want job-42 both times", id, retry.Header.Get("webhook-id"))
	}
	if ts, want := first.Header.Get("webhook-timestamp"), strconv.FormatInt(now.Add(-90*time.Second).Unix(), 10); ts != want {
		t.Errorf("webhook-timestamp %q, want %q (the attempt's)", ts, want)
	}
	if ts, want := retry.Header.Get("webhook-timestamp"), strconv.FormatInt(now.Unix(), 10); ts != want {
		t.Errorf("the retry's webhook-timestamp %q, want %q", ts, want)
	}
	if id := dot.Header.Get("webhook-id"); !regexp.MustCompile(`^msg_[0-9a-f-]{36}$`).MatchString(id) || id != providers.WebhookID(dotted.ID) {
		t.Errorf("webhook-id of %q: %q, want msg_<uuid>", dotted.ID, id)
	}
	sigs := strings.Fields(first.Header.Get("webhook-signature"))
	if len(sigs) != 2 || !strings.HasPrefix(sigs[0], "v1,") || !strings.HasPrefix(sigs[1], "v1,") {
		t.Errorf("webhook-signature %q, want two v1 signatures", first.Header.Get("webhook-signature"))
	}
	for _, r := range reqs {
		for _, secret := range []string{oldSecret, newSecret} {
			if err := VerifyWebhook(r.Header, r.Body, []string{secret}, now, tolerance); err != nil {
				t.Errorf("request %s under one secret of the rotation: %v", r.Header.Get("webhook-id"), err)
			}
		}
		if err := VerifyWebhook(r.Header, r.Body, []string{other}, now, tolerance); err == nil {
			t.Errorf("request %s verified under a secret it was not signed with", r.Header.Get("webhook-id"))
		}
	}
	tamper := func(f func(h http.Header, body []byte) []byte) error {
		h := retry.Header.Clone()
		body := f(h, bytes.Clone(retry.Body))
		return VerifyWebhook(h, body, []string{oldSecret, newSecret}, now, tolerance)
	}
	for what, f := range map[string]func(http.Header, []byte) []byte{
		"a changed body": func(_ http.Header, b []byte) []byte { return bytes.Replace(b, []byte("493817"), []byte("000000"), 1) },
		"a changed id":   func(h http.Header, b []byte) []byte { h.Set("webhook-id", "job-43"); return b },
		"a changed timestamp": func(h http.Header, b []byte) []byte {
			h.Set("webhook-timestamp", strconv.FormatInt(now.Unix()-1, 10))
			return b
		},
	} {
		if err := tamper(f); err == nil {
			t.Errorf("%s verified", what)
		}
	}
	if err := VerifyWebhook(retry.Header, retry.Body, []string{newSecret}, now.Add(tolerance+time.Second), tolerance); err == nil {
		t.Error("a request older than the tolerance verified (a replay)")
	}
	// Unsigned without signing_secret_env.
	plain := newWebhook(t, fake.URL(), 0)
	if err := plain.Send(ctx, smsMessage()); err != nil {
		t.Fatal(err)
	}
	if h := fake.Requests()[3].Header; h.Get("webhook-signature") != "" || h.Get("webhook-id") != "" {
		t.Errorf("an unsigned webhook carries %v", h)
	}
}

// TestWebhookSigningSecrets: signing_secret_env must hold one to four
// whsec_<base64> secrets of 24 to 64 bytes (Standard Webhooks: "At least
// 24 bytes (192 bits, 512 maximum)"); the errors name the variable and the
// secret's place, never its value. The key is the webhook kind's alone.
func TestWebhookSigningSecrets(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		value, want string
	}{
		{"", "HOOK_SIGNING_SECRET is not set or empty"},
		{"   ", "holds no secret"},
		{"c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0", "secret 1 of 1 does not start with whsec_"},
		{whsec(1, 32) + " whsec_!!notbase64!!", "secret 2 of 2 is not standard base64"},
		{whsec(1, 23), "secret 1 of 1 is 23 bytes, want 24 to 64"},
		{whsec(1, 65), "secret 1 of 1 is 65 bytes, want 24 to 64"},
		{strings.Repeat(whsec(1, 24)+" ", 5), "holds 5 secrets, at most 4"},
	} {
		_, err := providers.NewWebhook(providers.Config{Name: "hooks", Channel: "sms", Kind: "webhook", URL: "http://127.0.0.1:1", Rate: 1,
			SigningSecretEnv: "HOOK_SIGNING_SECRET"}, providers.Options{Getenv: env(map[string]string{"HOOK_SIGNING_SECRET": c.value})})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "signing_secret_env") {
			t.Errorf("%q: %v, want %q", c.value, err, c.want)
			continue
		}
		if b64 := strings.TrimPrefix(strings.Fields(c.value + " x")[0], "whsec_"); len(b64) > 8 && strings.Contains(err.Error(), b64) {
			t.Errorf("the error %q quotes the secret", err)
		}
	}
	bad := providers.Config{Name: "sms", Channel: "sms", Kind: "twilio", Rate: 1, AccountSID: "AC1", CredentialsEnv: "T", From: "+15005550006",
		SigningSecretEnv: "HOOK_SIGNING_SECRET"}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "signing_secret_env: not used by kind twilio (used by webhook)") {
		t.Errorf("signing_secret_env on twilio: %v", err)
	}
	hook := providers.Config{Name: "h", Channel: "sms", Kind: "webhook", URL: "https://x.example", Rate: 1, SigningSecretEnv: "not a name"}
	if err := hook.Validate(); err == nil || !strings.Contains(err.Error(), "signing_secret_env: must be an environment variable name") {
		t.Errorf("a bad variable name: %v", err)
	}
}

// TestDocsVerifierIsThisCode: the receiver's verifier docs/providers.md
// shows ("Signed webhooks") is VerifyWebhook of
// webhookverify_example_test.go, which the tests compile and run, word for
// word.
func TestDocsVerifierIsThisCode(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("webhookverify_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/providers.md")
	if err != nil {
		t.Fatal(err)
	}
	code := between(t, string(src), "// --- begin docs/providers.md: verifier\n", "// --- end docs/providers.md: verifier")
	block := between(t, string(doc), "<!-- verifier: providers/webhookverify_example_test.go -->\n```go\n", "```")
	if strings.TrimSpace(code) != strings.TrimSpace(block) {
		t.Errorf("docs/providers.md's verifier differs from VerifyWebhook in webhookverify_example_test.go:\n--- docs\n%s\n--- code\n%s", block, code)
	}
}

// between is the text of s between begin and the next end.
func between(t *testing.T, s, begin, end string) string {
	t.Helper()
	_, after, ok := strings.Cut(s, begin)
	if !ok {
		t.Fatalf("no %q", begin)
	}
	in, _, ok := strings.Cut(after, end)
	if !ok {
		t.Fatalf("no %q after %q", end, begin)
	}
	return in
}
