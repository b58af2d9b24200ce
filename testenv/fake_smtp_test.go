package testenv_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/notifier/notifier/testenv"
)

const testMail = "From: a@example.com\r\nTo: b@example.org\r\nSubject: =?UTF-8?q?Gr=C3=BC=C3=9Fe?=\r\n" +
	"Date: Wed, 02 Jan 2030 03:04:05 +0000\r\nMessage-ID: <m1@example.com>\r\nMIME-Version: 1.0\r\n" +
	"Content-Type: text/plain; charset=UTF-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nH=C3=A9llo\r\n"

// smtpDial connects to the fake, upgrades with STARTTLS (trusting its CA)
// and, when pass is not "", authenticates.
func smtpDial(t *testing.T, f *testenv.SMTPFake, pass string) *smtp.Client {
	t.Helper()
	pem, err := os.ReadFile(f.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c, err := smtp.DialStartTLS(f.Addr(), &tls.Config{RootCAs: pool, ServerName: f.Host()})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if pass != "" {
		if err := c.Auth(sasl.NewPlainClient("", f.Username(), pass)); err != nil {
			t.Fatalf("auth: %v", err)
		}
	}
	return c
}

func smtpCode(err error) int {
	var se *smtp.SMTPError
	if errors.As(err, &se) {
		return se.Code
	}
	return 0
}

func TestFakeSMTPChecksWhatAServerChecks(t *testing.T) {
	t.Parallel()
	f := testenv.FakeSMTP(t)

	// No TLS: no AUTH offered, MAIL refused.
	plain, err := smtp.Dial(f.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plain.Close() })
	if err := plain.Hello("client"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := plain.Extension("AUTH"); ok {
		t.Error("AUTH offered before STARTTLS")
	}
	if ok, _ := plain.Extension("STARTTLS"); !ok {
		t.Error("STARTTLS not offered")
	}
	if err := plain.Mail("a@example.com", nil); smtpCode(err) != 530 {
		t.Errorf("MAIL in clear: %v, want 530", err)
	}

	// TLS without AUTH: MAIL refused; a wrong password refused.
	anon := smtpDial(t, f, "")
	if err := anon.Mail("a@example.com", nil); smtpCode(err) != 530 {
		t.Errorf("MAIL without AUTH: %v, want 530", err)
	}
	if err := anon.Auth(sasl.NewPlainClient("", f.Username(), "wrong")); smtpCode(err) != 535 {
		t.Errorf("wrong password: %v, want 535", err)
	}

	c := smtpDial(t, f, f.Password())
	if err := c.Mail("a@example.com", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Rcpt("no-at-sign", nil); smtpCode(err) != 501 {
		t.Errorf("bad recipient: %v, want 501", err)
	}
	f.Reject("gone@example.org", 550)
	if err := c.Rcpt("gone@example.org", nil); smtpCode(err) != 550 {
		t.Errorf("rejected recipient: %v, want 550", err)
	}
	for name, data := range map[string]string{
		"no Date":   strings.Replace(testMail, "Date: Wed, 02 Jan 2030 03:04:05 +0000\r\n", "", 1),
		"long line": testMail + strings.Repeat("x", 1000) + "\r\n",
		"bad id":    strings.Replace(testMail, "<m1@example.com>", "m1", 1),
	} {
		if err := c.SendMail("a@example.com", []string{"b@example.org"}, strings.NewReader(data)); smtpCode(err) != 554 {
			t.Errorf("%s: %v, want 554", name, err)
		}
	}
	if err := c.SendMail("a@example.com", []string{"b@example.org"}, strings.NewReader(testMail)); err != nil {
		t.Fatalf("valid mail: %v", err)
	}
	got := f.Messages()
	if len(got) != 1 {
		t.Fatalf("%d messages", len(got))
	}
	m := got[0]
	if m.From != "a@example.com" || len(m.To) != 1 || m.To[0] != "b@example.org" || m.Subject != "Grüße" ||
		m.Body != "Héllo\r\n" || m.MessageID != "<m1@example.com>" || m.User != f.Username() || m.Conn != 3 {
		t.Errorf("message %+v", m)
	}
	if n := f.Connections(); n != 3 {
		t.Errorf("Connections = %d, want 3", n)
	}
}

func TestFakeSMTPFaultsAndContract(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	f := testenv.FakeSMTP(t, testenv.WithContract(2), testenv.WithClock(clk.Now))
	c := smtpDial(t, f, f.Password())
	send := func() error {
		return c.SendMail("a@example.com", []string{"b@example.org"}, strings.NewReader(testMail))
	}
	f.FailNext(1, 451)
	if err := send(); smtpCode(err) != 451 {
		t.Errorf("injected 451: %v", err)
	}
	f.FailFor(time.Second, 554)
	if err := send(); smtpCode(err) != 554 {
		t.Errorf("injected 554: %v", err)
	}
	clk.Advance(time.Second)
	f.RateLimitFor(time.Second, "30")
	if err := send(); smtpCode(err) != 451 || !strings.Contains(err.Error(), "try again after 30") {
		t.Errorf("rate limited: %v", err)
	}
	clk.Advance(time.Second)
	for range 2 {
		if err := send(); err != nil {
			t.Fatalf("within the contract: %v", err)
		}
	}
	if err := send(); smtpCode(err) != 451 || !strings.Contains(err.Error(), "contract of 2") {
		t.Errorf("over the contract: %v", err)
	}
	if n := f.MaxInWindow(time.Second); n != 2 {
		t.Errorf("MaxInWindow = %d", n)
	}
	if n := f.MaxArrivalsInWindow(time.Second, 0); n != 3 {
		t.Errorf("MaxArrivalsInWindow = %d, want 3 (the refused third arrived)", n)
	}
	if n := len(f.Arrivals()); n != 6 {
		t.Errorf("%d arrivals, want 6", n)
	}
	if got := [4]int{f.Count(250), f.Count(451), f.Count(554), f.Count(0)}; got != [4]int{2, 3, 1, 0} {
		t.Errorf("Count(250, 451, 554, 0) = %v, want [2 3 1 0]", got)
	}

	// HangFor: no reply; the client's deadline ends the wait.
	f.Reset()
	f.HangFor(time.Hour)
	c.SubmissionTimeout = 200 * time.Millisecond
	start := time.Now()
	err := send()
	var ne interface{ Timeout() bool }
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("hung server: %v, want a timeout", err)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("answered after %s", took)
	}

	// AcceptThenHang: the mail is taken and recorded, the reply never
	// comes.
	f.Reset()
	clk.Advance(time.Second)
	f.AcceptThenHang(time.Hour)
	c3 := smtpDial(t, f, f.Password())
	c3.SubmissionTimeout = 200 * time.Millisecond
	if err := c3.SendMail("a@example.com", []string{"b@example.org"}, strings.NewReader(testMail)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("accepted, then held: %v, want a timeout", err)
	}
	if n, ok := len(f.Messages()), f.Count(250); n != 3 || ok != 3 {
		t.Errorf("%d messages, Count(250) = %d after AcceptThenHang, want 3 and 3", n, ok)
	}
	clk.Advance(time.Second)

	// DropConnections: the next command on the old session fails; a new
	// session works.
	f.Reset()
	c2 := smtpDial(t, f, f.Password())
	f.DropConnections()
	if err := c2.Noop(); err == nil {
		t.Error("a dropped session still answers")
	}
	clk.Advance(time.Second)
	if err := smtpDial(t, f, f.Password()).SendMail("a@example.com", []string{"b@example.org"}, strings.NewReader(testMail)); err != nil {
		t.Errorf("after the drop: %v", err)
	}
	if n := len(f.Messages()); n != 4 {
		t.Errorf("%d messages, want 4", n)
	}
}

// TestFakeSMTPConfigurationFaults: WithoutSTARTTLS offers no STARTTLS;
// DenyRelay takes MAIL from a client that did not authenticate and refuses
// its RCPT with 554 5.7.1, and not an authenticated one's.
func TestFakeSMTPConfigurationFaults(t *testing.T) {
	t.Parallel()
	plain := testenv.FakeSMTP(t, testenv.WithoutSTARTTLS())
	c, err := smtp.Dial(plain.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Hello("test"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := c.Extension("STARTTLS"); ok {
		t.Error("WithoutSTARTTLS offers STARTTLS")
	}
	_ = c.Close()

	f := testenv.FakeSMTP(t)
	f.DenyRelay()
	anon := smtpDial(t, f, "")
	if err := anon.Mail("no-reply@example.com", nil); err != nil {
		t.Fatalf("MAIL without AUTH: %v", err)
	}
	var se *smtp.SMTPError
	if err := anon.Rcpt("someone@example.org", nil); !errors.As(err, &se) || se.Code != 554 || se.EnhancedCode != (smtp.EnhancedCode{5, 7, 1}) {
		t.Errorf("RCPT without AUTH: %v, want 554 5.7.1", err)
	}
	authed := smtpDial(t, f, f.Password())
	if err := authed.Mail("no-reply@example.com", nil); err != nil {
		t.Fatal(err)
	}
	if err := authed.Rcpt("someone@example.org", nil); err != nil {
		t.Errorf("RCPT after AUTH: %v", err)
	}
}
