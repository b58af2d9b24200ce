package ledger

import (
	"context"
	"strings"
	"testing"
	"time"
)

// recorder is the read of a ledger record both backends offer.
type recorder interface {
	Ledger
	Record(ctx context.Context, id string) (Record, error)
}

// TestLedgerRecordAndEnded: every backend's record says what the ledger
// knows at each step (lease owner and end while a lease lasts, attempts,
// sent), and Ended notes a dead or suppressed end with its reason while it
// releases the lease, and leaves a sent job's record alone.
func TestLedgerRecordAndEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, newLedger := range ledgerBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clock := newFakeClock()
			l := newLedger(time.Hour, WithNow(clock.Now)).(recorder)
			read := func(step string) Record {
				t.Helper()
				r, err := l.Record(ctx, "job-1")
				if err != nil {
					t.Fatalf("%s: record: %v", step, err)
				}
				return r
			}
			if r := read("before any claim"); r.Found {
				t.Fatalf("before any claim: %+v, want nothing found", r)
			}
			if _, err := l.Claim(ctx, "job-1", "w1/1", 10*time.Second); err != nil {
				t.Fatal(err)
			}
			r := read("claimed")
			if !r.Found || r.Sent || r.Owner != "w1/1" || !r.LeaseUntil.Equal(clock.Now().Add(10*time.Second)) || r.Outcome != "" {
				t.Fatalf("claimed: %+v, want owner w1/1 until %s", r, clock.Now().Add(10*time.Second))
			}
			if r.TTL <= 0 || r.TTL > time.Hour+10*time.Second {
				t.Fatalf("claimed: ttl %s, want (0, 1h10s]: dedup_ttl past the lease's end", r.TTL)
			}
			if _, err := l.Failed(ctx, "job-1", "w1/1", "5xx"); err != nil {
				t.Fatal(err)
			}
			if r := read("failed"); r.Attempts != 1 || r.LastError != "5xx" || r.Owner != "" {
				t.Fatalf("failed once: %+v, want 1 attempt and no lease", r)
			}
			if _, err := l.Claim(ctx, "job-1", "w1/2", 10*time.Second); err != nil {
				t.Fatal(err)
			}
			if err := l.Ended(ctx, "job-1", "w1/2", EndSuppressed, ReasonUserLimit); err != nil {
				t.Fatal(err)
			}
			if r := read("suppressed"); r.Outcome != EndSuppressed || r.Reason != ReasonUserLimit || r.Owner != "" || r.Attempts != 1 || r.Sent {
				t.Fatalf("suppressed: %+v", r)
			}
			// The lease is free: another delivery claims it at once.
			if c, err := l.Claim(ctx, "job-1", "w2/1", 10*time.Second); err != nil || c.Status != Claimed {
				t.Fatalf("claim after the end: %+v, %v", c, err)
			}
			clock.Advance(11 * time.Second) // the lease has lapsed: no owner shows
			if r := read("lapsed"); r.Owner != "" || !r.LeaseUntil.IsZero() {
				t.Fatalf("lease lapsed: %+v, want no owner", r)
			}
			if err := l.Ended(ctx, "job-1", "w2/1", "exploded", "x"); err == nil || !strings.Contains(err.Error(), "unknown end") {
				t.Fatalf("an unknown end: %v, want an error", err)
			}

			// A sent job keeps its record: a later dead end notes nothing.
			if err := l.Sent(ctx, "job-2", "w1/3"); err != nil {
				t.Fatal(err)
			}
			if err := l.Ended(ctx, "job-2", "w9/9", EndDead, ReasonRejected); err != nil {
				t.Fatal(err)
			}
			r2, err := l.Record(ctx, "job-2")
			if err != nil || !r2.Found || !r2.Sent || r2.Outcome != "" {
				t.Fatalf("sent, then an end: %+v, %v; want sent and no outcome", r2, err)
			}
		})
	}
}

