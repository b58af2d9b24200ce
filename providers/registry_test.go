package providers_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

func TestRegistry(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeProvider(t)
	var out bytes.Buffer
	cfgs := []providers.Config{
		{Name: "sms-gateway", Channel: "sms", Default: true, Kind: "webhook", URL: fake.URL(), Rate: 100,
			Unit: "segments", CredentialsEnv: "SMS_TOKEN"},
		{Name: "sms-backup", Channel: "sms", Kind: "webhook", URL: fake.URL(), Rate: 10},
		{Name: "dev-push", Channel: "push", Default: true, Kind: "log", Rate: 1000},
	}
	r, err := providers.NewRegistry(cfgs, providers.Options{
		Getenv: env(map[string]string{"SMS_TOKEN": "t0ken-value"}), Version: "9.9", Stdout: &out,
	})
	if err != nil {
		t.Fatalf("NewRegistry: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})

	p, cfg, ok := r.Default("sms")
	if !ok || p.Name() != "sms-gateway" || cfg.Name != "sms-gateway" || cfg.Unit != "segments" ||
		cfg.Timeout != providers.DefaultTimeout || cfg.MaxQueueDelay != providers.DefaultMaxQueueDelay {
		t.Fatalf("Default(sms) = %v %+v %v", p, cfg, ok)
	}
	if p, cfg, ok := r.Get("sms-backup"); !ok || p.Name() != "sms-backup" || cfg.Rate != 10 || cfg.Unit != "messages" {
		t.Errorf("Get(sms-backup) = %v %+v %v", p, cfg, ok)
	}
	if _, _, ok := r.Get("nope"); ok {
		t.Error("Get(nope) found a provider")
	}
	if _, _, ok := r.Default("email"); ok {
		t.Error("Default(email) found a provider with none configured")
	}
	all := r.All()
	if len(all) != 3 || all[0].Name != "sms-gateway" || all[1].Name != "sms-backup" || all[2].Name != "dev-push" {
		t.Fatalf("All() = %+v", all)
	}
	all[0].Name = "changed"
	if r.All()[0].Name != "sms-gateway" {
		t.Error("All() returned the registry's own slice")
	}

	if err := p.Send(context.Background(), smsMessage()); err != nil {
		t.Fatalf("send through the registry's webhook: %v", err)
	}
	got := fake.Accepted()[0].Header
	if got.Get("Authorization") != "Bearer t0ken-value" || got.Get("User-Agent") != "notifier/9.9" {
		t.Errorf("registry webhook headers: %v", got)
	}
	push, _, _ := r.Default("push")
	if err := push.Send(context.Background(), &providers.Message{Job: queue.Job{ID: "p1", Channel: "push", To: "tok-123456789"}}); err != nil {
		t.Fatalf("send through the registry's log provider: %v", err)
	}
	if !strings.Contains(out.String(), `"id":"p1"`) {
		t.Errorf("log provider wrote %q to Options.Stdout", out.String())
	}
}

func TestNewRegistryRefuses(t *testing.T) {
	t.Parallel()
	ok := providers.Config{Name: "sms", Channel: "sms", Default: true, Kind: "webhook", URL: "http://127.0.0.1:1/", Rate: 1}
	cases := []struct {
		name string
		cfgs []providers.Config
		want []string
	}{
		{"invalid entry, prefixed", []providers.Config{ok, {Name: "bad", Channel: "push", Default: true, Kind: "log", Rate: -1}},
			[]string{"providers[1] (bad).rate: must be a number of units per second from 1/86400 (one a day) to 1000000 (one a µs: the queue's interval is whole µs), got -1"}},
		{"cross-entry", []providers.Config{ok, ok}, []string{`providers[1] (sms).name: "sms" is already used by providers[0]`}},
		{"empty", nil, []string{"providers: at least one provider is required"}},
		{"secret not set", []providers.Config{{Name: "sms", Channel: "sms", Default: true, Kind: "webhook",
			URL: "http://127.0.0.1:1/", Rate: 1, CredentialsEnv: "NOT_SET_ANYWHERE"}},
			[]string{"providers[0] (sms): new webhook sms: credentials_env: environment variable NOT_SET_ANYWHERE is not set or empty"}},
		{"every kind's secrets and files, all at once", []providers.Config{
			{Name: "tw", Channel: "sms", Default: true, Kind: "twilio", Rate: 1, AccountSID: "AC", From: "+15005550006",
				CredentialsEnv: "TWILIO_UNSET"},
			{Name: "ios", Channel: "push", Default: true, Kind: "apns", Rate: 1, KeyFile: "/nonexistent/k.p8", KeyID: "k", TeamID: "t", Topic: "t"},
			{Name: "android", Channel: "push", Kind: "fcm", Rate: 1, ProjectID: "p", CredentialsFile: "/nonexistent/sa.json"},
			{Name: "mail", Channel: "email", Default: true, Kind: "smtp", Rate: 1, Host: "h", From: "a@b.c", Username: "u",
				PasswordEnv: "SMTP_UNSET"},
			{Name: "hook", Channel: "email", Kind: "webhook", Rate: 1, URL: "https://x", TLSCAFile: "/nonexistent/ca.pem"}}, []string{
			"providers[0] (tw): new twilio tw: credentials_env: environment variable TWILIO_UNSET is not set or empty",
			"providers[1] (ios): new apns ios: key_file: open /nonexistent/k.p8",
			"providers[2] (android): new fcm android: credentials_file: open /nonexistent/sa.json",
			"providers[3] (mail): new smtp mail: password_env: environment variable SMTP_UNSET is not set or empty",
			"providers[4] (hook): new webhook hook: tls_ca_file: open /nonexistent/ca.pem"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r, err := providers.NewRegistry(c.cfgs, providers.Options{Getenv: env(map[string]string{"FCM_TOKEN": "x", "T": "y"})})
			if err == nil {
				_ = r.Close()
				t.Fatal("NewRegistry accepted the configuration")
			}
			for _, want := range c.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q\ndoes not contain %q", err, want)
				}
			}
		})
	}
}

