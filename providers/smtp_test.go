package providers_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/providers/providertest"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

const smtpPassword = "smtp-pa55word-value"

func emailMessage() *providers.Message {
	return &providers.Message{Job: queue.Job{ID: "job-42", UserID: "user-7", Channel: "email", To: "someone@example.org",
		Title: "Your code", Body: "Your code is 493817"}}
}

// serverTLS is a server configuration with certs' server certificate and
// no client certificates.
func serverTLS(t *testing.T, certs *testenv.Certs) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(certs.ServerCertFile, certs.ServerKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
}

func newSMTP(t *testing.T, cfg providers.Config, password string) *providers.SMTP {
	t.Helper()
	cfg.Name, cfg.Channel, cfg.Kind, cfg.Rate = "mail", "email", "smtp", 10
	if cfg.From == "" {
		cfg.From = "Notifier <no-reply@example.com>"
	}
	if cfg.Username != "" {
		cfg.PasswordEnv = "SMTP_PASSWORD"
	}
	p, err := providers.NewSMTP(cfg, providers.Options{Getenv: env(map[string]string{"SMTP_PASSWORD": password})})
	if err != nil {
		t.Fatalf("NewSMTP: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestSMTPConformance(t *testing.T) {
	t.Parallel()
	certs := testenv.NewCerts(t)
	providertest.RunSMTP(t, providertest.SMTPTarget{
		New: func(t *testing.T, addr string, timeout time.Duration) providers.Provider {
			host, port := splitHostPort(t, addr)
			return newSMTP(t, providers.Config{Host: host, Port: port, Timeout: timeout, TLSCAFile: certs.CAFile,
				Username: "notifier"}, smtpPassword)
		},
		Message:   emailMessage,
		ServerTLS: serverTLS(t, certs),
		Secrets:   []string{smtpPassword},
	})
}

func splitHostPort(t *testing.T, addr string) (string, int) {
	t.Helper()
	i := strings.LastIndexByte(addr, ':')
	var port int
	if _, err := fmt.Sscan(addr[i+1:], &port); err != nil {
		t.Fatalf("port of %q: %v", addr, err)
	}
	return addr[:i], port
}

// smtpAgainst builds an smtp provider for fake.
func smtpAgainst(t *testing.T, fake *testenv.SMTPFake, timeout time.Duration) *providers.SMTP {
	t.Helper()
	return newSMTP(t, providers.Config{Host: fake.Host(), Port: fake.Port(), Timeout: timeout, TLSCAFile: fake.CAFile(),
		Username: fake.Username()}, fake.Password())
}

func TestSMTPWireFormat(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeSMTP(t)
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600))
	p, err := providers.NewSMTP(providers.Config{Name: "mail", Channel: "email", Kind: "smtp", Rate: 1,
		Host: fake.Host(), Port: fake.Port(), TLSCAFile: fake.CAFile(), From: "Ünïcode Sender <no-reply@example.com>",
		Username: fake.Username(), PasswordEnv: "PW"},
		providers.Options{Getenv: env(map[string]string{"PW": fake.Password()}), Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })

	long := strings.Repeat("word ", 300) // one 1,500-character line
	cases := []struct {
		name string
		m    *providers.Message
	}{
		{"plain", &providers.Message{Job: queue.Job{ID: "job-1", Channel: "email", To: "alice@example.org", Title: "Your code", Body: "Your code is 493817"}}},
		{"unicode", &providers.Message{Job: queue.Job{ID: "job:2.b", Channel: "email", To: "Bob Müller <bob@example.org>",
			Title: "Grüße aus Köln 🎉 — a title long enough to need more than one encoded-word, surely", Body: "Ünïcödé body 🎉\nsecond line"}}},
		{"dots and long lines", &providers.Message{Job: queue.Job{ID: "job-3", Channel: "email", To: "carol@example.org",
			Title: "", Body: ".\n..leading dots\n.\n" + long}}},
		{"header injection", &providers.Message{Job: queue.Job{ID: "job-4", Channel: "email", To: "dave@example.org",
			Title: "hi\r\nBcc: victim@example.org", Body: "x"}}},
	}
	for _, c := range cases {
		if err := p.Send(context.Background(), c.m); err != nil {
			t.Fatalf("%s: Send: %v", c.name, err)
		}
	}
	got := fake.Messages()
	if len(got) != len(cases) {
		t.Fatalf("fake accepted %d mails, want %d", len(got), len(cases))
	}
	for i, c := range cases {
		m := got[i]
		if m.From != "no-reply@example.com" || len(m.To) != 1 || m.User != fake.Username() {
			t.Errorf("%s: envelope from %q to %v user %q", c.name, m.From, m.To, m.User)
		}
		if m.Subject != c.m.Title {
			t.Errorf("%s: subject decodes to %q, want %q", c.name, m.Subject, c.m.Title)
		}
		if want := strings.ReplaceAll(c.m.Body, "\n", "\r\n"); strings.TrimRight(m.Body, "\r\n") != want {
			t.Errorf("%s: body decodes to %q, want %q", c.name, m.Body, want)
		}
		if want := providers.SMTPMessageID(c.m.ID, "example.com"); m.MessageID != want {
			t.Errorf("%s: Message-ID %q, want %q", c.name, m.MessageID, want)
		}
		for header, want := range map[string]string{
			"Date": "Wed, 02 Jan 2030 03:04:05 +0100", "MIME-Version": "1.0", "Content-Type": "text/plain; charset=UTF-8",
			"Content-Transfer-Encoding": "quoted-printable", "Auto-Submitted": "auto-generated",
		} {
			if got := m.Header.Get(header); got != want {
				t.Errorf("%s: %s = %q, want %q", c.name, header, got, want)
			}
		}
		if m.Header.Get("Bcc") != "" {
			t.Errorf("%s: a Bcc header was injected", c.name)
		}
		from, err := m.Header.AddressList("From")
		if err != nil || len(from) != 1 || from[0].Name != "Ünïcode Sender" {
			t.Errorf("%s: From %q parses to %v, %v", c.name, m.Header.Get("From"), from, err)
		}
		for _, line := range strings.Split(string(m.Data), "\r\n") {
			if len(line) > 78 && !strings.HasPrefix(line, "From:") {
				t.Errorf("%s: a %d-character line: %.60q…", c.name, len(line), line)
				break
			}
			for _, b := range []byte(line) {
				if b >= 0x80 {
					t.Errorf("%s: an 8-bit byte in line %q", c.name, line)
					break
				}
			}
		}
	}
	if want := "<job=3A2=2Eb@example.com>"; got[1].MessageID != want {
		t.Errorf("Message-ID of job:2.b = %q, want %q", got[1].MessageID, want)
	}
	if to := got[1].Header.Get("To"); !strings.Contains(to, "bob@example.org") || !strings.Contains(to, "=?") {
		t.Errorf("To header %q: want the address with its name encoded", to)
	}
}

