package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// The recipient and body of every job these tests make: no command may
// print either (show masks the recipient, and prints the body only with
// --reveal).
const (
	deadTo   = "+447700900123"
	deadBody = "your secret code is 918273"
)

// deadBench is a world whose streams exist, with a reader of its
// dead-letter stream and its Redis ledger, for tests that store dead
// letters themselves instead of running a dispatcher.
type deadBench struct {
	*world
	js     jetstream.JetStream
	pub    *queue.Publisher
	reader *queue.DeadLetters
	ledger *ledger.Redis
	next   uint64 // job-stream sequence of the next stored dead letter
}

func newDeadBench(t *testing.T, contract int, extraYAML string) *deadBench {
	t.Helper()
	w := newWorld(t, contract, extraYAML)
	js, err := jetstream.New(w.nats.Conn())
	if err != nil {
		t.Fatal(err)
	}
	cfg := queue.Config{}.WithDefaults()
	if err := queue.EnsureStreams(testCtx(t), js, cfg, 1); err != nil {
		t.Fatal(err)
	}
	rdb := w.redis.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	return &deadBench{world: w, js: js, pub: queue.NewPublisher(js), reader: queue.NewDeadLetters(js, cfg),
		ledger: ledger.NewRedis(rdb, "notifier:", 24*time.Hour), next: 1000}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// deadJob is a job's bytes.
func deadJob(channel, id, extra string) string {
	to := map[string]string{"sms": deadTo, "push": "tok_abcdefgh12345678", "email": "ada@example.com"}[channel]
	return fmt.Sprintf(`{"id":%q,"user_id":"u1","channel":%q,"to":%q,"body":%q%s}`, id, channel, to, deadBody, extra)
}

// store dead-letters data as the dispatcher would have, from a delivery on
// subject.
func (b *deadBench) store(t *testing.T, o queue.Outcome, subject, data, reason, detail string) {
	t.Helper()
	b.next++
	d := &queue.Delivery{Subject: subject, Data: []byte(data), Channel: queue.ChannelOf(subject),
		Stream: "NOTIFY", StreamSeq: b.next, Published: time.Now()}
	if err := b.pub.DeadLetter(testCtx(t), d, o, reason, detail); err != nil {
		t.Fatal(err)
	}
}

// msgs is the number of messages in stream.
func (b *deadBench) msgs(t *testing.T, stream string) uint64 {
	t.Helper()
	s, err := b.js.Stream(testCtx(t), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// jobStream returns the messages of the job stream.
func (b *deadBench) jobStream(t *testing.T) []*jetstream.RawStreamMsg {
	t.Helper()
	s, err := b.js.Stream(testCtx(t), "NOTIFY")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		if m, err := s.GetMsg(testCtx(t), seq); err == nil {
			out = append(out, m)
		}
	}
	return out
}

// letters lists the dead letters f selects.
func (b *deadBench) letters(t *testing.T, f queue.DeadFilter) []*queue.DeadLetter {
	t.Helper()
	ls, _, err := b.reader.List(testCtx(t), f)
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// dead runs `notifier dead <args> --config <world's>` in-process.
func (b *deadBench) dead(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	args = append(append([]string{"dead"}, args...), "--config", b.config)
	stdout, stderr, code = runCLI(t, nil, stdin, args...)
	for _, secret := range []string{deadTo, deadBody} {
		if strings.Contains(stdout+stderr, secret) && !contains(args, "--reveal") {
			t.Errorf("dead %v printed %q:\n%s%s", args, secret, stdout, stderr)
		}
	}
	return stdout, stderr, code
}

func (b *deadBench) deadOK(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, errOut, code := b.dead(t, stdin, args...)
	if code != 0 {
		t.Fatalf("dead %v: exit %d\n%s%s", args, code, out, errOut)
	}
	return out
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// tableIDs reads the JOB ID column of `dead list` (and of a dry run).
func tableIDs(out string) string {
	var ids []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && f[0][0] >= '0' && f[0][0] <= '9' && (f[2] == "dead" || f[2] == "suppressed") {
			ids = append(ids, f[5])
		}
	}
	return strings.Join(ids, ",")
}

// fixture stores six dead letters of both kinds, several channels and
// reasons, one of them not JSON.
func (b *deadBench) fixture(t *testing.T) {
	t.Helper()
	b.store(t, queue.Dead, "notify.jobs.sms", deadJob("sms", "d1", ""), "rejected", "provider sms-gw answered 400: bad number")
	b.store(t, queue.Dead, "notify.jobs.sms.high", deadJob("sms", "d2", ""), "max_attempts", "8 transient provider failures; last: 503")
	b.store(t, queue.Dead, "notify.jobs.push", strings.Replace(deadJob("push", "d3", `,"tenant":"acme"`), `"user_id":"u1"`, `"user_id":"u2"`, 1), "rejected", "provider push answered 410 Unregistered")
	b.store(t, queue.Suppressed, "notify.jobs.sms", deadJob("sms", "d4", `,"expires_at":"2020-01-01T00:00:00Z"`), "expired", "expires_at 2020-01-01T00:00:00Z passed before sending")
	b.store(t, queue.Suppressed, "notify.jobs.email", deadJob("email", "d5", `,"title":"hello","data":{"k":"v"},"campaign":"c9"`), "user_limit", "over the cap of 20 per 24h")
	b.store(t, queue.Dead, "notify.jobs.sms", `{"id":"d6","to":"`+deadTo+`",`, "invalid", "not valid JSON (unexpected end of input)")
}

func TestDeadListFilters(t *testing.T) {
	t.Parallel()
	b := newDeadBench(t, 100, "")
	b.fixture(t)

	out := b.deadOK(t, "", "list")
	if got := tableIDs(out); got != "d1,d2,d3,d4,d5,-" {
		t.Fatalf("list: %s\n%s", got, out)
	}
	for _, want := range []string{"SEQ", "STORED", "KIND", "REASON", "DETAIL", "rejected", "max_attempts", "user_limit",
		"provider sms-gw answered 400: bad number", "6 dead letters (4 dead, 2 suppressed)"} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--kind", "dead"}, "d1,d2,d3,-"},
		{[]string{"--kind", "suppressed"}, "d4,d5"},
		{[]string{"--kind", "all", "--reason", "rejected"}, "d1,d3"},
		{[]string{"--channel", "sms"}, "d1,d2,d4,-"},
		{[]string{"--channel", "sms", "--kind", "dead", "--reason", "max_attempts"}, "d2"},
		{[]string{"--id", "d5"}, "d5"},
		{[]string{"--user", "u1"}, "d1,d2,d4,d5"},
		{[]string{"--user", "u2"}, "d3"},
		{[]string{"--user", "u2", "--kind", "suppressed"}, ""},
		{[]string{"--tenant", "acme"}, "d3"},
		{[]string{"--tenant", "acme", "--user", "u1"}, ""},
		{[]string{"--since", "1h"}, "d1,d2,d3,d4,d5,-"},
		{[]string{"--since", "7d"}, "d1,d2,d3,d4,d5,-"},
		{[]string{"--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, ""},
		{[]string{"--reason", "unknown_provider"}, ""},
		{[]string{"--limit", "0"}, "d1,d2,d3,d4,d5,-"},
	} {
		if got := tableIDs(b.deadOK(t, "", append([]string{"list"}, c.args...)...)); got != c.want {
			t.Errorf("list %v: %s, want %s", c.args, got, c.want)
		}
	}
	if out := b.deadOK(t, "", "list", "--reason", "nothing"); !strings.Contains(out, "no dead letters match") {
		t.Errorf("an empty selection: %s", out)
	}
	out = b.deadOK(t, "", "list", "--limit", "2")
	if tableIDs(out) != "d1,d2" || !strings.Contains(out, "more match than the 2 printed") {
		t.Errorf("list --limit 2:\n%s", out)
	}

	// --since between two letters, as an RFC 3339 time.
	all := b.letters(t, queue.DeadFilter{})
	if got := tableIDs(b.deadOK(t, "", "list", "--since", all[3].Stored.Format(time.RFC3339Nano))); got != "d4,d5,-" {
		t.Errorf("list --since the 4th: %s", got)
	}

	out = b.deadOK(t, "", "list", "--json", "--kind", "suppressed")
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("list --json: %v\n%s", err, out)
	}
	if len(rows) != 2 || rows[0]["job_id"] != "d4" || rows[0]["reason"] != "expired" || rows[0]["kind"] != "suppressed" ||
		rows[0]["channel"] != "sms" || rows[1]["job_subject"] != "notify.jobs.email" || rows[0]["seq"] != float64(all[3].Seq) || rows[0]["user_id"] != "u1" {
		t.Errorf("list --json: %v", rows)
	}
	for _, r := range rows {
		for _, k := range []string{"to", "body", "title", "data"} {
			if _, ok := r[k]; ok {
				t.Errorf("list --json prints the job's %s", k)
			}
		}
	}
	if out := b.deadOK(t, "", "list", "--json", "--reason", "nothing"); strings.TrimSpace(out) != "[]" {
		t.Errorf("list --json of nothing: %q", out)
	}
	if strings.Contains(b.deadOK(t, "", "list", "--kind", "suppressed"), "hello") {
		t.Error("list prints a job's title")
	}

	for _, bad := range [][]string{
		{"--kind", "lost"}, {"--since", "yesterday"}, {"--since", "-2h"}, {"--since", "0d"},
		{"--channel", ">"}, {"--channel", "sms.*"}, {"--limit", "-1"}, {"extra-arg"}, {"--tenant", "no such tenant!"},
	} {
		_, errOut, code := b.dead(t, "", append([]string{"list"}, bad...)...)
		if code != 2 {
			t.Errorf("list %v: exit %d, want 2 (%s)", bad, code, errOut)
		}
	}
}

func TestParseSince(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Time
	}{
		{"2h", now.Add(-2 * time.Hour)},
		{"90m", now.Add(-90 * time.Minute)},
		{"1h30m", now.Add(-90 * time.Minute)},
		{"7d", now.Add(-7 * 24 * time.Hour)},
		{"2030-05-06T00:00:00Z", time.Date(2030, 5, 6, 0, 0, 0, 0, time.UTC)},
		{"2030-05-06T02:00:00+02:00", time.Date(2030, 5, 6, 0, 0, 0, 0, time.UTC)},
		{"2030-05-06T00:00:00.5Z", time.Date(2030, 5, 6, 0, 0, 0, 5e8, time.UTC)},
		{"2030-05-06T07:10:00Z", time.Date(2030, 5, 6, 7, 10, 0, 0, time.UTC)}, // ahead of now: selects none
		{"1500-01-01T00:00:00Z", time.Time{}},                                  // every letter (no start time)
		{"1969-12-31T23:59:59Z", time.Time{}},
	} {
		got, err := parseSince(c.in, now)
		if err != nil || !got.Equal(c.want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	// A time past 2262 wrapped round in JetStream's start time and selected
	// every letter (found in review: dead replay --since
	// 2300-01-01T00:00:00Z replayed them all).
	for _, bad := range []string{"", "0s", "-1h", "0d", "d", "7 d", "2030-05-06", "yesterday", "12345d",
		"2300-01-01T00:00:00Z", "9999-12-31T23:59:59Z"} {
		if _, err := parseSince(bad, now); err == nil {
			t.Errorf("parseSince(%q) accepted", bad)
		}
	}
}

func TestDeadShow(t *testing.T) {
	t.Parallel()
	b := newDeadBench(t, 100, "")
	b.fixture(t)
	all := b.letters(t, queue.DeadFilter{})

	out := b.deadOK(t, "", "show", fmt.Sprint(all[1].Seq))
	for _, want := range []string{
		fmt.Sprintf("dead letter %d in NOTIFY_DEAD", all[1].Seq),
		"kind:      dead (failed), channel sms",
		"reason:    max_attempts",
		"detail:    8 transient provider failures; last: 503",
		"job id:    d2",
		"published: notify.jobs.sms.high (a replay publishes to notify.jobs.sms.high)",
		"Notifier-Reason: max_attempts",
		"Notifier-Subject: notify.jobs.sms.high",
		"Nats-Msg-Id: dead:NOTIFY:",
		"recipient masked; body, title, data values and unknown fields hidden: --reveal shows them",
		"to:         +4477•••••23",
		fmt.Sprintf("body:       (hidden, %d bytes)", len(deadBody)),
		"user_id:    u1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}

	// By job id; the title, data values and unknown fields are hidden too.
	out = b.deadOK(t, "", "show", "d5")
	for _, want := range []string{"suppressed (dropped on purpose), channel email", "to:         a•••@example.com",
		"title:      (hidden, 5 bytes)", `data:       {"k":"(hidden, 1 bytes)"}`, `campaign:   (hidden, 2 bytes)`} {
		if !strings.Contains(out, want) {
			t.Errorf("show d5 lacks %q:\n%s", want, out)
		}
	}
	out = b.deadOK(t, "", "show", "d5", "--reveal")
	for _, want := range []string{"to:         a•••@example.com", "body:       " + deadBody, "title:      hello", `data:       {"k":"v"}`, "campaign:   c9", "shown: --reveal"} {
		if !strings.Contains(out, want) {
			t.Errorf("show d5 --reveal lacks %q:\n%s", want, out)
		}
	}
	if out := b.deadOK(t, "", "show", "d1", "--reveal"); strings.Contains(out, deadTo) {
		t.Errorf("show --reveal prints the recipient:\n%s", out)
	}

	// Not JSON: nothing to mask, so the bytes need --reveal.
	out = b.deadOK(t, "", "show", fmt.Sprint(all[5].Seq))
	if !strings.Contains(out, "job: not a JSON object") || !strings.Contains(out, "--reveal shows the raw bytes") || !strings.Contains(out, "job id:    - (none valid)") {
		t.Errorf("show of an invalid job:\n%s", out)
	}
	if out := b.deadOK(t, "", "show", fmt.Sprint(all[5].Seq), "--reveal"); !strings.Contains(out, `{"id":"d6"`) {
		t.Errorf("show --reveal of an invalid job:\n%s", out)
	}

	out = b.deadOK(t, "", "show", "d1", "--json")
	var views []map[string]any
	if err := json.Unmarshal([]byte(out), &views); err != nil || len(views) != 1 {
		t.Fatalf("show --json: %v\n%s", err, out)
	}
	job, _ := views[0]["job"].(map[string]any)
	hdr, _ := views[0]["headers"].(map[string]any)
	if views[0]["reason"] != "rejected" || job["to"] != "+4477•••••23" || job["id"] != "d1" || hdr["Notifier-Reason"] != "rejected" {
		t.Errorf("show --json: %v", views[0])
	}

	_, errOut, code := b.dead(t, "", "show", "nope")
	if code != 1 || !strings.Contains(errOut, `no dead letter with sequence or job id "nope"`) {
		t.Errorf("show of nothing: exit %d %s", code, errOut)
	}
	if _, _, code := b.dead(t, "", "show"); code != 2 {
		t.Errorf("show without an argument: exit %d, want 2", code)
	}
	// A job id of digits: a sequence first, a job id with --id.
	b.store(t, queue.Dead, "notify.jobs.sms", deadJob("sms", "424242", ""), "rejected", "x")
	if out := b.deadOK(t, "", "show", "424242"); !strings.Contains(out, "job id:    424242") {
		t.Errorf("show of a numeric job id (no such sequence):\n%s", out)
	}
	if out := b.deadOK(t, "", "show", "--id", "424242"); !strings.Contains(out, "job id:    424242") {
		t.Errorf("show --id:\n%s", out)
	}
}

// TestDeadReplayDryRunPromptKeep: a dry run changes nothing; a selection
// over 20 asks, and "n" (or no answer) replays nothing; "y" replays every
// job with its ledger reset, a new Nats-Msg-Id and the Notifier-Replayed
// header, and deletes the dead letters, so a second run replays nothing;
// invalid jobs are skipped unless asked for; --keep keeps the letters.
func TestDeadReplayDryRunPromptKeep(t *testing.T) {
	t.Parallel()
	b := newDeadBench(t, 100, "")
	var originals []string
	for i := range 25 {
		data := deadJob("sms", fmt.Sprintf("r%02d", i), "")
		originals = append(originals, data)
		b.store(t, queue.Dead, "notify.jobs.sms", data, "rejected", "provider sms-gw answered 400")
	}
	b.store(t, queue.Dead, "notify.jobs.sms", "not json", "invalid", "not valid JSON")
	b.store(t, queue.Dead, "notify.jobs.sms", `{"id":"inv-2","channel":"sms"}`, "invalid", "user_id: required")
	// r00 failed twice before it died: the replay must forget that.
	ctx := testCtx(t)
	for range 2 {
		if _, err := b.ledger.Claim(ctx, "r00", "test", time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := b.ledger.Failed(ctx, "r00", "test", "5xx"); err != nil {
			t.Fatal(err)
		}
	}
	rdb := b.redis.Client()
	defer rdb.Close()
	ledgerRecord := func() int64 { return rdb.Exists(ctx, ledger.Key("notifier:", "r00")).Val() }
	unchanged := func(when string) {
		t.Helper()
		if n := b.msgs(t, "NOTIFY"); n != 0 {
			t.Fatalf("%s: NOTIFY holds %d jobs", when, n)
		}
		if n := b.msgs(t, "NOTIFY_DEAD"); n != 27 {
			t.Fatalf("%s: NOTIFY_DEAD holds %d letters, want 27", when, n)
		}
		if ledgerRecord() != 1 {
			t.Fatalf("%s: the ledger record of r00 is gone", when)
		}
	}

	out := b.deadOK(t, "", "replay", "--dry-run")
	if !strings.Contains(out, "dry run: would replay 25, skip 2 invalid, skip 0 expired; nothing changed") ||
		!strings.Contains(out, "2 invalid jobs skipped") || len(strings.Split(tableIDs(out), ",")) != 25 {
		t.Fatalf("dry run:\n%s", out)
	}
	unchanged("after a dry run")

	for _, answer := range []string{"n\n", "", "nope\n"} {
		out, errOut, code := b.dead(t, answer, "replay")
		if code != 1 || !strings.Contains(out, "replay 25 jobs? [y/N]") || !strings.Contains(errOut, "replay not confirmed: nothing replayed") {
			t.Fatalf("answer %q: exit %d\n%s%s", answer, code, out, errOut)
		}
		unchanged(fmt.Sprintf("after answering %q", answer))
	}

	out = b.deadOK(t, "y\n", "replay")
	if !strings.Contains(out, "replayed 25, already sent 0 (not resent), skipped invalid 2, skipped expired 0, failed 0") {
		t.Fatalf("replay:\n%s", out)
	}
	if ledgerRecord() != 0 {
		t.Error("the ledger record of r00 was not reset")
	}
	if n := b.msgs(t, "NOTIFY_DEAD"); n != 2 {
		t.Errorf("NOTIFY_DEAD holds %d letters after the replay, want the 2 invalid ones", n)
	}
	jobs := b.jobStream(t)
	if len(jobs) != 25 {
		t.Fatalf("NOTIFY holds %d jobs, want 25", len(jobs))
	}
	for i, m := range jobs {
		id := fmt.Sprintf("r%02d", i)
		if string(m.Data) != originals[i] || m.Subject != "notify.jobs.sms" {
			t.Errorf("job %d: %s %q, want the original bytes on notify.jobs.sms", i, m.Subject, m.Data)
		}
		if msgID := m.Header.Get(jetstream.MsgIDHeader); !strings.HasPrefix(msgID, id+":replay:") {
			t.Errorf("job %s: Nats-Msg-Id %q", id, msgID)
		}
		if at, err := time.Parse(time.RFC3339, m.Header.Get(ledger.HeaderReplayed)); err != nil || time.Since(at) > time.Minute {
			t.Errorf("job %s: %s %q (%v)", id, ledger.HeaderReplayed, m.Header.Get(ledger.HeaderReplayed), err)
		}
	}

	out = b.deadOK(t, "", "replay", "--yes")
	if !strings.Contains(out, "replayed 0, already sent 0 (not resent), skipped invalid 2") {
		t.Fatalf("second replay:\n%s", out)
	}

	out = b.deadOK(t, "", "replay", "--include-invalid", "--keep")
	if !strings.Contains(out, "replayed 2, already sent 0 (not resent), skipped invalid 0") || !strings.Contains(out, "(dead letter kept)") {
		t.Fatalf("replay --include-invalid --keep:\n%s", out)
	}
	if n, m := b.msgs(t, "NOTIFY_DEAD"), b.msgs(t, "NOTIFY"); n != 2 || m != 27 {
		t.Fatalf("after --keep: NOTIFY_DEAD %d (want 2), NOTIFY %d (want 27)", n, m)
	}
	// The job with no id to track gets a Nats-Msg-Id from its dead letter.
	noID := b.jobStream(t)[25]
	if string(noID.Data) != "not json" || !strings.HasPrefix(noID.Header.Get(jetstream.MsgIDHeader), "replay:NOTIFY_DEAD:") {
		t.Errorf("an invalid job without a valid id: %q, Nats-Msg-Id %q", noID.Data, noID.Header.Get(jetstream.MsgIDHeader))
	}

	if _, errOut, code := b.dead(t, "", "replay", "--kind", "everything"); code != 2 {
		t.Errorf("replay --kind everything: exit %d %s", code, errOut)
	}
}

// TestDeadReplayNeverResendsASentJob: a dead letter of a job the ledger
// says was sent is not republished, and is kept.
func TestDeadReplayNeverResendsASentJob(t *testing.T) {
	t.Parallel()
	b := newDeadBench(t, 100, "")
	b.store(t, queue.Dead, "notify.jobs.sms", deadJob("sms", "s1", ""), "max_attempts", "3 transient provider failures")
	b.store(t, queue.Dead, "notify.jobs.sms", deadJob("sms", "s2", ""), "max_attempts", "3 transient provider failures")
	ctx := testCtx(t)
	if _, err := b.ledger.Claim(ctx, "s1", "test", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := b.ledger.Sent(ctx, "s1", "test"); err != nil {
		t.Fatal(err)
	}
	out := b.deadOK(t, "", "replay", "--yes")
	if !strings.Contains(out, "replayed 1, already sent 1 (not resent), skipped invalid 0, skipped expired 0, failed 0") ||
		!strings.Contains(out, "job s1: the ledger says it was sent; not resent, dead letter kept") {
		t.Fatalf("replay:\n%s", out)
	}
	jobs := b.jobStream(t)
	if len(jobs) != 1 || !strings.Contains(string(jobs[0].Data), `"id":"s2"`) {
		t.Fatalf("NOTIFY holds %d jobs, want s2 only", len(jobs))
	}
	if got := tableIDs(b.deadOK(t, "", "list")); got != "s1" {
		t.Fatalf("dead letters left: %s, want s1", got)
	}
	if sent, err := b.ledger.ResetForReplay(ctx, "s1"); err != nil || !sent {
		t.Fatalf("the ledger no longer says s1 was sent: %v %v", sent, err)
	}
}

// ---- with a running dispatcher ----

// withMetrics gives the world's `notifier run` a known metrics port and
// returns a function that reads /metrics.
func withMetrics(t *testing.T, w *world) func() string {
	t.Helper()
	port := testenv.FreePort(t)
	setMetricsPort(t, w, port)
	return func() string {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
}

// publishJobs publishes NDJSON lines through the CLI.
func (b *deadBench) publishJobs(t *testing.T, lines ...string) {
	t.Helper()
	out, errOut, code := runCLI(t, nil, strings.Join(lines, "\n"), "publish", "--config", b.config, "--file", "-", "--quiet")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("published %d,", len(lines))) {
		t.Fatalf("publish: exit %d\n%s%s", code, out, errOut)
	}
}

func (b *deadBench) accepted(id string) int {
	n := 0
	for _, x := range b.fake.AcceptedIDs() {
		if x == id {
			n++
		}
	}
	return n
}

// waitLetters waits until the filter selects n dead letters.
func (b *deadBench) waitLetters(t *testing.T, f queue.DeadFilter, n int, what string) []*queue.DeadLetter {
	t.Helper()
	var ls []*queue.DeadLetter
	testenv.WaitFor(t, 60*time.Second, what, func() bool {
		var err error
		ls, _, err = b.reader.List(testCtx(t), f)
		return err == nil && len(ls) == n
	})
	return ls
}

// TestDeadReplayRejectedSendsOnce: a job the provider refuses is
// dead-lettered with reason rejected; replayed, it is sent exactly once and
// counted in notifier_replays_total; a second replay replays nothing.
func TestDeadReplayRejectedSendsOnce(t *testing.T) {
	t.Parallel()
	b := newDeadBench(t, 100, "")
	metrics := withMetrics(t, b.world)
	b.fake.FailNext(1, http.StatusBadRequest)
	b.run()
	b.publishJobs(t, deadJob("sms", "rj1", ""))
	b.waitLetters(t, queue.DeadFilter{JobID: "rj1"}, 1, "rj1 dead-lettered")

	out := b.deadOK(t, "", "list")
	if tableIDs(out) != "rj1" || !strings.Contains(out, "rejected") || !strings.Contains(out, "dead ") {
		t.Fatalf("list:\n%s", out)
	}
	if n := b.accepted("rj1"); n != 0 {
		t.Fatalf("rj1 accepted %d times before the replay", n)
	}

	out = b.deadOK(t, "", "replay", "--yes")
	if !strings.Contains(out, "replayed 1, already sent 0 (not resent), skipped invalid 0, skipped expired 0, failed 0") {
		t.Fatalf("replay:\n%s", out)
	}
	testenv.WaitFor(t, 30*time.Second, "rj1 sent after the replay", func() bool { return b.accepted("rj1") == 1 })
	testenv.WaitFor(t, 10*time.Second, "the replay counted", func() bool {
		return strings.Contains(metrics(), `notifier_replays_total{channel="sms"} 1`)
	})
	if out := b.deadOK(t, "", "list"); !strings.Contains(out, "no dead letters match") {
		t.Fatalf("list after the replay:\n%s", out)
	}
	out = b.deadOK(t, "", "replay", "--yes")
	if !strings.Contains(out, "replayed 0, already sent 0") {
		t.Fatalf("second replay:\n%s", out)
	}
	testenv.WaitFor(t, 10*time.Second, "job stream empty", func() bool { return b.remaining() == 0 })
	if n := b.accepted("rj1"); n != 1 {
		t.Fatalf("rj1 accepted %d times, want exactly 1", n)
	}
	if n := len(b.fake.Requests()); n != 2 {
		t.Fatalf("the provider saw %d requests, want 2 (the refusal and the replay)", n)
	}
}

// TestDeadReplayAfterMaxAttempts: a job dead after retry.max_attempts
// transient failures is replayed with its attempts forgotten (else the
// dispatcher would dead-letter it again at once without a send) and sent.
func TestDeadReplayAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	b := newDeadBench(t, 100, "")
	b.fake.FailFor(time.Hour, http.StatusServiceUnavailable)
	b.run("NOTIFIER_RETRY_MAX_ATTEMPTS=3")
	b.publishJobs(t, deadJob("sms", "ma1", ""))
	ls := b.waitLetters(t, queue.DeadFilter{JobID: "ma1"}, 1, "ma1 dead after 3 attempts")
	if ls[0].Reason != "max_attempts" || !strings.Contains(ls[0].Detail, "3 transient provider failures") {
		t.Fatalf("dead letter: %s %q", ls[0].Reason, ls[0].Detail)
	}
	if n := b.fake.Count(http.StatusServiceUnavailable); n != 3 {
		t.Fatalf("the provider answered 503 %d times, want 3", n)
	}
	b.fake.Reset()
	out := b.deadOK(t, "", "replay", "--yes", "--reason", "max_attempts")
	if !strings.Contains(out, "replayed 1,") {
		t.Fatalf("replay:\n%s", out)
	}
	testenv.WaitFor(t, 30*time.Second, "ma1 sent after the replay", func() bool { return b.accepted("ma1") == 1 })
	testenv.WaitFor(t, 10*time.Second, "job stream empty", func() bool { return b.remaining() == 0 })
	if ls := b.letters(t, queue.DeadFilter{}); len(ls) != 0 {
		t.Fatalf("%d dead letters after the replay", len(ls))
	}
	if n := b.accepted("ma1"); n != 1 {
		t.Fatalf("ma1 accepted %d times", n)
	}
}

// TestDeadReplaySuppressed: jobs dropped by a per-user cap and by their
// expiry are listed as suppressed; replay leaves them alone by default
// (--kind dead); with --kind suppressed the capped one is sent once the
// cap's window has passed, and the expired one is skipped unless
// --include-expired, when the dispatcher suppresses it again.
func TestDeadReplaySuppressed(t *testing.T) {
	t.Parallel()
	b := newDeadBench(t, 100, "user_limits:\n  sms: {limit: 1, window: 2s, algorithm: sliding_log, on_exceed: drop}\n")
	b.run()
	b.publishJobs(t,
		deadJob("sms", "c1", ""),
		deadJob("sms", "c2", ""),
		strings.Replace(deadJob("sms", "e1", `,"expires_at":"2020-01-01T00:00:00Z"`), `"u1"`, `"u2"`, 1),
	)
	b.waitLetters(t, queue.DeadFilter{Kind: queue.Suppressed}, 2, "one capped and one expired job suppressed")
	testenv.WaitFor(t, 30*time.Second, "one of c1, c2 sent", func() bool { return len(b.fake.AcceptedIDs()) == 1 })
	firstSent := b.fake.Accepted()[0]
	capped := "c1"
	if firstSent.ID == "c1" {
		capped = "c2"
	}

	out := b.deadOK(t, "", "list", "--kind", "suppressed")
	if !strings.Contains(out, "user_limit") || !strings.Contains(out, "expired") || !strings.Contains(out, "2 dead letters (0 dead, 2 suppressed)") {
		t.Fatalf("list --kind suppressed:\n%s", out)
	}
	if out := b.deadOK(t, "", "list", "--kind", "dead"); !strings.Contains(out, "no dead letters match") {
		t.Fatalf("list --kind dead:\n%s", out)
	}
	if out := b.deadOK(t, "", "replay", "--yes"); !strings.Contains(out, "replayed 0,") {
		t.Fatalf("replay of --kind dead (the default) replayed something:\n%s", out)
	}

	// The cap's 2 s window must have passed since the first send.
	testenv.WaitFor(t, 10*time.Second, "the cap's window passed", func() bool { return time.Since(firstSent.At) > 2500*time.Millisecond })
	out = b.deadOK(t, "", "replay", "--kind", "suppressed", "--yes")
	if !strings.Contains(out, "replayed 1, already sent 0 (not resent), skipped invalid 0, skipped expired 1, failed 0") ||
		!strings.Contains(out, "1 expired jobs skipped") {
		t.Fatalf("replay --kind suppressed:\n%s", out)
	}
	testenv.WaitFor(t, 30*time.Second, capped+" sent after the replay", func() bool { return b.accepted(capped) == 1 })

	expired := b.letters(t, queue.DeadFilter{Reason: "expired"})
	if len(expired) != 1 || expired[0].JobID != "e1" {
		t.Fatalf("expired letters: %d", len(expired))
	}
	out = b.deadOK(t, "", "replay", "--kind", "suppressed", "--include-expired", "--yes")
	if !strings.Contains(out, "replayed 1,") {
		t.Fatalf("replay --include-expired:\n%s", out)
	}
	var again []*queue.DeadLetter
	testenv.WaitFor(t, 30*time.Second, "e1 suppressed again", func() bool {
		again = b.letters(t, queue.DeadFilter{Reason: "expired"})
		return len(again) == 1 && again[0].Seq > expired[0].Seq
	})
	if again[0].JobID != "e1" || b.accepted("e1") != 0 {
		t.Fatalf("e1: letter %s, accepted %d times", again[0].JobID, b.accepted("e1"))
	}
	if n := len(b.fake.AcceptedIDs()); n != 2 {
		t.Fatalf("the provider accepted %d jobs, want 2 (c1 and c2)", n)
	}
}

// TestDeadShowZeroAndHugeLimit: "0" is a valid job id, and no dead letter
// has sequence 0, so `dead show 0` falls back to the job id as any other
// all-digit argument does (it failed on the server's "bad request"); a
// --limit as large as an int lists everything (its batch size overflowed).
// Both found in review.
func TestDeadShowZeroAndHugeLimit(t *testing.T) {
	t.Parallel()
	b := newDeadBench(t, 100, "")
	b.store(t, queue.Dead, "notify.jobs.sms", deadJob("sms", "0", ""), "rejected", "x")
	if out, errOut, code := b.dead(t, "", "show", "0"); code != 0 || !strings.Contains(out, "job id:    0") {
		t.Errorf("dead show 0: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := b.dead(t, "", "list", "--limit", "9223372036854775807"); code != 0 || tableIDs(out) != "0" {
		t.Errorf("dead list --limit 9223372036854775807: exit %d, listed %q\n%s%s", code, tableIDs(out), out, errOut)
	}
}
