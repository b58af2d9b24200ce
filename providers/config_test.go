package providers_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
)

func validWebhook() providers.Config {
	return providers.Config{Name: "sms-gateway", Channel: "sms", Default: true, Kind: "webhook",
		URL: "http://127.0.0.1:8080/send", Rate: 100}
}

func TestWithDefaults(t *testing.T) {
	t.Parallel()
	c := validWebhook().WithDefaults()
	if c.Unit != "messages" || c.MaxQueueDelay != 5*time.Second || c.Timeout != 5*time.Second || c.MaxPause != 5*time.Minute {
		t.Errorf("webhook defaults: unit %q max_queue_delay %s timeout %s max_pause %s", c.Unit, c.MaxQueueDelay, c.Timeout, c.MaxPause)
	}
	kept := providers.Config{Kind: "webhook", Unit: "segments", MaxQueueDelay: -time.Second, Timeout: time.Minute}.WithDefaults()
	if kept.Unit != "segments" || kept.MaxQueueDelay != -time.Second || kept.Timeout != time.Minute {
		t.Errorf("WithDefaults changed set values: %+v", kept)
	}
	for kind, want := range map[string]string{"twilio": "https://api.twilio.com", "fcm": "https://fcm.googleapis.com",
		"apns": "https://api.push.apple.com", "webhook": "", "log": ""} {
		if got := (providers.Config{Kind: kind}).WithDefaults().URL; got != want {
			t.Errorf("kind %s default url %q, want %q", kind, got, want)
		}
	}
	a := providers.Config{Kind: "apns"}.WithDefaults()
	if a.PushType != "alert" || a.Priority != 10 {
		t.Errorf("apns defaults: push_type %q priority %d", a.PushType, a.Priority)
	}
	if s := (providers.Config{Kind: "smtp"}).WithDefaults(); s.Port != 587 {
		t.Errorf("smtp default port %d", s.Port)
	}
}

// rateRange is the start of the problem of a rate out of its range.
const rateRange = "rate: must be a number of units per second from 1/86400 (one a day) to 1000000 (one a µs: the queue's interval is whole µs), got "