// TestSMTPReusesSessions: sequential mails share one session; a refused
// recipient resets the transaction and keeps it; a session the server
// dropped while idle is replaced without failing the mail.
func TestSMTPReusesSessions(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeSMTP(t)
	p := smtpAgainst(t, fake, 5*time.Second)
	ctx := context.Background()
	send := func(to string) error {
		m := emailMessage()
		m.To = to
		return p.Send(ctx, m)
	}
	for i := range 10 {
		if err := send(fmt.Sprintf("user%d@example.org", i)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if n := fake.Connections(); n != 1 {
		t.Fatalf("10 sequential mails used %d connections, want 1", n)
	}

	fake.Reject("gone@example.org", 550)
	err := send("gone@example.org")
	var pe *providers.Error
	if !errors.Is(err, providers.ErrPermanent) || !errors.As(err, &pe) || pe.Status != 550 || !strings.Contains(err.Error(), "rcpt: SMTP 550 5.1.1") {
		t.Fatalf("refused recipient: %v, want permanent rcpt 550", err)
	}
	if strings.Contains(err.Error(), "gone@example.org") {
		t.Errorf("error %q names the recipient", err)
	}
	fake.Reject("busy@example.org", 450)
	if err := send("busy@example.org"); !errors.Is(err, providers.ErrTransient) || !strings.Contains(err.Error(), "450") {
		t.Fatalf("busy mailbox: %v, want transient 450", err)
	}
	if err := send("next@example.org"); err != nil {
		t.Fatalf("after refusals: %v", err)
	}
	if n := fake.Connections(); n != 1 {
		t.Fatalf("refusals cost a session: %d connections, want 1", n)
	}

	fake.DropConnections()
	if err := send("after-drop@example.org"); err != nil {
		t.Fatalf("send after the server dropped the idle session: %v", err)
	}
	if n := fake.Connections(); n != 2 {
		t.Errorf("%d connections after a drop, want 2", n)
	}
	if n := len(fake.Messages()); n != 12 {
		t.Errorf("%d mails accepted, want 12", n)
	}
}

func TestSMTPAgainstFakeFaults(t *testing.T) {
	t.Parallel()
	frozen := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	fake := testenv.FakeSMTP(t, testenv.WithContract(2), testenv.WithClock(func() time.Time { return frozen }))
	p := smtpAgainst(t, fake, 5*time.Second)
	ctx := context.Background()

	fake.FailNext(1, 451)
	if err := p.Send(ctx, emailMessage()); !errors.Is(err, providers.ErrTransient) || !strings.Contains(err.Error(), "451") {
		t.Errorf("injected 451: %v", err)
	}
	fake.FailNext(1, 554)
	if err := p.Send(ctx, emailMessage()); !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "554") {
		t.Errorf("injected 554: %v", err)
	}
	fake.HangFor(time.Hour)
	hung := smtpAgainst(t, fake, 300*time.Millisecond)
	if err := hung.Send(ctx, emailMessage()); !errors.Is(err, providers.ErrTransient) || !strings.Contains(err.Error(), "timeout") {
		t.Errorf("hung server: %v, want a transient timeout", err)
	}
	fake.Reset()
	for i := range 2 {
		if err := p.Send(ctx, emailMessage()); err != nil {
			t.Fatalf("send %d within the contract: %v", i, err)
		}
	}
	err := p.Send(ctx, emailMessage())
	if !errors.Is(err, providers.ErrTransient) || !strings.Contains(err.Error(), "451 4.7.1") {
		t.Errorf("over the contract: %v, want a transient 451 4.7.1", err)
	}
	if n := fake.MaxInWindow(time.Second); n != 2 {
		t.Errorf("MaxInWindow = %d, want 2", n)
	}
}

// TestSMTPAmbiguous: the server took the mail and the reply to the final
// dot never came: a transient, ambiguous failure, and the fake counts the
// mail as accepted. A failure before the dot is not ambiguous.
func TestSMTPAmbiguous(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeSMTP(t)
	p := smtpAgainst(t, fake, 2*time.Second)
	ctx := context.Background()
	fake.AcceptThenHang(time.Hour)
	err := p.Send(ctx, emailMessage())
	var pe *providers.Error
	if !errors.As(err, &pe) || !errors.Is(err, providers.ErrTransient) || !pe.Ambiguous || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("accepted, then no reply: %#v, want a transient ambiguous timeout", err)
	}
	if n := len(fake.Messages()); n != 1 || fake.Count(250) != 1 {
		t.Errorf("the fake accepted %d mails (Count(250) = %d), want 1", n, fake.Count(250))
	}
	fake.Reset()

	fake.Reject("nobody@example.org", 450)
	m := emailMessage()
	m.To = "nobody@example.org"
	if err := p.Send(ctx, m); !errors.As(err, &pe) || pe.Ambiguous {
		t.Errorf("refused at RCPT: %v, Ambiguous %v, want not ambiguous", err, pe.Ambiguous)
	}
	fake.Close()
	if err := p.Send(ctx, emailMessage()); !errors.As(err, &pe) || pe.Ambiguous {
		t.Errorf("server gone: %v, want not ambiguous", err)
	}
}

