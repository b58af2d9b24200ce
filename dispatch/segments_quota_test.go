package dispatch

import (
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/testenv"
)

// TestALongSMSOverASegmentQuotaIsRejected: an SMS of more segments than a
// segments quota's window holds (11 against a limit of 10) could never be
// reserved a slot: it is dead-lettered rejected at once, saying why, and
// the dispatcher goes on. Its reservation failed at every try and read as
// Redis failing: the dispatcher held (or fell back to local limits) and
// came back every 100 ms, the job looping in its worker (found in review).
func TestALongSMSOverASegmentQuotaIsRejected(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{rate: 100})
	b.pcfgs[0].Unit = "segments"
	b.pcfgs[0].Quotas = []providers.QuotaConfig{{Limit: 10, Per: time.Minute}}
	if err := b.pcfgs[0].Validate(); err != nil {
		t.Fatalf("the provider is refused: %v", err)
	}
	long := newJob("long", "sms", "u1")
	long.Body = strings.Repeat("a", 153*10+1) // 11 GSM-7 segments
	if n := providers.Segments(long.Body); n != 11 {
		t.Fatalf("%d segments, want 11", n)
	}
	b.publish(long)
	b.start(nil)
	b.publish(newJob("short", "sms", "u2"))
	testenv.WaitFor(t, 20*time.Second, "the long job dead-lettered and the short one sent", func() bool {
		return len(b.deadLetters()) == 1 && len(b.fake.AcceptedIDs()) == 1
	})
	if dl := b.deadLetters()[0]; dl.Reason != ledger.ReasonRejected || !strings.Contains(dl.Detail, "11 segments, more than provider") {
		t.Errorf("the long job's dead letter: %s %q, want rejected, saying its segments are over the quota", dl.Reason, dl.Detail)
	}
	if n := strings.Count(b.logs.String(), "limit backend"); n > 0 {
		t.Errorf("the job was taken for the backend failing %d times", n)
	}
}
