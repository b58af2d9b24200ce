package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// replayEnv is a JetStream server with the notifier's streams, a
// publisher and the dead letters on them, and a ledger in a private Redis;
// ctx ends with the test (a minute at most).
type replayEnv struct {
	ctx  context.Context
	js   jetstream.JetStream
	cfg  queue.Config
	pub  *queue.Publisher
	dead *queue.DeadLetters
	led  *ledger.Redis
}

func replaySetup(t *testing.T) replayEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	js, err := jetstream.New(testenv.NATS(t).Conn())
	if err != nil {
		t.Fatal(err)
	}
	cfg := queue.Config{}.WithDefaults()
	if err := queue.EnsureStreams(ctx, js, cfg, 1); err != nil {
		t.Fatal(err)
	}
	return replayEnv{ctx: ctx, js: js, cfg: cfg, pub: queue.NewPublisher(js), dead: queue.NewDeadLetters(js, cfg),
		led: ledger.NewRedis(testenv.Redis(t).Client(), newPrefix(t.Name()), time.Hour)}
}

// TestReplayRepublishesOnceAndNeverASentJob: a plan skips an invalid and
// an expired job unless asked; a replay republishes the others once with
// their bytes, resets their ledger records, deletes their dead letters
// (keeps them with Keep), never republishes a job the ledger says was
// sent, and a second replay of the same selection finds nothing to do.
func TestReplayRepublishesOnceAndNeverASentJob(t *testing.T) {
	t.Parallel()
	e := replaySetup(t)
	ctx, js, cfg, pub, dead, led := e.ctx, e.js, e.cfg, e.pub, e.dead, e.led
	store := func(seq uint64, o queue.Outcome, id, reason string) {
		t.Helper()
		data := fmt.Sprintf(`{"id":%q,"user_id":"u1","channel":"sms","to":"+15550000000","body":"hi"}`, id)
		d := &queue.Delivery{Subject: "notify.jobs.sms", Data: []byte(data), Channel: "sms", Stream: cfg.Stream, StreamSeq: seq, Published: time.Now()}
		if err := pub.DeadLetter(ctx, d, o, reason, "test"); err != nil {
			t.Fatal(err)
		}
	}
	store(1, queue.Dead, "j-failed", ledger.ReasonMaxAttempts)
	store(2, queue.Dead, "j-invalid", ledger.ReasonInvalid)
	store(3, queue.Suppressed, "j-expired", ledger.ReasonExpired)
	store(4, queue.Dead, "j-sent", ledger.ReasonMaxAttempts)
	store(5, queue.Dead, "j-kept", ledger.ReasonMaxAttempts)
	if _, err := led.Failed(ctx, "j-failed", "", "5xx"); err != nil {
		t.Fatal(err)
	}
	if err := led.Sent(ctx, "j-sent", ""); err != nil {
		t.Fatal(err)
	}

	all := queue.DeadFilter{}
	var todo []string
	plan, err := inspect.PlanReplay(ctx, dead, all, inspect.ReplayOptions{}, func(d *queue.DeadLetter) { todo = append(todo, d.JobID) })
	if err != nil {
		t.Fatal(err)
	}
	if s := plan.Summary; s.Selected != 5 || s.SkippedInvalid != 1 || s.SkippedExpired != 1 || s.Replayed != 3 || !slices.Equal(todo, []string{"j-failed", "j-sent", "j-kept"}) {
		t.Fatalf("plan: %+v, to replay %v", s, todo)
	}
	// Keep the last one's dead letter: replay j-kept alone first.
	keepPlan, err := inspect.PlanReplay(ctx, dead, queue.DeadFilter{JobID: "j-kept"}, inspect.ReplayOptions{}, nil)
	if err != nil || keepPlan.Summary.Replayed != 1 {
		t.Fatalf("j-kept's plan: %+v, %v", keepPlan.Summary, err)
	}
	if _, err := inspect.Replay(ctx, dead, led, keepPlan, inspect.ReplayOptions{Keep: true}, nil); err != nil {
		t.Fatal(err)
	}
	// The plan's letters are those up to j-sent's (stored 4th): as a plan
	// made then, before j-kept's was stored.
	letters, _, err := dead.List(ctx, queue.DeadFilter{JobID: "j-sent"})
	if err != nil || len(letters) != 1 {
		t.Fatalf("j-sent's letter: %d, %v", len(letters), err)
	}
	plan.Filter.UpTo = letters[0].Seq
	var results []inspect.ReplayResult
	s, err := inspect.Replay(ctx, dead, led, plan, inspect.ReplayOptions{}, func(r inspect.ReplayResult) { results = append(results, r) })
	if err != nil {
		t.Fatal(err)
	}
	if s.Replayed != 1 || s.AlreadySent != 1 || s.Failed != 0 || len(results) != 2 {
		t.Fatalf("replay: %+v, results %+v", s, results)
	}
	if r := results[0]; r.Letter.JobID != "j-failed" || r.Outcome != inspect.Replayed || r.Subject != "notify.jobs.sms" || r.Kept {
		t.Errorf("j-failed: %+v", r)
	}
	if r := results[1]; r.Letter.JobID != "j-sent" || r.Outcome != inspect.AlreadySent {
		t.Errorf("j-sent: %+v", r)
	}
	if rec, err := led.Record(ctx, "j-failed"); err != nil || rec.Attempts != 0 {
		t.Errorf("j-failed's ledger after the replay: %+v, %v; want its attempts reset", rec, err)
	}
	info, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := info.Info(ctx); err != nil || st.State.Msgs != 2 {
		t.Fatalf("NOTIFY holds %v messages (%v), want 2: j-kept and j-failed", st.State.Msgs, err)
	}
	// Left: invalid, expired, j-sent (never resent) and j-kept (Keep).
	again, err := inspect.PlanReplay(ctx, dead, all, inspect.ReplayOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.Summary.Selected != 4 || again.Summary.Replayed != 2 {
		t.Fatalf("the second plan: %+v", again.Summary)
	}
	ctxDone, stop := context.WithCancel(ctx)
	stop()
	if _, err := inspect.Replay(ctxDone, dead, led, again, inspect.ReplayOptions{}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("a replay on an ended context: %v, want context.Canceled", err)
	}
}

// TestReplayOfATenantsJobUsesItsOwnLedgerRecord: a named tenant's dead
// job is replayed against its own ledger record (<tenant>/<id>), as the
// dispatcher keys it: its failures are reset, and the default tenant's
// job of the same id, sent, neither stops the replay nor is touched.
func TestReplayOfATenantsJobUsesItsOwnLedgerRecord(t *testing.T) {
	t.Parallel()
	e := replaySetup(t)
	ctx, cfg, pub, dead, led := e.ctx, e.cfg, e.pub, e.dead, e.led
	for range 3 {
		if _, err := led.Failed(ctx, queue.MsgID("acme", "x"), "", "5xx"); err != nil {
			t.Fatal(err)
		}
	}
	if err := led.Sent(ctx, "x", ""); err != nil { // the default tenant's x
		t.Fatal(err)
	}
	data := `{"id":"x","user_id":"u1","channel":"sms","to":"+15550000000","body":"hi"}`
	d := &queue.Delivery{Subject: "notify.jobs.sms.t.acme", Data: []byte(data), Channel: "sms", Stream: cfg.Stream, StreamSeq: 7, Published: time.Now()}
	if err := pub.DeadLetter(ctx, d, queue.Dead, ledger.ReasonMaxAttempts, "test"); err != nil {
		t.Fatal(err)
	}
	var tenants []string
	plan, err := inspect.PlanReplay(ctx, dead, queue.DeadFilter{Tenant: "acme"}, inspect.ReplayOptions{}, func(d *queue.DeadLetter) { tenants = append(tenants, d.Tenant) })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tenants, []string{"acme"}) {
		t.Fatalf("plan: %+v", plan.Summary)
	}
	var results []inspect.ReplayResult
	if _, err := inspect.Replay(ctx, dead, led, plan, inspect.ReplayOptions{}, func(r inspect.ReplayResult) { results = append(results, r) }); err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 || results[0].Outcome != inspect.Replayed {
		t.Errorf("acme's dead job x: %+v, want replayed", results)
	}
	if rec, err := led.Record(ctx, queue.MsgID("acme", "x")); err != nil || rec.Attempts != 0 {
		t.Errorf("acme/x's record after the replay: %d attempts (%v), want its attempts reset", rec.Attempts, err)
	}
	if rec, err := led.Record(ctx, "x"); err != nil || !rec.Sent {
		t.Errorf("the default tenant's x after the replay: %+v (%v), want it untouched, sent", rec, err)
	}
}

