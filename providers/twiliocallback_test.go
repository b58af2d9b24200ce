package providers_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/testenv"
)

// callbackSetup is a registry with a twilio provider sending to fake with
// its status callbacks served by the registry's handler, and the reports
// that handler made.
type callbackSetup struct {
	fake     *testenv.TwilioFake
	reg      *providers.Registry
	base     string // status_callback_url
	mu       sync.Mutex
	reports  []providers.DeliveryReport
	failNext bool
}

func newCallbackSetup(t *testing.T) *callbackSetup {
	t.Helper()
	cs := &callbackSetup{fake: testenv.FakeTwilio(t)}
	var handler http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	cs.base = srv.URL + "/hooks/twilio"
	reg, err := providers.NewRegistry([]providers.Config{
		{Name: "sms.tw", Channel: "sms", Default: true, Kind: "twilio", Rate: 10, URL: cs.fake.URL(), AccountSID: cs.fake.AccountSID(),
			From: "+15005550006", CredentialsEnv: "TW", StatusCallbackURL: cs.base},
		{Name: "tw-quiet", Channel: "sms", Kind: "twilio", Rate: 10, URL: cs.fake.URL(), AccountSID: cs.fake.AccountSID(),
			From: "+15005550006", CredentialsEnv: "TW"},
		{Name: "hook", Channel: "push", Default: true, Kind: "webhook", Rate: 10, URL: "http://127.0.0.1:1/send"},
	}, providers.Options{Getenv: env(map[string]string{"TW": cs.fake.AuthToken()})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	cs.reg = reg
	handler = reg.TwilioCallbacks(func(_ context.Context, d providers.DeliveryReport) error {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		if cs.failNext {
			cs.failNext = false
			return errors.New("ledger unavailable")
		}
		cs.reports = append(cs.reports, d)
		return nil
	})
	return cs
}

func (cs *callbackSetup) got() []providers.DeliveryReport {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return append([]providers.DeliveryReport(nil), cs.reports...)
}

// post makes a callback request signed with token (no signature when "").
func (cs *callbackSetup) post(t *testing.T, method, query string, form url.Values, token string) int {
	t.Helper()
	full := cs.base + "?" + query
	req, err := http.NewRequest(method, full, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if token != "" {
		req.Header.Set("X-Twilio-Signature", testenv.TwilioSignature(token, full, form))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestTwilioCallbacksEndToEnd: a message sent with status_callback_url asks
// for its callback, naming the job by its key (<tenant>/<id>: an id is
// unique only within its tenant); the fake posts it, signed; the handler
// reports it with the job's tenant and id.
func TestTwilioCallbacksEndToEnd(t *testing.T) {
	t.Parallel()
	cs := newCallbackSetup(t)
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	p, _, _ := cs.reg.Get("sms.tw")
	m := smsMessage()
	m.ID, m.Tenant, m.Key = "job 42&x", "acme", "acme/job 42&x"
	if err := p.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	quiet, _, _ := cs.reg.Get("tw-quiet")
	if err := quiet.Send(context.Background(), smsMessage()); err != nil {
		t.Fatal(err)
	}
	msgs := cs.fake.Messages()
	if want := cs.base + "?provider=sms.tw&job=acme%2Fjob+42%26x"; msgs[0].StatusCallback != want || msgs[1].StatusCallback != "" {
		t.Fatalf("StatusCallback %q and %q, want %q and none", msgs[0].StatusCallback, msgs[1].StatusCallback, want)
	}
	if n, err := cs.fake.Deliver("sent", 0); n != 1 || err != nil {
		t.Fatalf("Deliver(sent) = %d, %v", n, err)
	}
	if err := cs.fake.DeliverMessage(msgs[0].SID, "undelivered", 30003); err != nil {
		t.Fatalf("DeliverMessage(undelivered): %v", err)
	}
	got := cs.got()
	want := []providers.DeliveryReport{
		{Provider: "sms.tw", Tenant: "acme", JobID: "job 42&x", Status: "sent", MessageSID: msgs[0].SID},
		{Provider: "sms.tw", Tenant: "acme", JobID: "job 42&x", Status: "undelivered", ErrorCode: 30003, MessageSID: msgs[0].SID,
			Detail: "Twilio error 30003: Unreachable destination handset"},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("reports\n %+v\nwant\n %+v", got, want)
	}
	for _, r := range got {
		if strings.Contains(r.Detail, "7700900") {
			t.Errorf("report %+v carries the recipient", r)
		}
	}
	// The handler's failure is Twilio's to retry: the fake sees a 500.
	cs.mu.Lock()
	cs.failNext = true
	cs.mu.Unlock()
	if _, err := cs.fake.Deliver("delivered", 0); err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("Deliver with the report failing: %v, want a 500", err)
	}
}

// TestTwilioCallbacksRefuse: only signed callbacks of a twilio provider
// with a callback URL are reported.
func TestTwilioCallbacksRefuse(t *testing.T) {
	t.Parallel()
	cs := newCallbackSetup(t)
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	token := cs.fake.AuthToken()
	form := url.Values{"MessageSid": {"SM1"}, "MessageStatus": {"delivered"}, "To": {"+447700900123"}, "AccountSid": {cs.fake.AccountSID()}}
	const query = "provider=sms.tw&job=j-1"
	cases := []struct {
		name   string
		method string
		query  string
		form   url.Values
		token  string
		want   int
	}{
		{"GET", http.MethodGet, query, form, token, http.StatusMethodNotAllowed},
		{"no signature", http.MethodPost, query, form, "", http.StatusForbidden},
		{"signed with another token", http.MethodPost, query, form, "0123456789abcdef0123456789abcdef", http.StatusForbidden},
		{"unknown provider", http.MethodPost, "provider=nope&job=j-1", form, token, http.StatusNotFound},
		{"not twilio", http.MethodPost, "provider=hook&job=j-1", form, token, http.StatusNotFound},
		{"twilio without a callback url", http.MethodPost, "provider=tw-quiet&job=j-1", form, token, http.StatusNotFound},
		{"no job", http.MethodPost, "provider=sms.tw", form, token, http.StatusBadRequest},
		{"a job naming no tenant", http.MethodPost, "provider=sms.tw&job=not+a+tenant%2Fj-1", form, token, http.StatusBadRequest},
		{"a tenant's job without its id", http.MethodPost, "provider=sms.tw&job=acme%2F", form, token, http.StatusBadRequest},
		{"no status", http.MethodPost, query, url.Values{"MessageSid": {"SM1"}}, token, http.StatusBadRequest},
		{"odd status", http.MethodPost, query, url.Values{"MessageStatus": {"Delivered\n"}}, token, http.StatusBadRequest},
		{"odd error code", http.MethodPost, query, url.Values{"MessageStatus": {"failed"}, "ErrorCode": {"30x"}}, token, http.StatusBadRequest},
		{"valid", http.MethodPost, query, form, token, http.StatusNoContent},
	}
	for _, c := range cases {
		if got := cs.post(t, c.method, c.query, c.form, c.token); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	// Tampering after signing: a parameter, the query.
	full := cs.base + "?" + query
	sig := testenv.TwilioSignature(token, full, form)
	for name, req := range map[string]struct {
		url  string
		form url.Values
	}{
		"a parameter changed": {full, url.Values{"MessageSid": {"SM1"}, "MessageStatus": {"failed"}, "To": {"+447700900123"},
			"AccountSid": {cs.fake.AccountSID()}}},
		"a parameter added": {full, url.Values{"MessageSid": {"SM1"}, "MessageStatus": {"delivered"}, "To": {"+447700900123"},
			"AccountSid": {cs.fake.AccountSID()}, "ErrorCode": {"30007"}}},
		"the job changed": {cs.base + "?provider=sms.tw&job=j-2", form},
	} {
		r, _ := http.NewRequest(http.MethodPost, req.url, strings.NewReader(req.form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("X-Twilio-Signature", sig)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, resp.StatusCode)
		}
	}
	if got := cs.got(); len(got) != 1 || got[0].JobID != "j-1" || got[0].Status != "delivered" || got[0].ErrorCode != 0 || got[0].Detail != "" {
		t.Errorf("reports %+v, want the valid one only", got)
	}
}

func TestTwilioErrorDetail(t *testing.T) {
	t.Parallel()
	for code, want := range map[int]string{
		30003: "Twilio error 30003: Unreachable destination handset",
		30007: "Twilio error 30007: Message filtered (carrier violation)",
		30036: "Twilio error 30036: Validity period expired",
		39999: "Twilio error 39999",
	} {
		if got := providers.TwilioErrorDetail(code); got != want {
			t.Errorf("TwilioErrorDetail(%d) = %q, want %q", code, got, want)
		}
	}
}

// TestTwilioStatusCallbackConfig: the url is absolute http(s), without a
// query, fragment, user or underscore in its host.
func TestTwilioStatusCallbackConfig(t *testing.T) {
	t.Parallel()
	base := providers.Config{Name: "tw", Channel: "sms", Kind: "twilio", Rate: 1, AccountSID: "AC1", From: "+15005550006", CredentialsEnv: "T"}
	for raw, want := range map[string]string{
		"https://hooks.example.com/twilio/status":                "",
		"http://10.0.0.1:8080/cb":                                "",
		"/twilio/status":                                         "must be an absolute http(s) URL",
		"ftp://hooks.example.com/s":                              "must be an absolute http(s) URL",
		"https://hooks.example.com/s?x=1":                        "must not have a query string",
		"https://hooks.example.com/s?":                           "must not have a query string",
		"https://hooks.example.com/s#top":                        "must not have a fragment",
		"https://u:p@hooks.example.com/s":                        "must not carry a user or password",
		"https://my_hooks.example.com/s":                         "must not have an underscore",
		"https://hooks.example.com/" + strings.Repeat("a", 2000): "must be at most 2000 characters",
	} {
		c := base
		c.StatusCallbackURL = raw
		err := c.Validate()
		switch {
		case want == "" && err != nil:
			t.Errorf("%.60s: %v, want valid", raw, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), "status_callback_url: "+want)):
			t.Errorf("%.60s: %v, want %q", raw, err, want)
		}
	}
	hook := validWebhook()
	hook.StatusCallbackURL = "https://hooks.example.com/s"
	if err := hook.Validate(); err == nil || !strings.Contains(err.Error(), "status_callback_url: not used by kind webhook (used by twilio)") {
		t.Errorf("on a webhook: %v", err)
	}
}