// TestRegistryBuildsEveryKind builds one provider of each kind against
// its fake, sends through each, and closes the registry: goleak (TestMain)
// then finds no HTTP/2 connection or SMTP session left behind.
func TestRegistryBuildsEveryKind(t *testing.T) {
	t.Parallel()
	hook := testenv.FakeProvider(t)
	tw := testenv.FakeTwilio(t)
	fcm := testenv.FakeFCM(t)
	fcmSA := testenv.FakeFCM(t)
	ios := testenv.FakeAPNs(t)
	mail := testenv.FakeSMTP(t)
	cfgs := []providers.Config{
		{Name: "hook", Channel: "sms", Kind: "webhook", URL: hook.URL(), Rate: 10},
		{Name: "tw", Channel: "sms", Default: true, Kind: "twilio", URL: tw.URL(), Rate: 10, Unit: "segments",
			AccountSID: tw.AccountSID(), From: "+15005550006", CredentialsEnv: "TWILIO_AUTH_TOKEN"},
		{Name: "android", Channel: "push", Default: true, Kind: "fcm", URL: fcm.URL(), Rate: 10, ProjectID: fcm.ProjectID(),
			CredentialsEnv: "FCM_TOKEN"},
		{Name: "android-sa", Channel: "push", Kind: "fcm", URL: fcmSA.URL(), Rate: 10, ProjectID: fcmSA.ProjectID(),
			CredentialsFile: fcmSA.ServiceAccountFile()},
		{Name: "ios", Channel: "push", Kind: "apns", URL: ios.URL(), TLSCAFile: ios.CAFile(), Rate: 10, KeyFile: ios.KeyFile(),
			KeyID: ios.KeyID(), TeamID: ios.TeamID(), Topic: ios.Topic()},
		{Name: "mail", Channel: "email", Default: true, Kind: "smtp", Host: mail.Host(), Port: mail.Port(), TLSCAFile: mail.CAFile(),
			Rate: 10, From: "no-reply@example.com", Username: mail.Username(), PasswordEnv: "SMTP_PASSWORD"},
	}
	r, err := providers.NewRegistry(cfgs, providers.Options{Getenv: env(map[string]string{
		"TWILIO_AUTH_TOKEN": tw.AuthToken(), "FCM_TOKEN": fcm.BearerToken(), "SMTP_PASSWORD": mail.Password()})})
	if err != nil {
		t.Fatalf("NewRegistry: %v", err)
	}
	messages := map[string]*providers.Message{"hook": smsMessage(), "tw": smsMessage(), "android": pushMessage(),
		"android-sa": pushMessage(), "ios": iosMessage(), "mail": emailMessage()}
	for _, c := range r.All() {
		p, _, _ := r.Get(c.Name)
		for range 3 {
			if err := p.Send(context.Background(), messages[c.Name]); err != nil {
				t.Errorf("%s (%s): Send: %v", c.Name, c.Kind, err)
			}
		}
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if got := []int{len(hook.Accepted()), len(tw.Messages()), len(fcm.Messages()), len(fcmSA.Messages()), len(ios.Notifications()),
		len(mail.Messages())}; fmt.Sprint(got) != "[3 3 3 3 3 3]" {
		t.Errorf("accepted per kind %v, want 3 each", got)
	}
	if n := mail.Connections(); n != 1 {
		t.Errorf("smtp used %d connections for 3 mails", n)
	}
}

func TestRegistryNeverPrintsSecrets(t *testing.T) {
	t.Parallel()
	const secret = "sup3r-secret-value"
	cfgs := []providers.Config{{Name: "sms", Channel: "sms", Default: true, Kind: "webhook", URL: "http://127.0.0.1:1/",
		Rate: 1, CredentialsEnv: "TOKEN"}, {Name: "x", Channel: "push", Kind: "log", Rate: -1}}
	_, err := providers.NewRegistry(cfgs, providers.Options{Getenv: env(map[string]string{"TOKEN": secret})})
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("error %v: want an error without the secret", err)
	}
}