// TestReplayTakesNoLetterStoredAfterItsPlan: a replay reads the plan's
// selection again as it goes (it holds no letter); a letter stored after
// the plan was counted, and so not confirmed, is left for the next one.
func TestReplayTakesNoLetterStoredAfterItsPlan(t *testing.T) {
	t.Parallel()
	e := replaySetup(t)
	ctx, cfg, pub, dead, led := e.ctx, e.cfg, e.pub, e.dead, e.led
	store := func(seq uint64, id string) {
		t.Helper()
		data := fmt.Sprintf(`{"id":%q,"user_id":"u1","channel":"sms","to":"+15550000000","body":"hi"}`, id)
		d := &queue.Delivery{Subject: "notify.jobs.sms", Data: []byte(data), Channel: "sms", Stream: cfg.Stream, StreamSeq: seq, Published: time.Now()}
		if err := pub.DeadLetter(ctx, d, queue.Dead, ledger.ReasonMaxAttempts, "test"); err != nil {
			t.Fatal(err)
		}
	}
	store(1, "before-1")
	store(2, "before-2")
	plan, err := inspect.PlanReplay(ctx, dead, queue.DeadFilter{}, inspect.ReplayOptions{}, nil)
	if err != nil || plan.Summary.Replayed != 2 {
		t.Fatalf("plan: %+v, %v", plan.Summary, err)
	}
	store(3, "after")
	var got []string
	s, err := inspect.Replay(ctx, dead, led, plan, inspect.ReplayOptions{}, func(r inspect.ReplayResult) { got = append(got, r.Letter.JobID) })
	if err != nil || s.Replayed != 2 || !slices.Equal(got, []string{"before-1", "before-2"}) {
		t.Fatalf("replay: %+v, %v, replayed %v; want before-1 and before-2 only", s, err, got)
	}
	if left, _, err := dead.List(ctx, queue.DeadFilter{}); err != nil || len(left) != 1 || left[0].JobID != "after" {
		t.Fatalf("left: %d letters (%v), want after's alone", len(left), err)
	}
}
