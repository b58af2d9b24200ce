package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// explainJob is one job line for publish --file - with a recipient and a
// body no explain answer may print (deadTo, deadBody).
func explainJob(id, user string) string {
	return fmt.Sprintf(`{"id":%q,"user_id":%q,"channel":"sms","to":%q,"body":%q}`, id, user, deadTo, deadBody)
}

// explainCLI runs `notifier explain <args> --config <world's>` in-process
// and fails the test if it printed a recipient or a body.
func explainCLI(t *testing.T, w *world, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	stdout, stderr, code = runCLI(t, nil, "", append(append([]string{"explain"}, args...), "--config", w.config)...)
	for _, secret := range []string{deadTo, deadBody} {
		if strings.Contains(stdout+stderr, secret) {
			t.Errorf("explain %v printed %q:\n%s%s", args, secret, stdout, stderr)
		}
	}
	return stdout, stderr, code
}

// explainJSON runs explain --json and decodes its answer into v.
func explainJSON(t *testing.T, w *world, v any, args ...string) {
	t.Helper()
	out, errOut, code := explainCLI(t, w, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("explain %v: exit %d\n%s%s", args, code, out, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("explain %v: %v\n%s", args, err, out)
	}
}

// publishLines publishes NDJSON job lines through the CLI (--high: on the
// priority lane).
func publishLines(t *testing.T, w *world, high bool, lines ...string) {
	t.Helper()
	args := []string{"publish", "--config", w.config, "--file", "-", "--quiet"}
	if high {
		args = append(args, "--high")
	}
	out, errOut, code := runCLI(t, nil, strings.Join(lines, "\n"), args...)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("published %d,", len(lines))) {
		t.Fatalf("publish: exit %d\n%s%s", code, out, errOut)
	}
}

// acceptedAt is when the fake accepted job id (zero: not accepted).
func acceptedAt(f *testenv.Fake, id string) time.Time {
	for _, r := range f.Accepted() {
		if r.ID == id {
			return r.At
		}
	}
	return time.Time{}
}

// TestExplainUserAtTheCap: explain says a user at the cap is not allowed
// until T; a job of the user published then is suppressed by the
// dispatcher (on_exceed drop), and explain --job and the denials say so;
// explain says allowed again at T, not before, and a job published then is
// sent. Timed: not parallel.
func TestExplainUserAtTheCap(t *testing.T) {
	measures(t)
	w := newWorld(t, 50, `user_limits:
  sms: { limit: 2, window: 3s, algorithm: sliding_log, on_exceed: drop }
`)
	w.run()
	publishLines(t, w, false, explainJob("cap-1", "u42"), explainJob("cap-2", "u42"))
	testenv.WaitFor(t, 30*time.Second, "the two jobs under the cap sent", func() bool {
		return !acceptedAt(w.fake, "cap-1").IsZero() && !acceptedAt(w.fake, "cap-2").IsZero()
	})
	var a inspect.UserAnswer
	explainJSON(t, w, &a, "--user", "u42", "--channel", "sms")
	if !a.Capped || a.Allowed || a.Used != 2 || a.Remaining != 0 || a.NextAllowed.Now {
		t.Fatalf("at the cap: %+v", a)
	}
	first := acceptedAt(w.fake, "cap-1")
	if d := a.NextAllowed.At.Sub(first.Add(3 * time.Second)); d < -50*time.Millisecond || d > 50*time.Millisecond {
		t.Errorf("next allowed %s; the first send was at %s, the window 3s (off by %s)", a.NextAllowed.At, first, d)
	}
	t.Logf("explain: next allowed in %.3fs, %s after the first send's arrival + the window", a.NextAllowed.InSeconds, a.NextAllowed.At.Sub(first.Add(3*time.Second)))

	// Asked, then sent: the dispatcher denies it too.
	publishLines(t, w, false, explainJob("cap-3", "u42"))
	var j inspect.JobAnswer
	testenv.WaitFor(t, 30*time.Second, "cap-3 ended", func() bool {
		explainJSON(t, w, &j, "--job", "cap-3")
		return j.State == inspect.StateSuppressed && len(j.DeadLetters) == 1
	})
	if !acceptedAt(w.fake, "cap-3").IsZero() {
		t.Fatal("cap-3 was sent though explain said the user was at the cap")
	}
	if j.Ledger.Outcome != "suppressed" || j.Ledger.Reason != "user_limit" || j.DeadLetters[0].Reason != "user_limit" || j.DeadLetters[0].UserID != "u42" {
		t.Fatalf("cap-3: %+v", j)
	}
	explainJSON(t, w, &a, "--user", "u42", "--channel", "sms")
	if a.Denials.ThisHour != 1 || a.Denials.Last24h != 1 {
		t.Fatalf("denials after cap-3: %+v", a.Denials)
	}
	if time.Now().After(a.NextAllowed.At.Add(-200 * time.Millisecond)) {
		t.Skip("the machine took too long: the window has passed before the check before T could run")
	}

	// Allowed again at T, not before (to 20 ms: explain's clock is the
	// Redis clock, this test's the same machine's).
	var allowedAt time.Time
	testenv.WaitFor(t, 10*time.Second, "explain says allowed", func() bool {
		var b inspect.UserAnswer
		explainJSON(t, w, &b, "--user", "u42", "--channel", "sms")
		if b.Allowed {
			allowedAt = b.At
		}
		return b.Allowed
	})
	if allowedAt.Before(a.NextAllowed.At.Add(-20 * time.Millisecond)) {
		t.Fatalf("explain said allowed at %s, before the %s it had named", allowedAt, a.NextAllowed.At)
	}
	publishLines(t, w, false, explainJob("cap-4", "u42"))
	testenv.WaitFor(t, 30*time.Second, "cap-4 sent", func() bool { return !acceptedAt(w.fake, "cap-4").IsZero() })
	t.Logf("allowed again %s after the instant named; cap-4 sent %s after it",
		allowedAt.Sub(a.NextAllowed.At), acceptedAt(w.fake, "cap-4").Sub(a.NextAllowed.At))
}

