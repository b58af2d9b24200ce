package userlimit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notifier/notifier/internal/luapre"
	"github.com/notifier/notifier/testenv"
)

var rangePrefixes atomic.Int64

// rangesNow is the fixed instant of these calls, µs (2024).
const rangesNow = int64(1_717_171_717_000_000)

// decideArgs are the arguments of one decision of a script, at rangesNow.
func decideArgs(alg Algorithm, limit, window, at any) []any {
	nkeys := 2
	if alg == SlidingLog {
		nkeys = 1
	}
	return []any{rangesNow, nkeys, limit, window, "job", at}
}

// TestScriptsRefuseDecisionsOutOfRange calls each algorithm's script
// directly with arguments no Rule allows (a window of 1e21 µs made
// sliding_log's log live ~1e18 ms; a limit of 1e12; an instant a year
// ahead): each stops with an error naming the argument, and no key is
// written.
func TestScriptsRefuseDecisionsOutOfRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	hour := time.Hour.Microseconds()
	for _, alg := range algorithms {
		for _, c := range []struct {
			args []any
			want string
		}{
			{decideArgs(alg, 3, "1e21", ""), "argument window out of range: 1e21"},
			{decideArgs(alg, 3, 999, ""), "argument window out of range: 999"},
			{decideArgs(alg, 3, "3600000000.5", ""), "argument window out of range: 3600000000.5"},
			{decideArgs(alg, "1e12", hour, ""), "argument limit out of range: 1e12"},
			{decideArgs(alg, 0, hour, ""), "argument limit out of range: 0"},
			{decideArgs(alg, 3, hour, "1e20"), "argument at out of range: 1e20"},
			{decideArgs(alg, 3, hour, rangesNow+MaxAhead.Microseconds()+1), "argument at out of range"},
			{decideArgs(alg, 3, hour, "nan"), "argument at out of range: nan"},
			{[]any{"1e20", 2, 3, hour, "job", ""}, "argument now out of range: 1e20"},
			{[]any{rangesNow, 3, 3, hour, "job", ""}, "argument keys per decision out of range: 3"},
			// a good decision first: the bad one after it stops both
			{append(decideArgs(alg, 3, hour, ""), 3, "1e21", "job2", ""), "argument window out of range: 1e21"},
		} {
			prefix := fmt.Sprintf("ranges:%d:", rangePrefixes.Add(1))
			keys := Keys(prefix, Key{Channel: "sms", User: "u"}, alg, "job")
			if len(c.args) > 6 {
				keys = append(keys, Keys(prefix, Key{Channel: "sms", User: "u"}, alg, "job2")...)
			}
			err := script(alg).Run(ctx, rdb, keys, c.args...).Err()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s %v: %v, want an error saying %q", alg, c.args, err, c.want)
			}
			if n, err := rdb.Exists(ctx, keys...).Result(); err != nil || n != 0 {
				t.Errorf("%s %v: %d keys written (%v)", alg, c.args, n, err)
			}
		}
	}
}

// TestScriptExpiriesAtTheEdges decides, with each algorithm, jobs at the
// edges of Rule's ranges (a window of 366 days, an instant MaxAhead
// ahead) and reads the PTTL of every key written: none is past
// MaxAhead + 2 × MaxWindow + 1 s, within luapre.MaxTTL.
func TestScriptExpiriesAtTheEdges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	worst := MaxAhead + 2*MaxWindow + time.Second
	if worst > luapre.MaxTTL {
		t.Fatalf("the worst state's life %v is past luapre.MaxTTL %v", worst, luapre.MaxTTL)
	}
	for _, alg := range algorithms {
		limit := 1000
		if alg == TokenBucket {
			limit = MaxTokenBucketLimit
		}
		prefix := fmt.Sprintf("ranges:%d:", rangePrefixes.Add(1))
		var keys []string
		for i, at := range []int64{rangesNow, rangesNow + MaxAhead.Microseconds()} {
			job := "job" + strconv.Itoa(i)
			k := Keys(prefix, Key{Channel: "sms", User: "u"}, alg, job)
			keys = append(keys, k...)
			args := []any{rangesNow, len(k), limit, MaxWindow.Microseconds(), job, at}
			if err := script(alg).Run(ctx, rdb, k, args...).Err(); err != nil {
				t.Fatalf("%s at %d: %v", alg, at, err)
			}
		}
		written := 0
		for _, k := range keys {
			d, err := rdb.PTTL(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if d == -2*time.Nanosecond {
				continue
			}
			written++
			if d <= 0 || d > worst {
				t.Errorf("%s: %s PTTL %v, want within (0, %v]", alg, k, d, worst)
			}
		}
		if written == 0 {
			t.Errorf("%s: no key written", alg)
		}
	}
}

// TestSlidingLogExpiryFollowsTheNewestEntry: the log's expiry is one second
// past its newest entry's window, whichever order the instants are decided
// in: a first entry sets it, an entry ahead of the others moves it on
// (PEXPIRE ... GT), one behind them leaves it.
func TestSlidingLogExpiryFollowsTheNewestEntry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	prefix := fmt.Sprintf("expiry:%d:", rangePrefixes.Add(1))
	key := Keys(prefix, Key{Channel: "sms", User: "u"}, SlidingLog, "")[0]
	window := 10 * time.Second
	for _, step := range []struct {
		job   string
		ahead time.Duration // the instant decided for, after rangesNow
		want  time.Duration // the log's TTL then: newest + window + 1 s
	}{
		{"first", 0, 11 * time.Second},
		{"ahead", 5 * time.Second, 16 * time.Second},
		{"behind", time.Second, 16 * time.Second},
	} {
		args := []any{rangesNow, 1, 100, window.Microseconds(), step.job, rangesNow + step.ahead.Microseconds()}
		if err := script(SlidingLog).Run(ctx, rdb, []string{key}, args...).Err(); err != nil {
			t.Fatalf("%s: %v", step.job, err)
		}
		ttl, err := rdb.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		// Read after the write: a loaded machine may take a while.
		if ttl > step.want || ttl < step.want-2*time.Second {
			t.Errorf("after %s: the log's TTL is %v, want %v (newest + window + 1 s)", step.job, ttl, step.want)
		}
	}
}
