package providers

import "testing"

// TestWebhookSignerVector: the signature of the Standard Webhooks
// libraries' own test vector (libraries/go/webhook_test.go of
// github.com/standard-webhooks/standard-webhooks, TestWebhookSign).
func TestWebhookSignerVector(t *testing.T) {
	s, err := newWebhookSigner("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := s.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("signature %q, want %q", got, want)
	}
}
