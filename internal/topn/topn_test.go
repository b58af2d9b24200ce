package topn_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/internal/topn"
	"github.com/notifier/notifier/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

// TestTopSumsTheWindowsHours: counts added in three hours are summed over
// the hours a window overlaps, most first and equal counts by member, cut
// to the limit; an hour past the window is left out.
func TestTopSumsTheWindowsHours(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	s := topn.Series{Prefix: "sum:", Name: "top:sms", Retention: 8 * 24 * time.Hour}
	now := time.Date(2030, 1, 2, 15, 30, 0, 0, time.UTC)
	for _, c := range []struct {
		ago    time.Duration
		counts []topn.Count
	}{
		{0, []topn.Count{{"a", 1}, {"b", 2}}},
		{time.Hour, []topn.Count{{"a", 2}, {"c", 3}}},
		{3 * time.Hour, []topn.Count{{"d", 100}}},
	} {
		if err := s.Add(ctx, rdb, now.Add(-c.ago), c.counts...); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Top(ctx, rdb, now, 2*time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []topn.Count{{"a", 3}, {"c", 3}, {"b", 2}}
	if len(got) != len(want) {
		t.Fatalf("top of 2 h: %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("top of 2 h: %v, want %v", got, want)
		}
	}
	if got, err := s.Top(ctx, rdb, now, 24*time.Hour, 1); err != nil || len(got) != 1 || got[0] != (topn.Count{"d", 100}) {
		t.Fatalf("top 1 of 24 h: %v, %v; want d 100", got, err)
	}
	if k := s.Key(now); k != "{sum:top:sms}:2030010215" {
		t.Errorf("key %q, want {sum:top:sms}:2030010215", k)
	}
	if ttl, err := rdb.PTTL(ctx, s.Key(now)).Result(); err != nil || ttl <= 7*24*time.Hour || ttl > 8*24*time.Hour {
		t.Errorf("an hour's set expires in %s (%v), want the retention", ttl, err)
	}
}

// TestAddKeepsAtMostMaxMembers: past MaxMembers an hour's set drops the
// half counted least; with no bound it keeps every member.
func TestAddKeepsAtMostMaxMembers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	now := time.Now()
	bounded := topn.Series{Prefix: "bound:", Name: "top:sms", Retention: time.Hour, MaxMembers: 4}
	free := topn.Series{Prefix: "free:", Name: "gwtop", Retention: time.Hour}
	for _, s := range []topn.Series{bounded, free} {
		if err := s.Add(ctx, rdb, now, topn.Count{"top", 10}, topn.Count{"second", 5}); err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{"x", "y", "z"} {
			if err := s.Add(ctx, rdb, now, topn.Count{m, 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, err := bounded.Top(ctx, rdb, now, time.Hour, 0); err != nil || len(got) != 2 || got[0].Member != "top" || got[1].Member != "second" {
		t.Errorf("bounded to 4: %v, %v; want top and second", got, err)
	}
	if got, err := free.Top(ctx, rdb, now, time.Hour, 0); err != nil || len(got) != 5 {
		t.Errorf("unbounded: %v, %v; want 5 members", got, err)
	}
}

// TestAddChecksItsArguments: a count that is not a whole number stops the
// script before it writes.
func TestAddChecksItsArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	s := topn.Series{Prefix: "args:", Name: "gwtop", Retention: time.Hour}
	now := time.Now()
	err := s.Add(ctx, rdb, now, topn.Count{"a", 1}, topn.Count{"b", -1})
	if err == nil || !strings.Contains(err.Error(), "argument count out of range") {
		t.Fatalf("a negative count: %v, want an argument error", err)
	}
	if n, err := rdb.Exists(ctx, s.Key(now)).Result(); err != nil || n != 0 {
		t.Errorf("the set was written (%d, %v)", n, err)
	}
}

// TestTopCountsItsMembersInEveryHour: a series with MaxMembers reads each
// hour's most counted members only (Top's candidates), but counts the
// members it shows exactly, in every hour of the window: "steady", first
// in one hour and below the 200 read of two others, is shown with all
// its 110, not the 100 of the hour it led.
func TestTopCountsItsMembersInEveryHour(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	s := topn.Series{Prefix: "deep:", Name: "top:sms", Retention: 8 * 24 * time.Hour, MaxMembers: 20_000}
	now := time.Date(2030, 1, 2, 15, 30, 0, 0, time.UTC)
	if err := s.Add(ctx, rdb, now, topn.Count{Member: "steady", N: 100}); err != nil {
		t.Fatal(err)
	}
	crowd := make([]topn.Count, 0, 251)
	for i := range 250 {
		crowd = append(crowd, topn.Count{Member: fmt.Sprintf("x-%03d", i), N: 10})
	}
	crowd = append(crowd, topn.Count{Member: "steady", N: 5})
	for _, ago := range []time.Duration{time.Hour, 2 * time.Hour} {
		if err := s.Add(ctx, rdb, now.Add(-ago), crowd...); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Top(ctx, rdb, now, 24*time.Hour, 2)
	if err != nil {
		t.Fatal(err)
	}
	// The second: one of the crowd, each 20 (an hour's read is cut among
	// equal counts, so which one is not said).
	if len(got) != 2 || got[0] != (topn.Count{Member: "steady", N: 110}) || !strings.HasPrefix(got[1].Member, "x-") || got[1].N != 20 {
		t.Fatalf("top 2 of 24 h: %v, want steady 110, then one of the crowd with 20", got)
	}
}
