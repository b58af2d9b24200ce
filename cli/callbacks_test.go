package cli

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/testenv"
)

// TestTwilioDeliveryCallbacks: a twilio provider with status_callback_url
// asks Twilio to call back each message's delivery; `notifier run` serves
// the callbacks on its metrics port at /callbacks/twilio. A signed
// "undelivered" report dead-letters the job with reason undelivered and
// Twilio's reason (`dead list` shows it), every report is counted in
// notifier_deliveries_total, and a callback whose signature is wrong is
// refused with 403 and changes nothing.
func TestTwilioDeliveryCallbacks(t *testing.T) {
	t.Parallel()
	tw := testenv.FakeTwilio(t)
	metrics := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	w := newWorld(t, 100, fmt.Sprintf(`  - name: twilio-eu
    channel: sms
    kind: twilio
    url: %s
    account_sid: %s
    credentials_env: TW_TOKEN
    from: "+15005550006"
    rate: 100
    max_queue_delay: 1s
    status_callback_url: http://%s/callbacks/twilio
`, tw.URL(), tw.AccountSID(), metrics))
	cfg, err := os.ReadFile(w.config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.config, []byte(strings.Replace(string(cfg), "listen: 127.0.0.1:0", "listen: "+metrics, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := w.run("TW_TOKEN=" + tw.AuthToken())
	jobs := filepath.Join(t.TempDir(), "jobs.ndjson")
	if err := os.WriteFile(jobs, []byte(`{"id":"otp-1","user_id":"u1","channel":"sms","provider":"twilio-eu","to":"+447700900123","body":"code 123456"}`+"\n"+
		`{"id":"otp-2","user_id":"u2","channel":"sms","provider":"twilio-eu","to":"+447700900124","body":"code 654321"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runCLI(t, nil, "", "publish", "--config", w.config, "--file", jobs); code != 0 {
		t.Fatalf("publish: exit %d: %s %s", code, out, errOut)
	}
	testenv.WaitFor(t, 20*time.Second, "both messages at Twilio", func() bool { return len(tw.Messages()) == 2 })
	for _, m := range tw.Messages() {
		if !strings.HasPrefix(m.StatusCallback, "http://"+metrics+"/callbacks/twilio?") {
			t.Fatalf("StatusCallback %q", m.StatusCallback)
		}
	}
	// A forged callback: refused, nothing recorded.
	forged := url.Values{"MessageSid": {"SM00000000000000000000000000000000"}, "MessageStatus": {"undelivered"}, "ErrorCode": {"30003"}}
	req, err := http.NewRequest(http.MethodPost, tw.Messages()[0].StatusCallback, strings.NewReader(forged.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Twilio-Signature", "bm90IHRoZSBzaWduYXR1cmU=")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a forged callback was answered %d, want 403", resp.StatusCode)
	}
	// Twilio reports one delivered, the other undelivered.
	msgs := tw.Messages()
	if err := tw.DeliverMessage(msgs[0].SID, "delivered", 0); err != nil {
		t.Fatal(err)
	}
	if err := tw.DeliverMessage(msgs[1].SID, "undelivered", 30003); err != nil {
		t.Fatal(err)
	}
	undelivered := "otp-2"
	if strings.Contains(msgs[0].StatusCallback, "job=otp-2") {
		undelivered = "otp-1"
	}
	out, errOut, code := runCLI(t, nil, "", "dead", "list", "--config", w.config)
	if code != 0 || !strings.Contains(out, "undelivered") || !strings.Contains(out, undelivered) || !strings.Contains(out, "30003") {
		t.Errorf("dead list: exit %d:\n%s%s\nwant %s with reason undelivered and Twilio's code", code, out, errOut, undelivered)
	}
	if n := strings.Count(out, "undelivered"); n < 1 {
		t.Errorf("dead list shows %d undelivered letters", n)
	}
	body := get(t, "http://"+metrics+"/metrics")
	for _, want := range []string{
		`notifier_deliveries_total{provider="twilio-eu",status="delivered"} 1`,
		`notifier_deliveries_total{provider="twilio-eu",status="undelivered"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(p.logs(), "+447700900124") || strings.Contains(p.logs(), "654321") {
		t.Errorf("the logs carry the recipient or the body")
	}
}

func get(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