// TestLedgerNotesDeferrals: on every backend a deferral gives up the lease
// and notes why and until when, counting each one, so that `notifier
// explain --job` finds a job the per-user cap put off (issue 29: it said
// "no record"); a wait for a far send slot is noted while the lease is
// kept; a sent job's record takes no note.
func TestLedgerNotesDeferrals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, newLedger := range ledgerBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clock := newFakeClock()
			l := newLedger(time.Hour, WithNow(clock.Now)).(recorder)
			read := func(id, step string) Record {
				t.Helper()
				r, err := l.Record(ctx, id)
				if err != nil {
					t.Fatalf("%s: record: %v", step, err)
				}
				return r
			}
			if _, err := l.Claim(ctx, "job-1", "w1/1", 10*time.Second); err != nil {
				t.Fatal(err)
			}
			if err := l.Deferred(ctx, "job-1", "w1/1", DeferUserLimit, 90*time.Second); err != nil {
				t.Fatal(err)
			}
			r := read("job-1", "deferred")
			if !r.Found || r.Owner != "" || r.Why != DeferUserLimit || !r.Until.Equal(clock.Now().Add(90*time.Second)) || r.Deferrals != 1 || r.Sent || r.Outcome != "" {
				t.Fatalf("deferred: %+v, want no lease, why user_limit until +90s, 1 deferral", r)
			}
			if r.TTL <= 0 || r.TTL > time.Hour {
				t.Fatalf("deferred: ttl %s, want (0, 1h]", r.TTL)
			}
			// The lease is free: the next delivery claims at once.
			clock.Advance(90 * time.Second)
			if c, err := l.Claim(ctx, "job-1", "w2/1", 10*time.Second); err != nil || c.Status != Claimed {
				t.Fatalf("claim after the deferral: %+v, %v", c, err)
			}
			if err := l.Waiting(ctx, "job-1", "w2/1", WaitSlot, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			r = read("job-1", "waiting")
			if r.Owner != "w2/1" || r.Why != WaitSlot || !r.Until.Equal(clock.Now().Add(5*time.Second)) || r.Deferrals != 1 {
				t.Fatalf("waiting for a slot: %+v, want the lease kept, why slot until +5s, still 1 deferral", r)
			}
			// The wait keeps the lease, and the expiry its claim set
			// (dedup_ttl past the lease's end: the send under this lease
			// leaves it there), which a wait never shortens.
			if r.TTL <= time.Hour {
				t.Fatalf("waiting for a slot: ttl %s, want the claim's (over 1h: dedup_ttl past the lease's end)", r.TTL)
			}
			if err := l.Deferred(ctx, "job-1", "w2/1", DeferProviderPaused, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			if r := read("job-1", "deferred again"); r.Owner != "" || r.Why != DeferProviderPaused || r.Deferrals != 2 {
				t.Fatalf("deferred again: %+v, want provider_paused, 2 deferrals", r)
			}
			// Another owner's deferral leaves a live lease alone.
			if _, err := l.Claim(ctx, "job-1", "w3/1", 10*time.Second); err != nil {
				t.Fatal(err)
			}
			if err := l.Deferred(ctx, "job-1", "w9/9", DeferQuota, time.Second); err != nil {
				t.Fatal(err)
			}
			if r := read("job-1", "a stranger's deferral"); r.Owner != "w3/1" {
				t.Fatalf("a stranger's deferral: %+v, want w3/1's lease kept", r)
			}
			// ... and its expiry: the lease's send must outlive dedup_ttl.
			if r := read("job-1", "a stranger's deferral"); r.TTL <= time.Hour {
				t.Fatalf("a stranger's deferral: ttl %s, want the live claim's (over 1h)", r.TTL)
			}
			// A sent job takes no note.
			if err := l.Sent(ctx, "job-2", "w1/3"); err != nil {
				t.Fatal(err)
			}
			if err := l.Deferred(ctx, "job-2", "w1/3", DeferUserLimit, time.Minute); err != nil {
				t.Fatal(err)
			}
			if r := read("job-2", "sent, then deferred"); !r.Sent || r.Why != "" || r.Deferrals != 0 {
				t.Fatalf("sent, then deferred: %+v, want sent and no note", r)
			}
		})
	}
}