func TestSMTPRefusals(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeSMTP(t)
	ctx := context.Background()

	wrong := newSMTP(t, providers.Config{Host: fake.Host(), Port: fake.Port(), TLSCAFile: fake.CAFile(),
		Username: fake.Username()}, "not-the-password")
	// The sender is refused, not the mail: ErrSender, never ErrPermanent.
	err := wrong.Send(ctx, emailMessage())
	if !errors.Is(err, providers.ErrSender) || errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "auth: SMTP 535") ||
		strings.Contains(err.Error(), "not-the-password") {
		t.Errorf("wrong password: %v, want a sender auth 535 without the password", err)
	}

	// No username: the server requires AUTH before MAIL.
	anon := newSMTP(t, providers.Config{Host: fake.Host(), Port: fake.Port(), TLSCAFile: fake.CAFile()}, "")
	if err := anon.Send(ctx, emailMessage()); !errors.Is(err, providers.ErrSender) || !strings.Contains(err.Error(), "530") {
		t.Errorf("no AUTH: %v, want a sender 530", err)
	}

	// The server's certificate is not signed by a trusted CA: the same for
	// every mail until the server or tls_ca_file is fixed, so the sender is
	// refused (a pause), not each mail retried until it dies of
	// max_attempts.
	other := testenv.NewCerts(t)
	untrusted := newSMTP(t, providers.Config{Host: fake.Host(), Port: fake.Port(), TLSCAFile: other.CAFile,
		Username: fake.Username()}, fake.Password())
	err = untrusted.Send(ctx, emailMessage())
	if !errors.Is(err, providers.ErrSender) || errors.Is(err, providers.ErrTransient) || !strings.Contains(err.Error(), "certificate is not trusted") {
		t.Errorf("untrusted certificate: %v, want ErrSender naming the certificate", err)
	}

	ok := smtpAgainst(t, fake, 5*time.Second)
	for _, to := range []string{"not an address", "", "a@b.c\r\nRCPT TO:<x@y.z>"} {
		m := emailMessage()
		m.To = to
		if err := ok.Send(ctx, m); !errors.Is(err, providers.ErrPermanent) {
			t.Errorf("recipient %q: %v, want permanent", to, err)
		}
	}
	if err := ok.Send(ctx, nil); !errors.Is(err, providers.ErrPermanent) {
		t.Errorf("Send(nil): %v", err)
	}
	if n := len(fake.Messages()); n != 0 {
		t.Errorf("%d mails accepted, want 0", n)
	}
}

