package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
)

// TestCategoryConfig: user_limits.<channel>.<category> is a cap of its own
// beside the channel's (or alone), categories.<channel> sets a channel's
// category, providers[].reserve keeps a share for transactional jobs; check
// prints them, and every mistake is named by its key.
func TestCategoryConfig(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(minimal, "rate: 100", "rate: 100\n    reserve: { transactional: 0.3 }", 1) + `
user_limits:
  sms: { limit: 3, window: 10m, marketing: { limit: 1, window: 24h, on_exceed: defer } }
  push:
    marketing: { limit: 2, window: 1h }
categories:
  email: marketing
`
	cfg, err := config.Parse([]byte(yaml), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	chans := cfg.ChannelCaps()
	if len(chans) != 1 || chans["sms"].Limit != 3 || chans["sms"].Algorithm != userlimit.SlidingLog {
		t.Errorf("channel caps %+v, want sms only (push has a marketing cap alone)", chans)
	}
	cats := cfg.CategoryCaps()
	if r := cats[limits.CategoryCap{Channel: "sms", Category: queue.Marketing}]; r.Limit != 1 || r.Window != 24*time.Hour || r.OnExceed != userlimit.Defer || r.Algorithm != userlimit.SlidingLog {
		t.Errorf("sms marketing cap %+v", r)
	}
	if r := cats[limits.CategoryCap{Channel: "push", Category: queue.Marketing}]; r.Limit != 2 || len(cats) != 2 {
		t.Errorf("category caps %+v", cats)
	}
	if cfg.Categories["email"] != queue.Marketing || cfg.Providers[0].TransactionalReserve() != 0.3 {
		t.Errorf("categories %v, reserve %v", cfg.Categories, cfg.Providers[0].Reserve)
	}
	stdout, stderr, code := runCLI(t, nil, "", "check", "--config", writeConfig(t, yaml))
	for _, want := range []string{"cap sms ", "cap sms.marketing  1 per 24h per user (sliding_log, on_exceed defer)", "cap push.marketing",
		"category   email jobs are marketing unless they name one", "30% kept for transactional jobs"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("check: exit %d, output lacks %q:\n%s%s", code, want, stdout, stderr)
		}
	}

	for _, tc := range []struct{ yaml, want string }{
		{"user_limits:\n  sms: { marketing: { limit: 0, window: 1h } }\n", "user_limits.sms.marketing.limit: must be a whole number of at least 1"},
		{"user_limits:\n  sms: { promo: { limit: 1, window: 1h } }\n", "user_limits.sms.promo: unknown key"},
		{"categories:\n  sms: promo\n", `categories.sms: "promo" is not one of transactional, marketing`},
		{"categories:\n  fax: marketing\n", `categories.fax: "fax" is not a channel`},
		{"reserve", "providers[0] (sms-gateway).reserve.marketing"},
		{"reserve-high", "providers[0] (sms-gateway).reserve.transactional: must be a share from 0 to 0.9, got 1"},
	} {
		y := minimal + tc.yaml
		switch tc.yaml {
		case "reserve":
			y = strings.Replace(minimal, "rate: 100", "rate: 100\n    reserve: { marketing: 0.5 }", 1)
		case "reserve-high":
			y = strings.Replace(minimal, "rate: 100", "rate: 100\n    reserve: { transactional: 1 }", 1)
		}
		if _, err := config.Parse([]byte(y), noEnv); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want a problem with %q", tc.yaml, err, tc.want)
		}
	}
}