// TestExplainProviderQueue: with a queue of slots handed out, explain's
// depth is the jobs not yet sent and its next free slot is when the next
// job published (on the priority lane, so that no job of the backlog
// goes first) reaches the provider. The backlog fits the workers (16) and
// the channel's budget (50/s × 250 ms + 1), so every job of it holds its
// slot when explain is asked: jobs still in JetStream, or held by a worker
// before they reserve, are in no queue yet (explain is asked until they
// hold their slots). Timed: not parallel.
func TestExplainProviderQueue(t *testing.T) {
	measures(t)
	const backlog = 12
	w := newWorld(t, 50, "")
	w.run()
	// A first job warms the provider (its queue and the fetch loop).
	publishLines(t, w, false, explainJob("warm", "u0"))
	testenv.WaitFor(t, 30*time.Second, "the first job sent", func() bool { return !acceptedAt(w.fake, "warm").IsZero() })
	lines := make([]string, backlog)
	for i := range lines {
		lines[i] = explainJob(fmt.Sprintf("q-%02d", i), fmt.Sprintf("u%d", i))
	}
	publishLines(t, w, false, lines...)
	// The backlog's jobs reach their workers and reserve over some
	// milliseconds (a loaded machine stretches that past the first send),
	// so explain is asked until the jobs hold their slots, while some are
	// still unsent; depth never counts a job before it reserves.
	var a inspect.ProviderAnswer
	sent := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		a = inspect.ProviderAnswer{}
		explainJSON(t, w, &a, "--provider", "sms-gw")
		sent = 0
		for i := range backlog {
			if at := acceptedAt(w.fake, fmt.Sprintf("q-%02d", i)); !at.IsZero() && !at.After(a.At) {
				sent++
			}
		}
		if sent == backlog || a.Queue.Depth >= 2 && a.Queue.Depth >= float64(backlog-sent-2) {
			break
		}
	}
	if sent == backlog {
		t.Fatalf("the backlog was sent before explain saw it queued (last depth %.2f)", a.Queue.Depth)
	}
	publishLines(t, w, true, explainJob("probe", "u-probe"))
	testenv.WaitFor(t, 30*time.Second, "the probe sent", func() bool { return !acceptedAt(w.fake, "probe").IsZero() })
	arrived := acceptedAt(w.fake, "probe")
	late := arrived.Sub(a.NextFreeSlot.At)
	t.Logf("explain: depth %.2f (%d of %d not yet sent), delay %.3fs, next free slot in %.3fs; the probe arrived %s after that slot",
		a.Queue.Depth, backlog-sent, backlog, a.Queue.DelaySeconds, a.NextFreeSlot.InSeconds, late)
	if a.Contract.Rate != 50 || a.Contract.Headroom <= 0 || a.Queue.Full || a.Pause != nil {
		t.Fatalf("answer: %+v", a)
	}
	if d := a.Queue.Depth - float64(backlog-sent); d < -2 || d > 2 {
		t.Errorf("depth %.2f, but %d jobs of the backlog were not sent yet", a.Queue.Depth, backlog-sent)
	}
	if a.NextFreeSlot.Now || a.NextFreeSlot.InSeconds < 0.05 {
		t.Fatalf("no queue to measure: next free slot %+v", a.NextFreeSlot)
	}
	// Sent at its slot: not before it (less the 3 ms a worker wakes early
	// and a millisecond of clocks), not after it by more than one slot (a
	// worker that wakes more than 5 ms late takes the next one), the 5 ms
	// and an HTTP round trip on a busy machine (20 ms).
	rate, h := 50.0, leaky.HeadroomFor(jitterBudget) // the world's jitter_budget's
	slot := time.Duration(float64(time.Second) / (rate * (1 - h)))
	if late < -4*time.Millisecond || late > slot+25*time.Millisecond {
		t.Errorf("the probe reached the provider %s after the next free slot explain named", late)
	}
	for i := range backlog {
		if at := acceptedAt(w.fake, fmt.Sprintf("q-%02d", i)); at.After(arrived) {
			t.Errorf("q-%02d was sent after the probe: the probe did not take the next free slot", i)
		}
	}
	if len(a.Breakers) != 1 || a.Breakers[0].State != "closed" {
		t.Errorf("breakers %+v, want one instance's, closed", a.Breakers)
	}
}