func TestValidate(t *testing.T) {
	t.Parallel()
	with := func(f func(*providers.Config)) providers.Config {
		c := validWebhook()
		f(&c)
		return c
	}
	cases := []struct {
		name string
		cfg  providers.Config
		want []string // every message expected, in order; nil = valid
	}{
		{"valid webhook", validWebhook(), nil},
		{"valid with everything set", with(func(c *providers.Config) {
			c.Unit, c.MaxQueueDelay, c.Timeout, c.CredentialsEnv = "segments", time.Second, time.Second, "SMS_TOKEN"
		}), nil},
		{"valid log", providers.Config{Name: "dev", Channel: "email", Kind: "log", Rate: 1}, nil},
		{"valid twilio", providers.Config{Name: "tw", Channel: "sms", Kind: "twilio", Rate: 1, AccountSID: "AC1",
			From: "+15005550006", CredentialsEnv: "TWILIO_AUTH_TOKEN"}, nil},
		{"valid twilio messaging service", providers.Config{Name: "tw", Channel: "sms", Kind: "twilio", Rate: 1,
			AccountSID: "AC1", MessagingServiceSID: "MG0123456789abcdef0123456789ABCDEF", CredentialsEnv: "T"}, nil},
		{"valid twilio short code", providers.Config{Name: "tw", Channel: "sms", Kind: "twilio", Rate: 1, AccountSID: "AC1",
			From: "89045", CredentialsEnv: "T"}, nil},
		{"valid twilio alphanumeric sender id", providers.Config{Name: "tw", Channel: "sms", Kind: "twilio", Rate: 1, AccountSID: "AC1",
			From: "Shop & Co", CredentialsEnv: "T"}, nil},
		{"valid fcm", providers.Config{Name: "push", Channel: "push", Kind: "fcm", Rate: 500, ProjectID: "p",
			CredentialsEnv: "FCM_TOKEN"}, nil},
		{"valid apns", providers.Config{Name: "ios", Channel: "push", Kind: "apns", Rate: 1, KeyFile: "k.p8",
			KeyID: "ABC123DEFG", TeamID: "TEAM", Topic: "com.example.app", Priority: 5}, nil},
		{"valid smtp", providers.Config{Name: "mail", Channel: "email", Kind: "smtp", Rate: 1, Host: "smtp.example.com",
			From: "Example <no-reply@example.com>", Username: "u", PasswordEnv: "SMTP_PASSWORD"}, nil},

		{"max_pause over an hour", with(func(c *providers.Config) { c.MaxPause = 2 * time.Hour }),
			[]string{"max_pause: must be from 1s to 1h, got 2h"}},
		{"missing name", with(func(c *providers.Config) { c.Name = "" }), []string{"name: required"}},
		{"bad name", with(func(c *providers.Config) { c.Name = "sms gateway" }),
			[]string{`name: must be 1-64 characters of A-Z a-z 0-9 . _ -, got "sms gateway"`}},
		{"missing channel", with(func(c *providers.Config) { c.Channel = "" }),
			[]string{"channel: required, one of sms, push, email"}},
		{"unknown channel", with(func(c *providers.Config) { c.Channel = "fax" }),
			[]string{`channel: "fax" is not one of sms, push, email`}},
		{"missing kind", with(func(c *providers.Config) { c.Kind = "" }),
			[]string{"kind: required, one of webhook, twilio, fcm, apns, smtp, log"}},
		{"unknown kind", with(func(c *providers.Config) { c.Kind = "carrier-pigeon" }),
			[]string{`kind: "carrier-pigeon" is not one of webhook, twilio, fcm, apns, smtp, log`}},
		{"kind on the wrong channel", providers.Config{Name: "tw", Channel: "push", Kind: "twilio", Rate: 1,
			AccountSID: "AC1", From: "+15005550006", CredentialsEnv: "T"},
			[]string{`channel: kind twilio sends sms only, got "push"`}},
		{"negative rate", with(func(c *providers.Config) { c.Rate = -5 }), []string{rateRange + "-5"}},
		{"zero rate", with(func(c *providers.Config) { c.Rate = 0 }), []string{rateRange + "0"}},
		{"NaN rate", with(func(c *providers.Config) { c.Rate = math.NaN() }), []string{rateRange + "NaN"}},
		// 1e-15/s: its interval in µs overflows int64, and a run sent 50 of
		// 50 jobs within a second.
		{"rate too slow to pace", with(func(c *providers.Config) { c.Rate = 1e-15 }), []string{rateRange + "1e-15"}},
		// 1e12/s: paced at 1e6/s, a unit a µs, not as written (issue 26).
		{"rate too fast to pace", with(func(c *providers.Config) { c.Rate = 1e12 }), []string{rateRange + "1e+12"}},
		{"slowest rate", with(func(c *providers.Config) { c.Rate = providers.MinRate }), nil},
		{"fastest rate", with(func(c *providers.Config) { c.Rate = providers.MaxRate }), nil},
		{"queue delay too long", with(func(c *providers.Config) { c.MaxQueueDelay = 25 * time.Hour }), []string{"max_queue_delay: must be from 1ms to 24h, got 25h"}},
		{"queue delay too short", with(func(c *providers.Config) { c.MaxQueueDelay = time.Microsecond }), []string{"max_queue_delay: must be from 1ms to 24h, got 1µs"}},
		{"timeout too long", with(func(c *providers.Config) { c.Timeout = time.Hour }), []string{"timeout: must be from 1ms to 10m, got 1h"}},
		{"jitter budget too short", with(func(c *providers.Config) { c.JitterBudget = time.Microsecond }), []string{"jitter_budget: must be from 1ms to 250ms, got 1µs"}},
		{"max_pause under a second", with(func(c *providers.Config) { c.MaxPause = time.Millisecond }), []string{"max_pause: must be from 1s to 1h, got 1ms"}},
		{"unknown unit", with(func(c *providers.Config) { c.Unit = "bytes" }),
			[]string{`unit: "bytes" is not one of messages, segments`}},
		{"segments on push", providers.Config{Name: "p", Channel: "push", Kind: "webhook", URL: "https://x", Rate: 1,
			Unit: "segments"}, []string{`unit: segments is only for channel sms, got channel "push"`}},
		{"negative max_queue_delay", with(func(c *providers.Config) { c.MaxQueueDelay = -time.Second }),
			[]string{"max_queue_delay: must be from 1ms to 24h, got -1s"}},
		{"negative timeout", with(func(c *providers.Config) { c.Timeout = -time.Millisecond }),
			[]string{"timeout: must be from 1ms to 10m, got -1ms"}},
		{"missing url", with(func(c *providers.Config) { c.URL = "" }), []string{"url: required for kind webhook"}},
		{"relative url", with(func(c *providers.Config) { c.URL = "/send" }),
			[]string{`url: must be an absolute http(s) URL, got "/send"`}},
		{"ftp url", with(func(c *providers.Config) { c.URL = "ftp://example.com/send" }),
			[]string{`url: must be an absolute http(s) URL, got "ftp://example.com/send"`}},
		{"url without host", with(func(c *providers.Config) { c.URL = "http://" }),
			[]string{`url: must be an absolute http(s) URL, got "http://"`}},
		{"bad env name", with(func(c *providers.Config) { c.CredentialsEnv = "$TOKEN" }),
			[]string{`credentials_env: must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*), got "$TOKEN"`}},
		{"key of another kind", with(func(c *providers.Config) { c.ProjectID = "p" }),
			[]string{"project_id: not used by kind webhook (used by fcm)"}},
		{"url on log", providers.Config{Name: "dev", Channel: "sms", Kind: "log", Rate: 1, URL: "http://x"},
			[]string{"url: not used by kind log (used by webhook, twilio, fcm, apns)"}},
		{"twilio missing keys", providers.Config{Name: "tw", Channel: "sms", Kind: "twilio", Rate: 1}, []string{
			"account_sid: required for kind twilio",
			"credentials_env: required for kind twilio",
			"from: required for kind twilio unless messaging_service_sid is set"}},
		{"twilio bad from", providers.Config{Name: "tw", Channel: "sms", Kind: "twilio", Rate: 1, AccountSID: "AC",
			CredentialsEnv: "T", From: "07700900123"},
			[]string{`from: must be an E.164 phone number (+ and 7-15 digits), a short code (5-6 digits) or an alphanumeric ` +
				`sender id (1-11 of A-Z a-z 0-9 space + - _ &, at least one letter), got "07700900123"`}},
		{"twilio bad senders", providers.Config{Name: "tw", Channel: "sms", Kind: "twilio", Rate: 1, AccountSID: "AC",
			CredentialsEnv: "T", From: "Shop.com", MessagingServiceSID: "MG1"},
			[]string{`from: must be an E.164 phone number (+ and 7-15 digits), a short code (5-6 digits) or an alphanumeric ` +
				`sender id (1-11 of A-Z a-z 0-9 space + - _ &, at least one letter), got "Shop.com"`,
				`messaging_service_sid: must be MG and 32 hex digits, got "MG1"`}},
		{"fcm missing keys", providers.Config{Name: "push", Channel: "push", Kind: "fcm", Rate: 1}, []string{
			"project_id: required for kind fcm", "credentials_env: required for kind fcm unless credentials_file is set"}},
		{"valid fcm service account", providers.Config{Name: "push", Channel: "push", Kind: "fcm", Rate: 1, ProjectID: "p",
			CredentialsFile: "/etc/notifier/fcm.json", TLSCAFile: "/etc/ca.pem"}, nil},
		{"fcm both credentials", providers.Config{Name: "push", Channel: "push", Kind: "fcm", Rate: 1, ProjectID: "p",
			CredentialsEnv: "T", CredentialsFile: "k.json"}, []string{
			"credentials_file: set either credentials_env (a bearer token) or credentials_file (a service-account key), not both"}},
		{"credentials_file on twilio", providers.Config{Name: "tw", Channel: "sms", Kind: "twilio", Rate: 1, AccountSID: "AC",
			CredentialsEnv: "T", From: "+15005550006", CredentialsFile: "k.json"},
			[]string{"credentials_file: not used by kind twilio (used by fcm)"}},
		{"tls_ca_file on log", providers.Config{Name: "dev", Channel: "sms", Kind: "log", Rate: 1, TLSCAFile: "ca.pem"},
			[]string{"tls_ca_file: not used by kind log (used by webhook, twilio, fcm, apns, smtp)"}},
		{"apns over http", providers.Config{Name: "ios", Channel: "push", Kind: "apns", Rate: 1, URL: "http://127.0.0.1:1", KeyFile: "k",
			KeyID: "k", TeamID: "t", Topic: "t"}, []string{
			`url: must be https for kind apns (APNs speaks HTTP/2 over TLS only), got "http://127.0.0.1:1"`}},
		{"apns background defaults to priority 5", providers.Config{Name: "ios", Channel: "push", Kind: "apns", Rate: 1, KeyFile: "k",
			KeyID: "k", TeamID: "t", Topic: "t", PushType: "background"}, nil},
		{"apns background at priority 10", providers.Config{Name: "ios", Channel: "push", Kind: "apns", Rate: 1, KeyFile: "k",
			KeyID: "k", TeamID: "t", Topic: "t", PushType: "background", Priority: 10}, []string{
			"priority: must be 5 for push_type background (APNs refuses anything else), got 10"}},
		{"apns missing keys", providers.Config{Name: "ios", Channel: "push", Kind: "apns", Rate: 1, PushType: "loud",
			Priority: 7}, []string{
			"key_file: required for kind apns", "key_id: required for kind apns", "team_id: required for kind apns",
			"topic: required for kind apns",
			`push_type: "loud" is not one of alert, background, voip, complication, fileprovider, mdm, liveactivity, location, pushtotalk, controls, widgets`,
			"priority: must be 10, 5 or 1, got 7"}},
		{"smtp mistakes", providers.Config{Name: "mail", Channel: "email", Kind: "smtp", Rate: 1, Port: 70000,
			From: "not an address", Username: "u"}, []string{
			"host: required for kind smtp", "port: must be between 1 and 65535, got 70000",
			`from: must be an email address, got "not an address"`,
			"password_env: required for kind smtp when username is set"}},
		{"several mistakes at once", providers.Config{Name: "x", Channel: "sms", Kind: "webhook", Rate: -1,
			URL: "nope", Timeout: -time.Second}, []string{
			rateRange + "-1", "timeout: must be from 1ms to 10m, got -1s",
			`url: must be an absolute http(s) URL, got "nope"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := c.cfg.Validate()
			got := messages(err)
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("Validate() =\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(c.want, "\n  "))
			}
		})
	}
}

// messages splits a joined error into its messages.
func messages(err error) []string {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, messages(e)...)
		}
		return out
	}
	return []string{err.Error()}
}

func TestValidateAll(t *testing.T) {
	t.Parallel()
	p := func(name, channel string, def bool) providers.Config {
		return providers.Config{Name: name, Channel: channel, Default: def, Kind: "log", Rate: 1}
	}
	fb := func(c providers.Config, fallback string) providers.Config { c.Fallback = fallback; return c }
	cases := []struct {
		name string
		cfgs []providers.Config
		want []string
	}{
		{"valid", []providers.Config{p("sms-a", "sms", true), p("sms-b", "sms", false), p("push", "push", true)}, nil},
		{"empty", nil, []string{"providers: at least one provider is required"}},
		{"duplicate name", []providers.Config{p("a", "sms", true), p("b", "push", true), p("a", "email", true)},
			[]string{`providers[2] (a).name: "a" is already used by providers[0]`}},
		{"no default", []providers.Config{p("sms-a", "sms", false), p("sms-b", "sms", false), p("push", "push", true)},
			[]string{"providers: channel sms has no default provider; set default: true on one of sms-a, sms-b"}},
		{"two defaults", []providers.Config{p("sms-a", "sms", true), p("sms-b", "sms", true)},
			[]string{"providers[1] (sms-b).default: channel sms already has default providers[0] (sms-a)"}},
		{"fallback", []providers.Config{fb(p("sms-a", "sms", true), "sms-b"), p("sms-b", "sms", false), fb(p("push", "push", true), "sms-a"), fb(p("e", "email", true), "nope")}, []string{
			`providers[2] (push).fallback: "sms-a" sends sms, not push`,
			`providers[3] (e).fallback: no provider is named "nope"`}},
		{"every mistake", []providers.Config{p("a", "sms", true), p("a", "sms", true), p("m", "email", false)}, []string{
			`providers[1] (a).name: "a" is already used by providers[0]`,
			"providers[1] (a).default: channel sms already has default providers[0] (a)",
			"providers: channel email has no default provider; set default: true on one of m"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := messages(providers.ValidateAll(c.cfgs))
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("ValidateAll() =\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(c.want, "\n  "))
			}
		})
	}
}

func TestCost(t *testing.T) {
	t.Parallel()
	long := &providers.Message{Job: queue.Job{Body: strings.Repeat("a", 161)}}
	sms := validWebhook().WithDefaults()
	if got := sms.Cost(long); got != 1 {
		t.Errorf("unit messages: cost %d, want 1", got)
	}
	sms.Unit = "segments"
	if got := sms.Cost(long); got != 2 {
		t.Errorf("unit segments, 161 GSM chars: cost %d, want 2", got)
	}
	if got := sms.Cost(&providers.Message{}); got != 1 {
		t.Errorf("unit segments, empty body: cost %d, want 1", got)
	}
}

func TestValidateErrorsAreJoined(t *testing.T) {
	t.Parallel()
	err := providers.Config{}.Validate()
	if err == nil || len(messages(err)) < 3 {
		t.Fatalf("zero Config: %v, want one error per missing key", err)
	}
	var j interface{ Unwrap() []error }
	if !errors.As(err, &j) {
		t.Fatalf("Validate's error %T is not an errors.Join", err)
	}
}

// TestEntryPathQuotesControlCharacters: a provider name with a control
// character (an escape sequence, a newline) is quoted in messages, never
// written raw to the terminal; a plain name is not.
func TestEntryPathQuotesControlCharacters(t *testing.T) {
	t.Parallel()
	if got := providers.EntryPath(2, "sms-gw"); got != "providers[2] (sms-gw)" {
		t.Errorf("plain name: %s", got)
	}
	got := providers.EntryPath(0, "evil\x1b[2J\nname")
	if got != `providers[0] ("evil\x1b[2J\nname")` {
		t.Errorf("control characters: %s, want them quoted", got)
	}
}

// TestShapingKeys: adaptive takes defaults from the rate and refuses
// values that cannot pace; quotas need whole-second windows; a provider
// cannot fall back on itself.
func TestShapingKeys(t *testing.T) {
	t.Parallel()
	base := providers.Config{Name: "sms", Channel: "sms", Default: true, Kind: "log", Rate: 100}
	c := base
	c.Adaptive = &providers.AdaptiveConfig{}
	d := c.WithDefaults().Adaptive
	if d.MinRate != 10 || d.Decrease != 0.7 || d.IncreasePerS != 5 || d.Quiet != 2*time.Second {
		t.Fatalf("adaptive defaults %+v, want min_rate 10, decrease 0.7, increase_per_s 5, quiet 2s", *d)
	}
	if c.Adaptive.MinRate != 0 {
		t.Fatal("WithDefaults changed the caller's adaptive block")
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("adaptive with defaults: %v", err)
	}
	bad := base
	bad.Fallback = "sms"
	bad.Adaptive = &providers.AdaptiveConfig{MinRate: 200, Decrease: 1.5, IncreasePerS: -1, Quiet: -time.Second}
	bad.Quotas = []providers.QuotaConfig{{Limit: 0, Per: time.Minute}, {Limit: 5, Per: 1500 * time.Millisecond}}
	got := strings.Join(messages(bad.Validate()), "\n")
	for _, want := range []string{
		`fallback: must name another provider, got its own name "sms"`,
		"adaptive.min_rate: must be from", "adaptive.decrease: must be greater than 0 and less than 1, got 1.5",
		"adaptive.increase_per_s: must be greater than 0 and at most 9000, got -1", "adaptive.quiet: must be from 1ms to 1h, got -1s",
		"quotas[0].limit: must be a whole number from 1 to 1000000000000000, got 0", "quotas[1].per: must be whole seconds",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Validate() lacks %q:\n%s", want, got)
		}
	}
}

// TestShapingRanges: the adaptive climb from min_rate back to rate takes at
// most a day (the state lives until it ends; increase_per_s 1e-15 made it
// 2^53 µs), quiet is at most an hour, a quota's limit at most 1e15, and
// the default increase_per_s of a fast contract stays within its range.
func TestShapingRanges(t *testing.T) {
	t.Parallel()
	base := providers.Config{Name: "sms", Channel: "sms", Default: true, Kind: "log", Rate: 100}
	for _, c := range []struct {
		name string
		set  func(*providers.Config)
		want string
	}{
		{"slow climb", func(c *providers.Config) {
			c.Adaptive = &providers.AdaptiveConfig{MinRate: 10, IncreasePerS: 1e-15}
		}, "adaptive.increase_per_s: must be at least (rate − min_rate) / 86400 = 0.0010416666666666667, so the climb from min_rate back to rate takes at most 24h (the state lives until it ends), got 1e-15"},
		{"climb of a day", func(c *providers.Config) {
			c.Adaptive = &providers.AdaptiveConfig{MinRate: 13.6, IncreasePerS: 0.001}
		}, ""},
		{"long quiet", func(c *providers.Config) {
			c.Adaptive = &providers.AdaptiveConfig{Quiet: 2 * time.Hour}
		}, "adaptive.quiet: must be from 1ms to 1h, got 2h"},
		{"huge quota", func(c *providers.Config) {
			c.Quotas = []providers.QuotaConfig{{Limit: 1e18, Per: time.Hour}}
		}, "quotas[0].limit: must be a whole number from 1 to 1000000000000000, got 1000000000000000000"},
		{"fast adaptive contract's defaults", func(c *providers.Config) {
			c.Rate = providers.MaxRate
			c.Adaptive = &providers.AdaptiveConfig{}
		}, ""},
	} {
		cfg := base
		c.set(&cfg)
		got := strings.Join(messages(cfg.Validate()), "\n")
		if got != c.want {
			t.Errorf("%s: Validate() = %q, want %q", c.name, got, c.want)
		}
	}
}
