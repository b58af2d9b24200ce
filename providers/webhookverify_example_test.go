package providers_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
)

// The receiver's side of a signed webhook, as docs/providers.md shows it
// ("Signed webhooks"): TestDocsVerifierIsThisCode keeps the two equal, so
// the snippet in the docs is code that compiles and passes the tests. It is
// written from the Standard Webhooks specification's text alone and calls
// nothing of this module: the tests use it as the independent verifier of
// what the webhook kind signs.

// --- begin docs/providers.md: verifier

// VerifyWebhook checks that a webhook request came from the notifier, as
// the Standard Webhooks specification defines it. secrets are the
// endpoint's signing secrets as configured (whsec_<base64>; two during a
// rotation), body the request body exactly as received (not re-encoded),
// tolerance how far webhook-timestamp may lie from now (a replayed request
// is older). It returns nil when one of webhook-signature's v1 signatures
// is the HMAC-SHA256, under one of the secrets, of
// "<webhook-id>.<webhook-timestamp>.<body>". Keep webhook-id for a while
// afterwards and drop a request whose id you have seen: it is the same on
// every attempt of a job.
func VerifyWebhook(header http.Header, body []byte, secrets []string, now time.Time, tolerance time.Duration) error {
	id, ts, sigs := header.Get("webhook-id"), header.Get("webhook-timestamp"), header.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("webhook-id, webhook-timestamp or webhook-signature missing")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("webhook-timestamp is not an integer")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return errors.New("webhook-timestamp is too far from now")
	}
	for _, secret := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		if err != nil {
			return errors.New("a secret is not whsec_<base64>")
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + ts + "."))
		mac.Write(body)
		want := mac.Sum(nil)
		for _, sig := range strings.Fields(sigs) {
			version, b64, _ := strings.Cut(sig, ",")
			if version != "v1" {
				continue // another scheme (v1a: asymmetric)
			}
			got, err := base64.StdEncoding.DecodeString(b64)
			if err == nil && hmac.Equal(got, want) { // constant time
				return nil
			}
		}
	}
	return errors.New("no signature matches")
}

// --- end docs/providers.md: verifier

// A webhook provider with signing_secret_env signs every request; the
// receiver checks it with VerifyWebhook before acting on it.
func ExampleWebhook_signed() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // 24 random bytes, base64
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := VerifyWebhook(r.Header, body, []string{secret}, time.Now(), 5*time.Minute); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		fmt.Println("verified webhook", r.Header.Get("webhook-id"))
	}))
	defer receiver.Close()

	hook, err := providers.NewWebhook(providers.Config{
		Name: "hooks", Channel: "sms", Kind: "webhook", URL: receiver.URL, Rate: 10,
		SigningSecretEnv: "HOOK_SIGNING_SECRET",
	}, providers.Options{Getenv: func(string) string { return secret }})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer hook.Close()
	err = hook.Send(context.Background(), &providers.Message{Job: queue.Job{ID: "job-1", UserID: "u-1", Channel: "sms", To: "+15005550006", Body: "hi"}})
	fmt.Println("sent:", err)
	// Output:
	// verified webhook job-1
	// sent: <nil>
}