// TestExplainJobAndEndpoint: explain --job for a job sent, a job dead
// (rejected) and a job suppressed (over the cap), in text and JSON, never
// with a recipient or a body; the metrics port's /explain answers the same
// JSON, 400 for a bad question and 404 for an unknown provider; the
// command's usage errors exit 2.
func TestExplainJobAndEndpoint(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 50, `user_limits:
  sms: { limit: 1, window: 1h, algorithm: fixed_window, on_exceed: drop }
`)
	port := testenv.FreePort(t)
	setMetricsPort(t, w, port)
	w.run()
	publishLines(t, w, false, explainJob("j-sent", "u1"))
	testenv.WaitFor(t, 30*time.Second, "j-sent sent", func() bool { return !acceptedAt(w.fake, "j-sent").IsZero() })
	w.fake.FailNext(1, http.StatusBadRequest)
	publishLines(t, w, false, explainJob("j-dead", "u2"))
	publishLines(t, w, false, explainJob("j-supp", "u1")) // u1's second in the hour
	var dead, supp inspect.JobAnswer
	testenv.WaitFor(t, 30*time.Second, "j-dead and j-supp ended", func() bool {
		explainJSON(t, w, &dead, "--job", "j-dead")
		explainJSON(t, w, &supp, "--job", "j-supp")
		return len(dead.DeadLetters) == 1 && len(supp.DeadLetters) == 1
	})
	// --scan N looks for a job's dead letters among the newest N letters
	// only: with 1, the older of the two letters is not listed.
	older, newer := "j-dead", "j-supp"
	if supp.DeadLetters[0].Seq < dead.DeadLetters[0].Seq {
		older, newer = newer, older
	}
	var o, n inspect.JobAnswer
	explainJSON(t, w, &o, "--job", older, "--scan", "1")
	explainJSON(t, w, &n, "--job", newer, "--scan", "1")
	if len(o.DeadLetters) != 0 || len(n.DeadLetters) != 1 {
		t.Errorf("--scan 1: %d dead letters of %s (the older), %d of %s; want 0 and 1", len(o.DeadLetters), older, len(n.DeadLetters), newer)
	}
	var sent inspect.JobAnswer
	explainJSON(t, w, &sent, "--job", "j-sent")
	if sent.State != "sent" || !sent.Ledger.Sent || sent.Ledger.SentSeq == 0 || len(sent.DeadLetters) != 0 || sent.Ledger.LeaseOwner != "" {
		t.Errorf("j-sent: %+v", sent)
	}
	if dead.State != "dead" || dead.Ledger.Outcome != "dead" || dead.Ledger.Reason != "rejected" || dead.DeadLetters[0].Reason != "rejected" || dead.Ledger.Sent {
		t.Errorf("j-dead: %+v", dead)
	}
	if supp.State != "suppressed" || supp.Ledger.Reason != "user_limit" || supp.DeadLetters[0].Kind != string(queue.Suppressed) {
		t.Errorf("j-supp: %+v", supp)
	}
	var unknown inspect.JobAnswer
	explainJSON(t, w, &unknown, "--job", "never-published")
	if unknown.State != "unknown" || unknown.Ledger.Found {
		t.Errorf("never-published: %+v", unknown)
	}

	// Text.
	for id, want := range map[string][]string{
		"j-sent": {"job j-sent", ": sent", "ledger       sent (stream sequence", "dead letter  none"},
		"j-dead": {": dead", "ended dead (rejected)", "dead letter  #", "rejected", "user u2"},
		"j-supp": {": suppressed", "ended suppressed (user_limit)", "user_limit"},
	} {
		out, errOut, code := explainCLI(t, w, "--job", id)
		t.Logf("explain --job %s:\n%s", id, out)
		for _, s := range want {
			if code != 0 || !strings.Contains(out, s) {
				t.Errorf("explain --job %s: exit %d, want %q in\n%s%s", id, code, s, out, errOut)
			}
		}
	}
	out, _, code := explainCLI(t, w, "--user", "u1", "--channel", "sms")
	t.Logf("explain --user u1 --channel sms:\n%s", out)
	for _, s := range []string{"user u1 on sms", "cap          1 per 1h (fixed_window, on_exceed drop)", "1 used, 0 left", "denied: it would be suppressed", "next allowed 20", "1 this hour"} {
		if code != 0 || !strings.Contains(out, s) {
			t.Errorf("explain --user: want %q in\n%s", s, out)
		}
	}
	out, _, code = explainCLI(t, w, "--provider", "sms-gw")
	t.Logf("explain --provider sms-gw:\n%s", out)
	for _, s := range []string{"provider sms-gw (sms)", "contract     50 messages/s, max_queue_delay 1s (burst 50), headroom 4.76%" /* leaky.HeadroomFor(jitterBudget) */, "next slot", "pause        none", "breaker      closed"} {
		if code != 0 || !strings.Contains(out, s) {
			t.Errorf("explain --provider: want %q in\n%s", s, out)
		}
	}
	for _, args := range [][]string{{}, {"--user", "u1"}, {"--provider", "sms-gw", "--job", "x"}, {"--provider", "nope"}, {"--job", "bad id"}, {"--user", "u1", "--channel", "fax"}} {
		if _, errOut, code := explainCLI(t, w, args...); code != 2 || !strings.HasPrefix(errOut, "Error: ") {
			t.Errorf("explain %v: exit %d, want 2\n%s", args, code, errOut)
		}
	}

	// The endpoint.
	get := func(query string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/explain?%s", port, query))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, secret := range []string{deadTo, deadBody} {
			if strings.Contains(string(body), secret) {
				t.Errorf("/explain?%s served %q", query, secret)
			}
		}
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("/explain?%s: %s %q: %v", query, resp.Status, body, err)
		}
		return resp.StatusCode, m
	}
	code, m := get("job=j-dead")
	if code != 200 || m["state"] != "dead" || m["job"] != "j-dead" {
		t.Errorf("/explain?job=j-dead: %d %v", code, m)
	}
	for _, k := range []string{"at", "ledger", "dead_letters"} {
		if _, ok := m[k]; !ok {
			t.Errorf("/explain?job: no %q in %v", k, m)
		}
	}
	code, m = get("user=u1&channel=sms")
	if code != 200 || m["allowed"] != false || m["capped"] != true {
		t.Errorf("/explain?user: %d %v", code, m)
	}
	for _, k := range []string{"rule", "used", "remaining", "next_allowed", "denials"} {
		if _, ok := m[k]; !ok {
			t.Errorf("/explain?user: no %q in %v", k, m)
		}
	}
	code, m = get("provider=sms-gw")
	if code != 200 || m["provider"] != "sms-gw" {
		t.Errorf("/explain?provider: %d %v", code, m)
	}
	for _, k := range []string{"contract", "effective_rate", "queue", "next_free_slot", "quotas", "breakers", "tenants_waiting"} {
		if _, ok := m[k]; !ok {
			t.Errorf("/explain?provider: no %q in %v", k, m)
		}
	}
	for query, want := range map[string]int{
		"provider=nope": 404, "": 400, "user=u1": 400, "user=u1&channel=fax": 400, "job=bad%20id": 400,
		"job=a&job=b": 400, "provider=sms-gw&job=a": 400, "foo=1": 400,
	} {
		if code, m := get(query); code != want || m["error"] == nil || m["error"] == "" {
			t.Errorf("/explain?%s: %d %v, want %d with an error", query, code, m, want)
		}
	}
	// The CLI and the endpoint give the same answer (the parts that do not
	// move with time).
	var cli inspect.JobAnswer
	explainJSON(t, w, &cli, "--job", "j-supp")
	_, m = get("job=j-supp")
	b, _ := json.Marshal(m)
	var srv inspect.JobAnswer
	if err := json.Unmarshal(b, &srv); err != nil {
		t.Fatal(err)
	}
	cli.At, srv.At, cli.Ledger.KeptForSeconds, srv.Ledger.KeptForSeconds = time.Time{}, time.Time{}, 0, 0
	cj, _ := json.Marshal(cli)
	sj, _ := json.Marshal(srv)
	if string(cj) != string(sj) {
		t.Errorf("the CLI's answer %s, the endpoint's %s", cj, sj)
	}
}

