package queue

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/testenv"
)

// TestFindWaitingStepsOverAGap: a run of acknowledged sequences many
// chunks long costs the scan a get per worker, not one per chunk. Each
// chunk past the gap asked for the same distant message again and stopped
// (a gap of 10 million sequences: about 20,000 uncounted gets; found in
// review).
func TestFindWaitingStepsOverAGap(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := testenv.NATS(t)
	nc := srv.Conn()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The job stream's subjects in memory: 30,000 publishes to a file
	// store take half a minute under the race detector.
	cfg := Config{URL: srv.URL()}.WithDefaults()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: cfg.Stream, Subjects: []string{"notify.jobs.>"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	to := map[string]string{"sms": "+14155550123", "push": "device-token-0123456789", "email": "a@example.com"}
	publish := func(channel, prefix string, n int) {
		t.Helper()
		for i := range n {
			data := fmt.Appendf(nil, `{"id":"%s-%d","user_id":"u","channel":%q,"to":%q,"body":"x"}`, prefix, i, channel, to[channel])
			if err := nc.Publish(JobSubject(channel, false), data); err != nil {
				t.Fatal(err)
			}
		}
	}
	// 10 jobs, a gap of 30,000 sequences (about 59 chunks, far more than
	// the 8 workers take at once), 10 jobs.
	const edge, gap = 10, 30_000
	publish("sms", "before", edge)
	publish("push", "gap", gap)
	publish("email", "after", edge)
	if err := nc.FlushWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 2*edge+gap {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(JobSubject("push", false))); err != nil {
		t.Fatal(err)
	}
	// Each read: every message once, plus at most a get per worker that
	// lands in the gap and one that finds the stream's end.
	bound := uint64(2*edge + 2*scanWorkers + 2)
	for _, tc := range []struct {
		id, channel string
	}{{"before-3", "sms"}, {"after-9", "email"}, {"gap-5", ""}} {
		scan, gets, err := findWaiting(ctx, js, cfg, "", tc.id, 0)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case tc.channel != "" && (scan.Job == nil || scan.Job.Channel != tc.channel):
			t.Errorf("%s: %+v, want found on %s", tc.id, scan, tc.channel)
		case tc.channel == "" && (scan.Job != nil || !scan.Complete || scan.Scanned != 2*edge || scan.InStream != 2*edge):
			t.Errorf("%s (purged): %+v, want not found after all %d", tc.id, scan, 2*edge)
		}
		if gets > bound {
			t.Errorf("%s: %d gets of a stream of %d messages over a gap of %d sequences, want at most %d", tc.id, gets, 2*edge, gap, bound)
		}
	}
}
