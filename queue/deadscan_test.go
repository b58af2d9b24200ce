package queue_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// fillDead stores n dead letters on notify.dead.sms, as the dispatcher
// would (reason, detail and subject headers; the job's bytes), published
// asynchronously. Job ids are "j-<i>", users "u-<i>".
func fillDead(t *testing.T, b *bundle, n int) {
	t.Helper()
	c := ctx(t)
	testenv.PublishAll(c, t, b.js, n, func(i int) *nats.Msg {
		m := &nats.Msg{Subject: queue.DeadSubject("sms"), Header: nats.Header{},
			Data: []byte(fmt.Sprintf(`{"id":"j-%d","user_id":"u-%d","channel":"sms","to":"+15550000000","body":"hello there, this is message %d"}`, i, i, i))}
		m.Header.Set(queue.HeaderReason, "max_attempts")
		m.Header.Set(queue.HeaderDetail, "8 transient provider failures")
		m.Header.Set(queue.HeaderSubject, "notify.jobs.sms")
		return m
	})
	s, err := b.js.Stream(c, b.cfg.DeadStream)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().State.Msgs; got != uint64(n) {
		t.Fatalf("dead stream holds %d letters, want %d", got, n)
	}
}

// fastBundle is setup's bundle on a private server that does not sync
// every write (testenv.JetStreamNoSync): 20,000 letters are stored in a
// second. The streams are the same.
func fastBundle(t *testing.T) *bundle {
	t.Helper()
	n, nc, js := testenv.JetStreamNoSync(t)
	cfg := queue.Config{URL: n.URL()}.WithDefaults()
	if err := queue.EnsureStreams(ctx(t), js, cfg, 1); err != nil {
		t.Fatalf("EnsureStreams: %v", err)
	}
	return &bundle{nc: nc, js: js, cfg: cfg, pub: queue.NewPublisher(js)}
}

// scaleLetters is how many dead letters the scale test stores: 20,000,
// twenty times the read it bounds (NOTIFIER_SCALE_LETTERS overrides).
func scaleLetters() int {
	if n, err := strconv.Atoi(os.Getenv("NOTIFIER_SCALE_LETTERS")); err == nil && n > 0 {
		return n
	}
	return 20_000
}

// TestDeadLetterOfOneJobReadsNotTheWholeStream: finding one job's dead
// letters (`notifier dead show <job-id>`, `dead list --id`, `explain --job`
// and the metrics port's /explain?job=, which call List with JobID) must
// not read every dead letter of the stream. Today it reads them all: the
// dead-letter subjects name only the channel, and the job id is matched by
// the reader, so 100,000 letters are 100,000 messages read (and decoded)
// TestDeadLettersLastReadsOnlyTheNewest: the dead-letter subjects name
// only the channel, so a job's letters are matched by the reader; `explain
// --job` and the metrics port's /explain?job= looked for them in the whole
// stream (100,000 letters: 100,003 messages, 24 MB read for one answer, a
// request to the metrics port too). DeadFilter.Last bounds the read to
// the newest Last letters: a recent job's letter is found for about Last
// messages read, an older one is not listed; Last with Since, or negative,
// is refused.
func TestDeadLettersLastReadsOnlyTheNewest(t *testing.T) {
	b := fastBundle(t)
	n := scaleLetters()
	fillDead(t, b, n)
	dead := queue.NewDeadLetters(b.js, b.cfg)
	recent := fmt.Sprintf("j-%d", n-10)
	before := b.nc.Stats()
	letters, _, err := dead.List(ctx(t), queue.DeadFilter{JobID: recent, Last: 1000})
	if err != nil {
		t.Fatal(err)
	}
	after := b.nc.Stats()
	if len(letters) != 1 || letters[0].JobID != recent {
		t.Fatalf("found %d letters for %s among the newest 1000, want 1", len(letters), recent)
	}
	read := after.InMsgs - before.InMsgs
	t.Logf("one job's dead letter among the newest 1000 of %d: %d messages, %d bytes read", n, read, after.InBytes-before.InBytes)
	if read > 1000+200 {
		t.Errorf("finding job %s's letter among the newest 1000 of %d read %d messages (%d bytes)", recent, n, read, after.InBytes-before.InBytes)
	}
	if letters, _, err := dead.List(ctx(t), queue.DeadFilter{JobID: "j-5", Last: 1000}); err != nil || len(letters) != 0 {
		t.Errorf("an old letter among the newest 1000: %d found (%v), want none", len(letters), err)
	}
	if letters, _, err := dead.List(ctx(t), queue.DeadFilter{JobID: "j-5", Last: n}); err != nil || len(letters) != 1 {
		t.Errorf("an old letter among the newest %d (all): %d found (%v), want 1", n, len(letters), err)
	}
	for _, f := range []queue.DeadFilter{{Last: -1}, {Last: 10, Since: time.Now()}} {
		if _, _, err := dead.List(ctx(t), f); err == nil || !strings.Contains(err.Error(), "last:") {
			t.Errorf("List(%+v): %v, want an error about last", f, err)
		}
	}
}

// TestDeadLettersLastCountsLettersNotSequences: DeadFilter.Last (explain
// --job's "newest --scan letters", the /explain endpoint's 100,000) looks
// among the newest Last letters of the stream, not sequences. A replay
// deletes the letters it republishes, leaving gaps: with the newest 20 of
// 30 deleted, a letter at sequence 5 is among the 10 left, and Last: 10
// started the read at sequence 21 and found nothing (found by review);
// with 11 to 20 deleted, the newest 15 letters are 6 to 10 and 21 to 30.
func TestDeadLettersLastCountsLettersNotSequences(t *testing.T) {
	for _, c := range []struct {
		name       string
		del        [2]uint64 // sequences deleted, first to last
		last       int
		in, beyond string // a job whose letter is among the newest last, and one just past them
	}{
		{"the newest deleted", [2]uint64{11, 30}, 10, "j-4", ""},
		{"gaps among them", [2]uint64{11, 20}, 15, "j-5", "j-4"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := fastBundle(t)
			fillDead(t, b, 30)
			dead := queue.NewDeadLetters(b.js, b.cfg)
			for seq := c.del[0]; seq <= c.del[1]; seq++ {
				if err := dead.Delete(ctx(t), seq); err != nil {
					t.Fatal(err)
				}
			}
			if letters, _, err := dead.List(ctx(t), queue.DeadFilter{JobID: c.in, Last: c.last}); err != nil || len(letters) != 1 {
				t.Errorf("job %s's letter is among the newest %d letters, but Last: %d found %d (%v)", c.in, c.last, c.last, len(letters), err)
			}
			if c.beyond == "" {
				return
			}
			if letters, _, err := dead.List(ctx(t), queue.DeadFilter{JobID: c.beyond, Last: c.last}); err != nil || len(letters) != 0 {
				t.Errorf("job %s's letter is past the newest %d letters, but Last: %d found %d (%v)", c.beyond, c.last, c.last, len(letters), err)
			}
		})
	}
}
