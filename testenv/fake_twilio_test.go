package testenv_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/testenv"
)

// twilioPost sends one Messages.json request.
func twilioPost(t *testing.T, base, sid, user, pass, contentType string, form url.Values) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/2010-04-01/Accounts/"+sid+"/Messages.json", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("status %d body %q is not JSON", resp.StatusCode, b)
	}
	return resp.StatusCode, resp.Header, body
}

func TestFakeTwilioChecksWhatTwilioChecks(t *testing.T) {
	t.Parallel()
	f := testenv.FakeTwilio(t)
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	sid, token := f.AccountSID(), f.AuthToken()
	const form = "application/x-www-form-urlencoded"
	ok := url.Values{"To": {"+447700900123"}, "From": {"+15005550006"}, "Body": {"hi"}}
	with := func(k, v string) url.Values {
		u := url.Values{}
		for key, vs := range ok {
			u[key] = vs
		}
		if v == "" {
			u.Del(k)
		} else {
			u.Set(k, v)
		}
		return u
	}
	cases := []struct {
		name              string
		sid, user, pass   string
		contentType       string
		form              url.Values
		wantStatus, wants int
	}{
		{"no auth", sid, "", "", form, ok, 401, 20003},
		{"wrong token", sid, sid, "nope", form, ok, 401, 20003},
		{"user is not the path's account", sid, "AC" + strings.Repeat("0", 32), token, form, ok, 401, 20003},
		{"json body", sid, sid, token, "application/json", ok, 400, 20001},
		{"no To", sid, sid, token, form, with("To", ""), 400, 21604},
		{"To not E.164", sid, sid, token, form, with("To", "07700900123"), 400, 21211},
		{"no From", sid, sid, token, form, with("From", ""), 400, 21603},
		{"bad service", sid, sid, token, form, url.Values{"To": {"+447700900123"}, "MessagingServiceSid": {"MGnope"}, "Body": {"x"}}, 400, 21701},
		{"no Body", sid, sid, token, form, with("Body", ""), 400, 21602},
		{"Body too long", sid, sid, token, form, with("Body", strings.Repeat("é", 1601)), 400, 21617},
		{"From a 4-digit number", sid, sid, token, form, with("From", "1234"), 400, 21212},
		{"From digits only", sid, sid, token, form, with("From", "12345678"), 400, 21212},
		{"From sender id too long", sid, sid, token, form, with("From", "NotifierApp1"), 400, 21212},
		{"From sender id with a dot", sid, sid, token, form, with("From", "Notif.App"), 400, 21212},
		{"ValidityPeriod 0", sid, sid, token, form, with("ValidityPeriod", "0"), 400, 21624},
		{"ValidityPeriod over 10 h", sid, sid, token, form, with("ValidityPeriod", "36001"), 400, 21624},
		{"ValidityPeriod not a number", sid, sid, token, form, with("ValidityPeriod", "1h"), 400, 21624},
		{"StatusCallback relative", sid, sid, token, form, with("StatusCallback", "/twilio/status"), 400, 21609},
		{"StatusCallback ftp", sid, sid, token, form, with("StatusCallback", "ftp://example.com/s"), 400, 21609},
	}
	for _, c := range cases {
		status, _, body := twilioPost(t, f.URL(), c.sid, c.user, c.pass, c.contentType, c.form)
		if status != c.wantStatus || body["code"] != float64(c.wants) || body["status"] != float64(c.wantStatus) ||
			body["more_info"] != fmt.Sprintf("https://www.twilio.com/docs/errors/%d", c.wants) {
			t.Errorf("%s: %d %v, want %d with code %d", c.name, status, body, c.wantStatus, c.wants)
		}
	}
	status, _, body := twilioPost(t, f.URL(), sid, sid, token, form, ok)
	if status != 201 || body["status"] != "queued" || !strings.HasPrefix(body["sid"].(string), "SM") || body["to"] != "+447700900123" {
		t.Fatalf("valid message: %d %v", status, body)
	}
	service := url.Values{"To": {"+447700900123"}, "MessagingServiceSid": {"MG" + strings.Repeat("ab", 16)}, "Body": {"x"}}
	if status, _, body := twilioPost(t, f.URL(), sid, sid, token, form, service); status != 201 || body["from"] != nil {
		t.Fatalf("through a Messaging Service: %d %v", status, body)
	}
	f.RefuseNumber("+447700900999", 21610)
	if status, _, body := twilioPost(t, f.URL(), sid, sid, token, form, with("To", "+447700900999")); status != 400 || body["code"] != float64(21610) {
		t.Errorf("refused number: %d %v", status, body)
	}
	// Every sender Twilio takes, an expiry and a status callback.
	for _, from := range []string{"12345", "123456", "Notifier", "My Shop+1", "A-B_C&D", "x"} {
		if status, _, body := twilioPost(t, f.URL(), sid, sid, token, form, with("From", from)); status != 201 {
			t.Errorf("From %q: %d %v, want 201", from, status, body)
		}
	}
	extra := with("ValidityPeriod", "300")
	extra.Set("StatusCallback", "https://hooks.example.com/twilio?provider=sms&job=j-1")
	if status, _, body := twilioPost(t, f.URL(), sid, sid, token, form, extra); status != 201 {
		t.Fatalf("with ValidityPeriod and StatusCallback: %d %v", status, body)
	}
	msgs := f.Messages()
	if len(msgs) != 9 || msgs[0].From != "+15005550006" || msgs[1].MessagingServiceSID == "" || msgs[0].Body != "hi" ||
		msgs[0].ValidityPeriod != 0 || msgs[0].StatusCallback != "" {
		t.Errorf("messages %+v", msgs)
	}
	if last := msgs[8]; last.ValidityPeriod != 300 || last.StatusCallback != "https://hooks.example.com/twilio?provider=sms&job=j-1" {
		t.Errorf("ValidityPeriod %d, StatusCallback %q recorded", last.ValidityPeriod, last.StatusCallback)
	}
	if n := f.Count(201); n != 9 || len(f.Requests()) != len(cases)+10 {
		t.Errorf("Count(201) = %d, requests %d", n, len(f.Requests()))
	}
}