func TestNewSMTPErrors(t *testing.T) {
	t.Parallel()
	base := providers.Config{Name: "mail", Channel: "email", Kind: "smtp", Rate: 1, Host: "127.0.0.1", From: "a@example.com",
		Username: "u", PasswordEnv: "PW"}
	if _, err := providers.NewSMTP(base, providers.Options{Getenv: env(nil)}); err == nil || !strings.Contains(err.Error(), "PW is not set") {
		t.Errorf("missing password: %v", err)
	}
	missingCA := base
	missingCA.TLSCAFile = "/nonexistent/ca.pem"
	if _, err := providers.NewSMTP(missingCA, providers.Options{Getenv: env(map[string]string{"PW": "x"})}); err == nil ||
		!strings.Contains(err.Error(), "tls_ca_file") {
		t.Errorf("missing CA file: %v", err)
	}
	w := newSMTP(t, providers.Config{Host: "127.0.0.1", Port: 1, Username: "u"}, smtpPassword)
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(format, w); strings.Contains(s, smtpPassword) {
			t.Errorf("Sprintf(%q, smtp) prints the password: %s", format, s)
		}
	}
}

// TestSMTPUTF8Addresses: an internationalised address goes out with
// SMTPUTF8 when the server offers it.
func TestSMTPUTF8Addresses(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeSMTP(t) // offers SMTPUTF8
	p := smtpAgainst(t, fake, 5*time.Second)
	m := emailMessage()
	m.To = "jürgen@exämple.org"
	if err := p.Send(context.Background(), m); err != nil {
		t.Fatalf("Send to %q: %v", m.To, err)
	}
	if got := fake.Messages(); len(got) != 1 || got[0].To[0] != m.To {
		t.Fatalf("accepted %+v", got)
	}
}

// TestSMTPConfigurationFaultsAreTheSender: a submission server that does
// not offer STARTTLS, and one that refuses to relay at RCPT with 5.7.1 (RFC
// 3463: "Delivery not authorized, message refused"; Postfix's "Relay
// access denied" to a client that did not authenticate), refuse every mail
// the same way until the configuration changes: ErrSender (a pause), where
// before the first was transient until max_attempts and the second
// dead-lettered every mail.
func TestSMTPConfigurationFaultsAreTheSender(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	plain := testenv.FakeSMTP(t, testenv.WithoutSTARTTLS())
	p := newSMTP(t, providers.Config{Host: plain.Host(), Port: plain.Port(), TLSCAFile: plain.CAFile()}, "")
	err := p.Send(ctx, emailMessage())
	if !errors.Is(err, providers.ErrSender) || errors.Is(err, providers.ErrTransient) || !strings.Contains(err.Error(), "STARTTLS") {
		t.Errorf("no STARTTLS: %v, want ErrSender naming STARTTLS", err)
	}
	if n := len(plain.Messages()); n != 0 {
		t.Errorf("%d mails accepted in clear", n)
	}

	relay := testenv.FakeSMTP(t)
	relay.DenyRelay()
	anon := newSMTP(t, providers.Config{Host: relay.Host(), Port: relay.Port(), TLSCAFile: relay.CAFile()}, "")
	err = anon.Send(ctx, emailMessage())
	if !errors.Is(err, providers.ErrSender) || errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "rcpt: SMTP 554 5.7.1") {
		t.Errorf("relay denied: %v, want ErrSender at rcpt 554 5.7.1", err)
	}
	// The same server relays for a client that authenticates.
	if err := smtpAgainst(t, relay, 0).Send(ctx, emailMessage()); err != nil {
		t.Errorf("authenticated: %v", err)
	}
}
