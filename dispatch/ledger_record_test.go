package dispatch

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
			l := newLedger(time.Hour, WithLedgerNow(clock.Now)).(recorder)
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
			if r.TTL <= 0 || r.TTL > time.Hour {
				t.Fatalf("claimed: ttl %s, want (0, 1h]", r.TTL)
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