func TestFakeTwilioFaultsAndContract(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	f := testenv.FakeTwilio(t, testenv.WithContract(2), testenv.WithClock(clk.Now))
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	const form = "application/x-www-form-urlencoded"
	send := func() (int, http.Header, map[string]any) {
		return twilioPost(t, f.URL(), f.AccountSID(), f.AccountSID(), f.AuthToken(), form,
			url.Values{"To": {"+447700900123"}, "From": {"+15005550006"}, "Body": {"hi"}})
	}
	f.FailNext(1, 500)
	if status, _, body := send(); status != 500 || body["code"] != float64(20500) {
		t.Errorf("injected 500: %d %v", status, body)
	}
	date := clk.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)
	f.RateLimitFor(time.Second, date)
	if status, h, body := send(); status != 429 || body["code"] != float64(20429) || h.Get("Retry-After") != date {
		t.Errorf("rate limited: %d %v %v", status, h, body)
	}
	clk.Advance(time.Second)
	for range 2 {
		if status, _, _ := send(); status != 201 {
			t.Fatalf("within the contract: %d", status)
		}
	}
	if status, h, body := send(); status != 429 || body["code"] != float64(20429) || h.Get("Retry-After") != "1" {
		t.Errorf("over the contract: %d %v %v", status, h, body)
	}
	if got := f.MaxInWindow(time.Second); got != 2 {
		t.Errorf("MaxInWindow = %d", got)
	}
	// The arrivals count the refused third too (and the 500 and 429 a
	// second before it); MaxInWindow, accepted only, cannot.
	if got := f.MaxArrivalsInWindow(time.Second, 0); got != 3 {
		t.Errorf("MaxArrivalsInWindow = %d, want 3", got)
	}
	if got := len(f.Arrivals()); got != 5 {
		t.Errorf("%d arrivals, want 5", got)
	}
}

// TestTwilioSignature: Twilio's documented example signs as documented.
func TestTwilioSignature(t *testing.T) {
	t.Parallel()
	params := url.Values{"CallSid": {"CA1234567890ABCDE"}, "Caller": {"+14158675310"}, "Digits": {"1234"},
		"From": {"+14158675310"}, "To": {"+18005551212"}}
	if got := testenv.TwilioSignature("12345", "https://mycompany.com/myapp.php?foo=1&bar=2", params); got != "GvWf1cFY/Q7PnoempGyD5oXAezc=" {
		t.Errorf("signature %q, want Twilio's GvWf1cFY/Q7PnoempGyD5oXAezc=", got)
	}
}

// TestFakeTwilioDeliver: the status callbacks go to the URL each message
// gave, signed with the auth token, with Twilio's fields.
func TestFakeTwilioDeliver(t *testing.T) {
	t.Parallel()
	f := testenv.FakeTwilio(t)
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	type callback struct {
		url  string
		sig  string
		form url.Values
	}
	got := make(chan callback, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		got <- callback{"http://" + r.Host + r.URL.String(), r.Header.Get("X-Twilio-Signature"), r.PostForm}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	const form = "application/x-www-form-urlencoded"
	cb := srv.URL + "/status?provider=sms&job=j-1"
	msg := url.Values{"To": {"+447700900123"}, "From": {"+15005550006"}, "Body": {"hi"}, "StatusCallback": {cb}}
	if status, _, body := twilioPost(t, f.URL(), f.AccountSID(), f.AccountSID(), f.AuthToken(), form, msg); status != 201 {
		t.Fatalf("send: %d %v", status, body)
	}
	msg.Del("StatusCallback")
	if status, _, _ := twilioPost(t, f.URL(), f.AccountSID(), f.AccountSID(), f.AuthToken(), form, msg); status != 201 {
		t.Fatal("send without callback")
	}
	if n, err := f.Deliver("undelivered", 30003); n != 1 || err != nil {
		t.Fatalf("Deliver = %d, %v", n, err)
	}
	c := <-got
	if c.url != cb || c.sig != testenv.TwilioSignature(f.AuthToken(), cb, c.form) {
		t.Errorf("callback to %s signed %q", c.url, c.sig)
	}
	sid := f.Messages()[0].SID
	if c.form.Get("MessageSid") != sid || c.form.Get("MessageStatus") != "undelivered" || c.form.Get("ErrorCode") != "30003" ||
		c.form.Get("AccountSid") != f.AccountSID() || c.form.Get("To") != "+447700900123" {
		t.Errorf("callback form %v", c.form)
	}
	if err := f.DeliverMessage(sid, "delivered", 0); err != nil {
		t.Fatal(err)
	}
	if c := <-got; c.form.Get("MessageStatus") != "delivered" || c.form.Has("ErrorCode") {
		t.Errorf("second callback form %v", c.form)
	}
	if err := f.DeliverMessage(f.Messages()[1].SID, "sent", 0); err == nil {
		t.Error("DeliverMessage of a message without a callback: nil error")
	}
	if err := f.DeliverMessage("SMnope", "sent", 0); err == nil {
		t.Error("DeliverMessage of an unknown message: nil error")
	}
}
