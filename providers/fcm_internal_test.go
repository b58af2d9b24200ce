package providers

import (
	"testing"
	"time"
)

// TestFCMFloorIsItsOwn: FCM's rate-limit backoff starts from
// FCMOverloadPause, Firebase's own second ("if you waited one second
// before the first retry, wait at least two seconds before the next one"),
// not from DefaultRetryAfter, SPEC §6's pause for any provider. The two
// are equal today, so this pins the provenance: a change of the default
// leaves FCM at Firebase's second.
func TestFCMFloorIsItsOwn(t *testing.T) {
	t.Parallel()
	cfg := Config{Name: "push-fcm", Channel: "push", Kind: "fcm", Rate: 10, URL: "https://fcm.example", ProjectID: "p",
		CredentialsEnv: "T"}
	f, err := NewFCM(cfg, Options{Getenv: func(string) string { return "token" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	if FCMOverloadPause != time.Second || f.floor != FCMOverloadPause {
		t.Errorf("fcm floor %s, FCMOverloadPause %s: want Firebase's 1s for both", f.floor, FCMOverloadPause)
	}
	w, err := NewWebhook(Config{Name: "hook", Channel: "sms", Kind: "webhook", Rate: 10, URL: "https://hook.example"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	if w.floor != DefaultRetryAfter {
		t.Errorf("webhook floor %s, want DefaultRetryAfter %s", w.floor, DefaultRetryAfter)
	}
}
