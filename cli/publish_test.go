package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/queue"
)

// TestPublishFileSkipsAnOversizedLine: a 2 MB line is reported with its
// number and size and skipped; the lines after it are still published and
// the summary printed (it used to end the run with exit 1, lines 4-7 never
// published).
func TestPublishFileSkipsAnOversizedLine(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 100, "")
	job := func(id string) string {
		return `{"id":"` + id + `","user_id":"u1","channel":"sms","to":"+447700900123","body":"hello"}`
	}
	lines := strings.Join([]string{
		job("f1"), job("f2"),
		`{"id":"big","user_id":"u1","channel":"sms","to":"+447700900123","body":"` + strings.Repeat("x", 2<<20) + `"}`,
		job("f4"), job("f5"), job("f6"), job("f7"),
	}, "\n")
	stdout, stderr, code := runCLI(t, nil, lines, "publish", "--config", w.config, "--file", "-", "--quiet")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "published 6, duplicates 0 (dropped by JetStream), failed 0, skipped 1 invalid lines") {
		t.Fatalf("summary: %s", stdout)
	}
	if !strings.Contains(stderr, "line 3: 2097") || !strings.Contains(stderr, "longer than a job may be") {
		t.Errorf("stderr does not name line 3 and its size:\n%.300s", stderr)
	}
	if got := strings.Join(w.streamIDs(), ","); got != "f1,f2,f4,f5,f6,f7" {
		t.Fatalf("stream holds %s", got)
	}
}

// TestPublishLoadsGetUniqueIDs: two generated loads started in the same
// second publish all their jobs (ids used to be load-<second>-N, so the
// second load was 0 published, 300 duplicates, and still exit 0); a
// publish that stores nothing exits non-zero.
func TestPublishLoadsGetUniqueIDs(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 100, "")
	for i := range 2 {
		stdout, stderr, code := runCLI(t, nil, "", "publish", "--config", w.config, "--count", "300", "--users", "10", "--channel", "sms", "--quiet")
		if code != 0 || !strings.Contains(stdout, "published 300, duplicates 0") {
			t.Fatalf("load %d: exit %d\n%s\n%s", i+1, code, stdout, stderr)
		}
	}
	if n := len(w.streamIDs()); n != 600 {
		t.Fatalf("stream holds %d jobs, want 600", n)
	}
	one := `{"id":"same","user_id":"u1","channel":"sms","to":"+447700900123","body":"hi"}`
	if _, _, code := runCLI(t, nil, one, "publish", "--config", w.config, "--file", "-", "--quiet"); code != 0 {
		t.Fatalf("first publish of a job: exit %d", code)
	}
	stdout, stderr, code := runCLI(t, nil, one, "publish", "--config", w.config, "--file", "-", "--quiet")
	if code == 0 || !strings.Contains(stdout, "published 0, duplicates 1") || !strings.Contains(stderr, "nothing was published") {
		t.Fatalf("a publish of a duplicate only: exit %d\n%s\n%s; want a non-zero exit saying nothing was published", code, stdout, stderr)
	}
}

// streamJob is a job in the job stream, with the subject it is on.
type streamJob struct{ subject, id, tenant string }

// streamJobs lists the job stream's jobs in order, each decoded against its
// subject (a job that does not fails the test).
func (w *world) streamJobs() []streamJob {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(w.nats.Conn())
	if err != nil {
		w.t.Fatal(err)
	}
	s, err := js.Stream(ctx, "NOTIFY")
	if err != nil {
		w.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	var out []streamJob
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		j, err := queue.Decode(m.Subject, m.Data)
		if err != nil {
			w.t.Fatalf("the job on %s does not decode: %v", m.Subject, err)
		}
		tenant := j.Tenant // what the job says, else its header's, else its subject's (as the dispatcher reads it)
		if tenant == "" {
			tenant = m.Header.Get(queue.HeaderTenant)
		}
		if tenant == "" {
			tenant = queue.TenantOf(m.Subject)
		}
		out = append(out, streamJob{subject: m.Subject, id: j.ID, tenant: tenant})
	}
	return out
}