// setMetricsPort gives the world's `notifier run` the metrics port port.
func setMetricsPort(t *testing.T, w *world, port int) {
	t.Helper()
	cfg, err := os.ReadFile(w.config)
	if err != nil {
		t.Fatal(err)
	}
	cfg = bytes.Replace(cfg, []byte("listen: 127.0.0.1:0"), []byte(fmt.Sprintf("listen: 127.0.0.1:%d", port)), 1)
	if err := os.WriteFile(w.config, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestExplainJobWaiting: explain --job finds a job that has not ended
// (issue 29: it said "unknown … no record" for a job the per-user cap put
// off): one in the stream not taken yet (no dispatcher runs), and one the
// cap deferred (on_exceed: defer), with why and until when; the deferral is
// logged at debug with the job id; --scan bounds the stream read, and an
// id never published is unknown after the whole stream was read.
func TestExplainJobWaiting(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 50, `user_limits:
  sms: { limit: 1, window: 1h, on_exceed: defer }
`)
	publishLines(t, w, false, explainJob("w-1", "a"), explainJob("w-2", "b"))

	var j inspect.JobAnswer
	explainJSON(t, w, &j, "--job", "w-2")
	if j.State != inspect.StateWaiting || j.Why != inspect.WhyStream || j.Stream == nil || j.Stream.Job == nil || j.Ledger.Found {
		t.Fatalf("w-2 before any dispatcher: %+v, want waiting in the stream", j)
	}
	if j.Stream.Job.Seq != 2 || !strings.HasPrefix(j.Stream.Job.Subject, "notify.jobs.sms") || j.Stream.InStream != 2 {
		t.Fatalf("w-2 in the stream: %+v, want sequence 2 of 2 on notify.jobs.sms", *j.Stream)
	}
	out, _, code := explainCLI(t, w, "--job", "w-2")
	if code != 0 || !strings.Contains(out, "waiting\n") || !strings.Contains(out, "in the job stream, not taken yet") || !strings.Contains(out, "stream sequence 2") ||
		!strings.Contains(out, "provider     sms-gw; queue ") {
		t.Fatalf("explain --job w-2: exit %d\n%s", code, out)
	}
	j = inspect.JobAnswer{}
	explainJSON(t, w, &j, "--job", "w-2", "--scan", "1")
	if j.State != inspect.StateUnknown || j.Stream == nil || j.Stream.Scanned != 1 || j.Stream.Complete {
		t.Fatalf("w-2 with --scan 1: %+v, want unknown after 1 of 2 messages", j.Stream)
	}
	out, _, _ = explainCLI(t, w, "--job", "w-2", "--scan", "1")
	if !strings.Contains(out, "not in the first 1 of 2 messages of the job stream (--scan 0 reads them all)") {
		t.Fatalf("explain --job w-2 --scan 1:\n%s", out)
	}
	j = inspect.JobAnswer{}
	explainJSON(t, w, &j, "--job", "never-published")
	if j.State != inspect.StateUnknown || j.Stream == nil || !j.Stream.Complete || j.Stream.Scanned != 2 {
		t.Fatalf("an id never published: %+v, want unknown after the whole stream", j.Stream)
	}
	if _, errOut, code := explainCLI(t, w, "--user", "a", "--channel", "sms", "--scan", "5"); code != 2 || !strings.Contains(errOut, "--scan goes with --job") {
		t.Fatalf("--scan without --job: exit %d, %s", code, errOut)
	}

	p := w.run()
	publishLines(t, w, false, explainJob("d-1", "u7"), explainJob("d-2", "u7"))
	// One of the two is sent, the other put off by the cap.
	sent, put := "d-1", "d-2"
	testenv.WaitFor(t, 30*time.Second, "one of u7's jobs sent", func() bool {
		if !acceptedAt(w.fake, "d-2").IsZero() {
			sent, put = "d-2", "d-1"
		}
		return !acceptedAt(w.fake, sent).IsZero()
	})
	testenv.WaitFor(t, 30*time.Second, put+" put off by the cap", func() bool {
		j = inspect.JobAnswer{}
		explainJSON(t, w, &j, "--job", put)
		return j.Why == ledger.DeferUserLimit
	})
	first := acceptedAt(w.fake, sent)
	if j.State != inspect.StateWaiting || j.Ledger.DueAt == nil || j.Ledger.Deferrals != 1 || j.Ledger.LeaseOwner != "" || j.Provider != nil {
		t.Fatalf("%s: %+v, want waiting, put off once, no lease, no provider named", put, j)
	}
	// Due when the cap lets the next job through: the first send + the
	// window, plus the deferral's jitter (at most a tenth of the wait).
	if due := *j.Ledger.DueAt; due.Before(first.Add(time.Hour-time.Second)) || due.After(first.Add(time.Hour+7*time.Minute)) {
		t.Fatalf("%s due at %s, want about an hour after %s's send at %s", put, due, sent, first)
	}
	if j.Stream == nil || j.Stream.Job == nil {
		t.Fatalf("%s is not found in the stream: %+v", put, j.Stream)
	}
	out, _, _ = explainCLI(t, w, "--job", put)
	if !strings.Contains(out, ": waiting\n") || !strings.Contains(out, "why          put off by the per-user cap (on_exceed: defer) until ") {
		t.Fatalf("explain --job %s:\n%s", put, out)
	}
	t.Logf("explain --job %s:\n%s", put, out)
	logged := false
	for _, line := range strings.Split(p.logs(), "\n") {
		if strings.Contains(line, `"msg":"job deferred"`) && strings.Contains(line, `"job":"`+put+`"`) && strings.Contains(line, `"why":"user_limit"`) {
			logged = true
		}
	}
	if !logged {
		t.Fatalf("no debug line records %s's deferral with its id:\n%s", put, p.logs())
	}
	if !acceptedAt(w.fake, put).IsZero() {
		t.Fatalf("%s was sent inside the cap's window", put)
	}
}
