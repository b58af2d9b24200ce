package providers

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notifier/notifier/queue"
)

// TestAPNsUnsignableTokenIsTheSender: a provider token the key cannot sign
// (here a P-384 key, which ES256 refuses) stops every notification, none
// of them at fault: ErrSender (a pause, the jobs kept), not ErrPermanent
// (which dead-lettered every job while it lasted), both for the first
// token and for the one made after APNs called a token expired.
func TestAPNsUnsignableTokenIsTheSender(t *testing.T) {
	t.Parallel()
	bad, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"reason":"ExpiredProviderToken"}`))
	}))
	t.Cleanup(srv.Close)
	apns := func(signer *apnsSigner) *APNs {
		return &APNs{httpBase: httpBase{name: "push", timeout: 5 * time.Second, client: srv.Client(), now: time.Now,
			floor: DefaultRetryAfter, throttle: new(throttle)}, base: srv.URL + "/3/device/", topic: "com.example.app",
			pushType: "alert", priority: "10", signer: signer}
	}
	m := &Message{Job: queue.Job{ID: "job-42", Channel: "push", To: "a4f1c3", Body: "hello"}}
	ctx := context.Background()

	// The first token.
	err = apns(&apnsSigner{key: bad, keyID: "KEY1234567", teamID: "TEAM123456", now: time.Now}).Send(ctx, m)
	if !errors.Is(err, ErrSender) || errors.Is(err, ErrPermanent) {
		t.Errorf("first token unsignable: %v, want ErrSender only", err)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%d requests without a token, want 0", n)
	}

	// A token cached, refused as expired; its replacement cannot be signed.
	cached := &apnsSigner{key: bad, keyID: "KEY1234567", teamID: "TEAM123456", now: time.Now, token: "cached.token.x", issued: time.Now()}
	err = apns(cached).Send(ctx, m)
	if !errors.Is(err, ErrSender) || errors.Is(err, ErrPermanent) {
		t.Errorf("replacement token unsignable: %v, want ErrSender only", err)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("%d requests, want 1 (the one refused as expired)", n)
	}
}