// TestPublishTenant: --tenant publishes a job from flags, a generated load
// and the NDJSON lines without a tenant of their own on the tenant's
// subject; a line's own tenant is kept (lines used to go to the default
// tenant's subject, where a job with a tenant does not decode); a bad
// --tenant is a usage error.
func TestPublishTenant(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 100, "")
	pub := func(stdin string, args ...string) string {
		t.Helper()
		stdout, stderr, code := runCLI(t, nil, stdin, append([]string{"publish", "--config", w.config, "--quiet"}, args...)...)
		if code != 0 {
			t.Fatalf("publish %v: exit %d\n%s\n%s", args, code, stdout, stderr)
		}
		return stdout + stderr
	}
	pub("", "--channel", "sms", "--user", "u1", "--to", "+447700900123", "--body", "hi", "--id", "one", "--tenant", "acme")
	pub("", "--channel", "sms", "--user", "u1", "--to", "+447700900123", "--body", "hi", "--id", "one-high", "--tenant", "Bank.eu", "--high")
	pub("", "--count", "3", "--users", "2", "--channel", "push", "--tenant", "acme")
	line := func(id, tenant string) string {
		s := `{"id":"` + id + `","user_id":"u1","channel":"sms","to":"+447700900123","body":"hello"`
		if tenant != "" {
			s += `,"tenant":"` + tenant + `"`
		}
		return s + "}"
	}
	out := pub(strings.Join([]string{line("nd-flag", ""), line("nd-own", "zed"), line("nd-bad", "no spaces please"), line("nd-empty", "")}, "\n"),
		"--file", "-", "--tenant", "acme")
	if !strings.Contains(out, "published 3, duplicates 0 (dropped by JetStream), failed 0, skipped 1 invalid lines") ||
		!strings.Contains(out, "line 3: tenant: must be 1 to 64 characters") {
		t.Fatalf("NDJSON with --tenant:\n%s", out)
	}
	pub(strings.Join([]string{line("nd-default", ""), line("nd-own-2", "zed")}, "\n"), "--file", "-", "--high")

	// A tenant's job goes to one of its two fair lanes (queue.LanePair),
	// on its lane kind; the default tenant's to its own subject.
	want := map[string][2]string{ // id → lane (its subject without the fair lane's number), tenant
		"one":        {"notify.jobs.sms.f.#", "acme"},
		"one-high":   {"notify.jobs.sms.f.#.high", "Bank.eu"},
		"nd-flag":    {"notify.jobs.sms.f.#", "acme"},
		"nd-own":     {"notify.jobs.sms.f.#", "zed"},
		"nd-empty":   {"notify.jobs.sms.f.#", "acme"},
		"nd-default": {"notify.jobs.sms.high", ""},
		"nd-own-2":   {"notify.jobs.sms.f.#.high", "zed"},
	}
	onPair := func(j streamJob) (lane string, ok bool) {
		k, fair := queue.ParseJobSubject(j.subject)
		if !fair || !k.Fair {
			return j.subject, true
		}
		a, b := queue.LanePair(k.Channel, j.tenant, queue.DefaultFairLanes)
		ok = k.Index == a || k.Index == b
		k.Index = 0
		return strings.Replace(k.Subject(), ".f.0", ".f.#", 1), ok
	}
	loads := 0
	for _, j := range w.streamJobs() {
		lane, onItsPair := onPair(j)
		if !onItsPair {
			t.Errorf("job %s of tenant %q on %s: not one of its pair's lanes", j.id, j.tenant, j.subject)
		}
		if strings.HasPrefix(j.id, "load-") {
			loads++
			if lane != "notify.jobs.push.f.#" || j.tenant != "acme" {
				t.Errorf("generated job %s on %s, tenant %q", j.id, j.subject, j.tenant)
			}
			continue
		}
		if got := [2]string{lane, j.tenant}; got != want[j.id] {
			t.Errorf("job %s: on %s, tenant %q; want %v", j.id, j.subject, j.tenant, want[j.id])
		}
		delete(want, j.id)
	}
	if loads != 3 || len(want) > 0 {
		t.Errorf("%d generated jobs (want 3); not in the stream: %v", loads, want)
	}

	for _, args := range [][]string{
		{"--count", "3", "--channel", "sms", "--tenant", "bad tenant"},
		{"--file", "-", "--tenant", strings.Repeat("x", 65)},
		{"--channel", "sms", "--user", "u1", "--to", "+447700900123", "--body", "hi", "--tenant", "a/b"},
	} {
		stdout, stderr, code := runCLI(t, nil, "", append([]string{"publish", "--config", w.config, "--quiet"}, args...)...)
		if code != 2 || !strings.Contains(stderr, "--tenant must be 1 to 64 characters of A-Z a-z 0-9 . _ -") {
			t.Errorf("publish %v: exit %d, want 2 explaining --tenant\n%s%s", args, code, stdout, stderr)
		}
	}
}
