package queue_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/notifier/notifier/queue"
)

// TestPublishNDJSON: valid lines are published on their tenant's and
// category's subject; blank and # lines are ignored; invalid lines (not
// JSON, no channel, an invalid job, one longer than a job may be) are
// skipped with their numbers, and the lines after them still published.
func TestPublishNDJSON(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	long := `{"id":"big","user_id":"u","channel":"sms","to":"+15550000001","body":"` + strings.Repeat("x", queue.MaxJobBytes) + `"}`
	in := strings.Join([]string{
		`{"id":"a1","user_id":"u1","channel":"sms","to":"+15550000001","body":"hi"}`,
		``,
		`# a comment`,
		`not json`,
		`{"id":"a2","user_id":"u2","channel":"fax","to":"x","body":"hi"}`,
		`{"id":"a3","user_id":"u3","channel":"push","to":"tok_abcdefgh12345678","body":"hi","tenant":"acme"}`,
		`{"id":"bad id","user_id":"u4","channel":"sms","to":"+15550000001","body":"hi"}`,
		long,
		`{"id":"a5","user_id":"u5","channel":"sms","to":"+15550000001","body":"promo","category":"marketing"}`,
	}, "\n")
	batch := queue.NewPublisher(b.js).NewBatch(8, 0)
	var skipped []string
	published := 0
	n, err := batch.PublishNDJSON(ctx(t), strings.NewReader(in), queue.NDJSON{
		Skipped:   func(line int, why string) { skipped = append(skipped, fmt.Sprint(line)) },
		Published: func() { published++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := batch.Wait(ctx(t))
	if err != nil || res.Stored != 3 {
		t.Fatalf("stored %d (%v), want 3", res.Stored, err)
	}
	if n != 4 || published != 3 || strings.Join(skipped, ",") != "4,5,7,8" {
		t.Errorf("skipped %d (lines %v), published %d; want 4 (lines 4,5,7,8) and 3", n, skipped, published)
	}
	c := b.consumer(t, queue.ConsumerConfig{})
	qs, err := c.Queues(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, q := range qs {
		if q.Stored > 0 {
			got[q.Key.String()] = q.Stored
		}
	}
	// acme's line (tenant named in the line) is on one of acme's fair lanes.
	a, _ := queue.LanePair("push", "acme", queue.DefaultFairLanes)
	if want := fmt.Sprintf("map[push#%d:1 sms:1 sms/marketing:1]", a); fmt.Sprint(got) != want {
		t.Errorf("queues %v, want %s", got, want)
	}
}

// TestNDJSONLineTenantIsCaseSensitive: a line's "Tenant" is no tenant
// field (SPEC §2 matches member names exactly, as the dispatcher and the
// gateway do): the line is --tenant's, on its lane and with its message
// id, not the tenant "Tenant" names (the probe read names as encoding/json
// does, case-insensitively; found in review).
func TestNDJSONLineTenantIsCaseSensitive(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	in := `{"id":"n1","user_id":"u1","channel":"sms","to":"+15550000001","body":"hi","Tenant":"acme","Category":"marketing"}`
	batch := queue.NewPublisher(b.js).NewBatch(8, 0)
	if n, err := batch.PublishNDJSON(ctx(t), strings.NewReader(in), queue.NDJSON{Tenant: "bank"}); err != nil || n != 0 {
		t.Fatalf("skipped %d, %v", n, err)
	}
	if res, err := batch.Wait(ctx(t)); err != nil || res.Stored != 1 {
		t.Fatalf("stored %d (%v)", res.Stored, err)
	}
	s, err := b.js.Stream(ctx(t), "NOTIFY")
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetMsg(ctx(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, id := m.Header.Get(queue.HeaderTenant), m.Header.Get("Nats-Msg-Id"); got != "bank" || id != "bank/n1" || strings.HasSuffix(m.Subject, ".marketing") {
		t.Errorf("the line was published as tenant %q's on %s (Nats-Msg-Id %q), want bank's on a transactional lane", got, m.Subject, id)
	}
}
