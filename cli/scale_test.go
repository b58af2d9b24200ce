package cli

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// scaleNATS is a private JetStream server with the notifier's streams that
// does not sync every write (testenv.JetStreamNoSync), so that 100,000
// messages are stored in seconds; a connection to it and its JetStream
// context.
func scaleNATS(t *testing.T) (*nats.Conn, jetstream.JetStream, queue.Config) {
	t.Helper()
	n, nc, js := testenv.JetStreamNoSync(t)
	cfg := queue.Config{URL: n.URL()}.WithDefaults()
	if err := queue.EnsureStreams(testCtx(t), js, cfg, 1); err != nil {
		t.Fatal(err)
	}
	return nc, js, cfg
}

// TestStatusWaitingDoesNotListEveryTenant: `notifier status --nats` prints
// the jobs waiting in the job stream by channel, every second. Jobs
// published on tenants' own subjects (notify.jobs.<channel>.t.<tenant>,
// SPEC §3) wait there until the router moves them to the fair lanes: while
// the fleet is stopped, or behind, with 100,000 tenants that is 100,000
// subjects. printWaiting asks the stream for the count of every subject
// under notify.jobs.>, which the server answers subject by subject (pages
// of 100,000): the bytes read grow with the tenants, to print three
// numbers. The dispatcher's own look (Consumer.Queues) asks only the
// bounded filters.
func TestStatusWaitingDoesNotListEveryTenant(t *testing.T) {
	nc, js, qcfg := scaleNATS(t)
	const tenants = 100_000
	testenv.PublishAll(testCtx(t), t, js, tenants, func(i int) *nats.Msg {
		subject := queue.JobSubjectFor("sms", fmt.Sprintf("tenant-%d", i), false)
		return &nats.Msg{Subject: subject, Data: fmt.Appendf(nil, `{"id":"j%d","user_id":"u","channel":"sms","to":"+15550000000","body":"x"}`, i)}
	})
	stream, err := js.Stream(testCtx(t), qcfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Config{NATS: qcfg}
	var out strings.Builder
	before := nc.Stats()
	if err := printWaiting(testCtx(t), &out, stream, cfg); err != nil {
		t.Fatal(err)
	}
	after := nc.Stats()
	if !strings.Contains(out.String(), fmt.Sprintf(": %d (%d on tenants' own subjects", tenants, tenants)) {
		t.Fatalf("printWaiting printed %q, want %d sms jobs waiting", out.String(), tenants)
	}
	read := after.InBytes - before.InBytes
	t.Logf("%d tenants with a job waiting: printWaiting read %d bytes in %d replies", tenants, read, after.InMsgs-before.InMsgs)
	if read > 64<<10 {
		t.Errorf("printWaiting read %d bytes (%d replies) for %d tenants' subjects: it grows with the tenants (status --nats does it every second)",
			read, after.InMsgs-before.InMsgs, tenants)
	}
}

// heldReader is stdin for the replay's confirmation: when the replay asks,
// it notes the heap in use (after a collection) and answers no.
type heldReader struct{ heap uint64 }

func (h *heldReader) Read(p []byte) (int, error) {
	if h.heap == 0 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		h.heap = ms.HeapAlloc
	}
	return copy(p, "n\n"), io.EOF
}

// TestReplayHoldsNotEveryLetterWhileItAsks: `notifier dead replay` after an
// outage (no --limit: every max_attempts letter) reads every selected dead
// letter into memory, bytes and headers, before it asks "replay N jobs?"
// and before it sends the first: the heap held while the prompt waits
// grows with the letters (about 1 KB each here, for a 100-byte job), and
// a replay of a million letters needs a gigabyte.
func TestReplayHoldsNotEveryLetterWhileItAsks(t *testing.T) {
	_, js, qcfg := scaleNATS(t)
	const letters = 100_000
	testenv.PublishAll(testCtx(t), t, js, letters, func(i int) *nats.Msg {
		m := &nats.Msg{Subject: queue.DeadSubject("sms"), Header: nats.Header{},
			Data: fmt.Appendf(nil, `{"id":"j-%d","user_id":"u-%d","channel":"sms","to":"+15550000000","body":"hello there, this is message %d"}`, i, i, i)}
		m.Header.Set(queue.HeaderReason, "max_attempts")
		m.Header.Set(queue.HeaderDetail, "8 transient provider failures")
		m.Header.Set(queue.HeaderSubject, "notify.jobs.sms")
		return m
	})
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	in := &heldReader{}
	rp := &replayer{dead: queue.NewDeadLetters(js, qcfg), now: time.Now, in: in, out: io.Discard}
	_, err := rp.run(testCtx(t), queue.DeadFilter{Kind: queue.Dead})
	if err != errNotConfirmed {
		t.Fatalf("replay: %v, want it refused at the prompt", err)
	}
	if in.heap == 0 {
		t.Fatal("the replay never asked")
	}
	held := int64(in.heap) - int64(base)
	t.Logf("%d dead letters: the replay held %d bytes (%d per letter) while it asked", letters, held, held/letters)
	if held > 16<<20 {
		t.Errorf("the replay of %d dead letters held %d MB while it asked: it grows with the letters", letters, held>>20)
	}
}