// TestPublishCategoryLanes: publish --category puts the jobs on their
// category's lane, an NDJSON line's own category picks its lane, and
// --category marketing with --high is refused.
func TestPublishCategoryLanes(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 100, "")
	stdout, stderr, code := runCLI(t, nil, "", "publish", "--config", w.config,
		"--id", "promo-1", "--channel", "sms", "--user", "u9", "--to", "+447700900123", "--body", "Sale", "--category", "marketing")
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	lines := `{"id":"promo-2","user_id":"u1","channel":"push","to":"tok_abcdefgh12345678","body":"two","category":"marketing"}` + "\n" +
		`{"id":"otp-2","user_id":"u1","channel":"email","to":"a@example.com","body":"code","category":"transactional"}` + "\n"
	if stdout, stderr, code := runCLI(t, nil, lines, "publish", "--config", w.config, "--file", "-", "--quiet"); code != 0 || !strings.Contains(stdout, "published 2") {
		t.Fatalf("NDJSON: exit %d: %s %s", code, stdout, stderr)
	}
	js, err := jetstream.New(w.nats.Conn())
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), "NOTIFY")
	if err != nil {
		t.Fatal(err)
	}
	for subject, id := range map[string]string{"notify.jobs.sms.marketing": "promo-1", "notify.jobs.push.marketing": "promo-2", "notify.jobs.email.transactional": "otp-2"} {
		m, err := s.GetLastMsgForSubject(t.Context(), subject)
		if err != nil || m.Header.Get("Nats-Msg-Id") != id {
			t.Errorf("%s: not on its lane %s: %v", id, subject, err)
		}
	}
	_, stderr, code = runCLI(t, nil, "", "publish", "--config", w.config, "--channel", "sms", "--user", "u9", "--to", "+447700900123",
		"--body", "x", "--category", "marketing", "--high")
	if code != 2 || !strings.Contains(stderr, "priority lane is for transactional jobs") {
		t.Fatalf("--category marketing --high: exit %d, %s", code, stderr)
	}
	// With --file, --category was ignored (exit 0, the line on the
	// transactional lane); an absurd --in-flight panicked (found in review).
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--file", "-", "--category", "marketing"}, "--category is for one job or --count"},
		{[]string{"--count", "3", "--channel", "sms", "--in-flight", "100000000000000"}, "--in-flight must be from 1 to 65536"},
		{[]string{"--count", "3", "--channel", "sms", "--in-flight", "0"}, "--in-flight must be from 1 to 65536"},
	} {
		line := `{"id":"c1","user_id":"u1","channel":"sms","to":"+447700900123","body":"one"}`
		_, stderr, code := runCLI(t, nil, line, append([]string{"publish", "--config", w.config, "--quiet"}, c.args...)...)
		if code != 2 || !strings.HasPrefix(stderr, "Error: ") || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "panic") {
			t.Errorf("publish %v: exit %d, %s; want exit 2 saying %q", c.args, code, stderr, c.want)
		}
	}
}

// TestExplainCategoryCapAgreesWithTheDispatcher: through the binary's
// commands, a marketing SMS under a cap of its own (1 per hour) is sent;
// explain then says the user's marketing jobs are at their cap and its
// transactional ones are not (the channel's cap, counted apart); the next
// marketing SMS is suppressed and the next transactional one sent, as
// explain said.
func TestExplainCategoryCapAgreesWithTheDispatcher(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 50, `user_limits:
  sms: { limit: 5, window: 1h, marketing: { limit: 1, window: 1h } }
`)
	w.run()
	promo := func(id string) string {
		return strings.TrimSuffix(explainJob(id, "u42"), "}") + `,"category":"marketing"}`
	}
	publishLines(t, w, false, promo("promo-1"))
	testenv.WaitFor(t, 30*time.Second, "promo-1 sent", func() bool { return !acceptedAt(w.fake, "promo-1").IsZero() })
	var m, tr inspect.UserAnswer
	explainJSON(t, w, &m, "--user", "u42", "--channel", "sms", "--category", "marketing")
	explainJSON(t, w, &tr, "--user", "u42", "--channel", "sms")
	if m.Category != "marketing" || m.Rule == nil || m.Rule.Limit != 1 || m.Allowed || m.Used != 1 {
		t.Fatalf("marketing: %+v, want its own cap of 1, used, not allowed", m)
	}
	if tr.Category != "transactional" || tr.Rule == nil || tr.Rule.Limit != 5 || !tr.Allowed || tr.Used != 0 {
		t.Fatalf("transactional: %+v, want the channel's cap of 5, unused", tr)
	}
	publishLines(t, w, false, promo("promo-2"), explainJob("otp-1", "u42"))
	var j inspect.JobAnswer
	testenv.WaitFor(t, 30*time.Second, "promo-2 suppressed and otp-1 sent", func() bool {
		explainJSON(t, w, &j, "--job", "promo-2")
		return j.State == inspect.StateSuppressed && !acceptedAt(w.fake, "otp-1").IsZero()
	})
	if !acceptedAt(w.fake, "promo-2").IsZero() {
		t.Fatal("promo-2 was sent though explain said the user's marketing jobs were at their cap")
	}
	if _, stderr, code := explainCLI(t, w, "--user", "u42", "--channel", "sms", "--category", "promo"); code != 2 || !strings.Contains(stderr, "transactional or marketing") {
		t.Fatalf("--category promo: exit %d %s", code, stderr)
	}
}