func TestLogProvider(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	l, err := providers.NewLog(providers.Config{Name: "dev", Channel: "sms", Kind: "log", Rate: 1},
		providers.Options{Stdout: &out, Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	m := smsMessage()
	m.Title = "secret title"
	m.Data = map[string]string{"b": "value-b", "a": "value-a"}
	if err := l.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	want := `{"time":"2030-01-02T03:04:05Z","provider":"dev","id":"job-42","user_id":"user-7","channel":"sms",` +
		`"to":"+4477•••••23","body_chars":19,"segments":1,"has_title":true,"data_keys":["a","b"]}` + "\n"
	if out.String() != want {
		t.Errorf("log line\n %s\nwant\n %s", out.String(), want)
	}
	for _, leak := range []string{m.To, m.Body, m.Title, "value-a"} {
		if strings.Contains(out.String(), leak) {
			t.Errorf("log line leaks %q", leak)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Send(ctx, m); !errors.Is(err, providers.ErrTransient) || !errors.Is(err, context.Canceled) {
		t.Errorf("Send with a canceled context: %v", err)
	}
	if err := l.Send(context.Background(), nil); !errors.Is(err, providers.ErrPermanent) {
		t.Errorf("Send(nil): %v", err)
	}
	failing, _ := providers.NewLog(providers.Config{Name: "dev", Channel: "sms", Kind: "log", Rate: 1},
		providers.Options{Stdout: failWriter{}})
	if err := failing.Send(context.Background(), m); !errors.Is(err, providers.ErrTransient) {
		t.Errorf("Send to a failing writer: %v", err)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestLogProviderConcurrentLinesStayWhole(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	l, err := providers.NewLog(providers.Config{Name: "dev", Channel: "email", Kind: "log", Rate: 1},
		providers.Options{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	const n = 50
	for range n {
		go func() {
			done <- l.Send(context.Background(), &providers.Message{Job: queue.Job{ID: "e", Channel: "email", To: "bob@example.com", Body: strings.Repeat("x", 500)}})
		}()
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("%d lines, want %d", len(lines), n)
	}
	for _, line := range lines {
		if !strings.HasPrefix(line, "{") || !strings.HasSuffix(line, "}") || !strings.Contains(line, `"to":"b•••@example.com"`) {
			t.Fatalf("torn or leaking line %q", line)
		}
	}
}

func TestStatusClass(t *testing.T) {
	t.Parallel()
	cases := map[error]string{
		nil: "2xx",
		&providers.Error{Class: providers.ErrPermanent, Status: 404}:  "4xx",
		&providers.Error{Class: providers.ErrTransient, Status: 503}:  "5xx",
		&providers.Error{Class: providers.ErrTransient}:               "error",
		&providers.RateLimitedError{Status: 429}:                      "4xx",
		errors.New("something else"):                                  "error",
		&providers.Error{Class: providers.ErrTransient, Status: 302}:  "3xx",
		&providers.Error{Class: providers.ErrTransient, Status: 1000}: "error",
	}
	for err, want := range cases {
		if got := providers.StatusClass(err); got != want {
			t.Errorf("StatusClass(%v) = %q, want %q", err, got, want)
		}
	}
}
