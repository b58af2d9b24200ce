package dispatch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// TestDuplicateIDWithOtherContentIsLogged: a second job given an id that
// was already sent, with other content (published without its Nats-Msg-Id,
// so JetStream does not drop it), is not sent, counted as a duplicate, and
// logged at info with both stream sequences and never its content; a
// redelivery of the same message is not logged at info.
func TestDuplicateIDWithOtherContentIsLogged(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	p := b.start(nil)
	first := newJob("same-id", "sms", "u1")
	b.publish(first)
	testenv.WaitFor(t, 20*time.Second, "the first sent", func() bool { return len(b.fake.AcceptedIDs()) == 1 })
	second := newJob("same-id", "sms", "u1")
	second.Body = "a different secret text"
	data, err := second.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.pub.PublishRaw(context.Background(), queue.JobSubject("sms", false), data, ""); err != nil {
		t.Fatal(err)
	}
	same, err := first.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.pub.PublishRaw(context.Background(), queue.JobSubject("sms", false), same, ""); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "two duplicates", func() bool {
		return p.count(p.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeDuplicate)) == 2
	})
	if n := len(b.fake.Requests()); n != 1 {
		t.Fatalf("%d requests at the provider, want 1", n)
	}
	var infos []string
	for _, l := range strings.Split(b.logs.String(), "\n") {
		if strings.Contains(l, "already sent") && strings.Contains(l, `"level":"INFO"`) {
			infos = append(infos, l)
		}
	}
	if len(infos) != 1 {
		t.Fatalf("%d info lines about the id already sent, want 1 (the different content only):\n%s", len(infos), strings.Join(infos, "\n"))
	}
	if l := infos[0]; !strings.Contains(l, `"sent_seq":1`) || !strings.Contains(l, `"seq":2`) || !strings.Contains(l, `"job":"same-id"`) {
		t.Errorf("the line names neither both sequences nor the job: %s", l)
	}
	if strings.Contains(b.logs.String(), "secret") {
		t.Errorf("the job's content reached the log")
	}
}
