package limits

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/testenv"
)

// TestTopOfAMillionUsersReadsAFew: `notifier top --channel sms` (20 users,
// 24 h by default; up to 192 h) with a million users denied over the
// retention. Each hour's set keeps at most TopMaxUsers (20,000) users, so
// a window of 50 hours unions 1,000,000 distinct users. Top asks Redis
// for the whole union (ZUNION ... WITHSCORES) and sorts it in the client
// to keep 20: the reply, the client's allocations and its memory grow
// with the users (to 192 x 20,000 = 3.84 million at the longest window).
func TestTopOfAMillionUsersReadsAFew(t *testing.T) {
	// The CLI's client waits 2 s for a reply (config.ConnectRedis): the
	// union of a million users takes longer, and `notifier top` fails with
	// an i/o timeout. This client waits, to measure.
	opts := testenv.Redis(t).Options()
	opts.ReadTimeout = time.Minute
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx := context.Background()
	const hours, perHour = 50, TopMaxUsers
	// Hour h holds users h*perHour ... (h+1)*perHour-1, user i denied
	// 1 + i%1000 times: filled on the server, one script run an hour.
	const fill = `
local from, n = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = from, from + n - 1, 1000 do
  local args = {}
  for j = i, math.min(i + 999, from + n - 1) do
    args[#args + 1] = 1 + j % 1000
    args[#args + 1] = 'user-' .. j
  end
  redis.call('ZADD', KEYS[1], unpack(args))
end
redis.call('EXPIRE', KEYS[1], 3600 * 24 * 9)
return n`
	now := time.Now()
	for h := range hours {
		key := DenialsKey("t:", "sms", false, now.Add(-time.Duration(h)*time.Hour))
		if err := rdb.Eval(ctx, fill, []string{key}, h*perHour, perHour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.SlowLogReset(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rows, err := NewDenials(rdb, "t:").Top(ctx, "sms", TopRetention, 20)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 20 || rows[0].Denials != 1000 {
		t.Fatalf("Top gave %+v, want 20 users with 1000 denials first", rows)
	}
	// The ties at 1000 denials come by user id.
	if rows[0].User != "user-100999" && rows[0].User > rows[1].User {
		t.Fatalf("Top gave %+v: equal counts not by user", rows[:2])
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	if slow, err := rdb.SlowLogGet(ctx, 10).Result(); err == nil {
		for _, l := range slow {
			t.Logf("redis-server busy %s on %s (the dispatchers' scripts wait meanwhile)", l.Duration, l.Args[0])
		}
	}
	t.Logf("%d users over %d hours: Top(20) allocated %d bytes in %d allocations", hours*perHour, hours, alloc, after.Mallocs-before.Mallocs)
	if alloc > 4<<20 {
		t.Errorf("Top of 20 among %d users allocated %d MB (%d allocations): it reads every user of the window",
			hours*perHour, alloc>>20, after.Mallocs-before.Mallocs)
	}
}
