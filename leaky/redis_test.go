package leaky_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/testenv"
)

// TestRedisDown: with Redis gone every operation returns an error naming
// it, nothing panics, and the queue works again once Redis is back.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testenv.Redis(t)
	rdb := srv.Client()
	q := newRedis(t, rdb, newPrefix("down"))
	c := leaky.Contract{Rate: 100, MaxQueueDelay: 100 * time.Millisecond}

	var held leaky.Reservation
	testenv.WaitFor(t, 5*time.Second, "a reservation after the cold start", func() bool {
		r, err := q.Reserve(ctx, "sms", c, 1)
		if err != nil {
			t.Fatalf("reserve: %v", err)
		}
		held = r
		return r.OK
	})

	srv.Stop()
	check := func(op, prefix string, err error) {
		t.Helper()
		if err == nil || !strings.HasPrefix(err.Error(), prefix) {
			t.Errorf("%s with Redis down: %v, want an error starting %q", op, err, prefix)
		}
	}
	_, err := q.Reserve(ctx, "sms", c, 1)
	check("reserve", "reserve slot sms: ", err)
	check("cancel", "cancel slot sms: ", q.Cancel(ctx, "sms", c, held, 1))
	check("pause", "pause provider sms: ", q.Pause(ctx, "sms", time.Second))
	_, err = q.PausedFor(ctx, "sms")
	check("paused for", "read pause sms: ", err)
	_, err = q.Depth(ctx, "sms", c)
	check("depth", "read queue depth sms: ", err)
	check("load", "load leaky scripts: ", q.Load(ctx))
	pipe := rdb.Pipeline()
	cmd := q.ReserveCmd(ctx, pipe, "sms", c, 1)
	if _, err := pipe.Exec(ctx); err == nil {
		t.Error("pipeline exec with Redis down succeeded")
	}
	_, err = cmd.Result()
	check("pipelined reserve", "reserve slot sms: ", err)

	srv.Start() // empty: the provider starts cold, the script cache is empty
	r, err := q.Reserve(ctx, "sms", c, 1)
	if err != nil {
		t.Fatalf("reserve after Redis came back: %v", err)
	}
	if r.OK || r.RetryAfter <= 0 {
		t.Fatalf("first reservation on an empty Redis: %+v, want a full queue (cold start)", r)
	}
	testenv.WaitFor(t, 5*time.Second, "a reservation after Redis came back", func() bool {
		r, err := q.Reserve(ctx, "sms", c, 1)
		if err != nil {
			t.Fatalf("reserve: %v", err)
		}
		return r.OK && r.Delay <= c.MaxQueueDelay
	})
}

// TestReserveCmdPipelined queues reservations of several providers on one
// pipeline, standalone and on a cluster, and checks NOSCRIPT handling.
func TestReserveCmdPipelined(t *testing.T) {
	t.Parallel()
	t.Run("Redis", func(t *testing.T) {
		t.Parallel()
		testPipelined(t, testenv.Redis(t).Client())
	})
	t.Run("RedisCluster", func(t *testing.T) {
		t.Parallel()
		testPipelined(t, testenv.RedisCluster(t).Client())
	})
}

type pipeClient interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
	ScriptFlush(ctx context.Context) *redis.StatusCmd
}

func testPipelined(t *testing.T, rdb pipeClient) {
	ctx := context.Background()
	clock := newClock()
	q := newRedis(t, rdb, newPrefix("pipe"), leaky.WithHeadroom(0), leaky.WithNow(clock.Now))
	c := leaky.Contract{Rate: 10, MaxQueueDelay: time.Second}
	providers := []string{"sms", "push", "email", "voice"}
	if err := q.Load(ctx); err != nil {
		t.Fatalf("load: %v", err)
	}
	for _, p := range providers { // warm (Redis starts cold)
		if _, err := q.Reserve(ctx, p, c, 1); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Minute)

	pipe := rdb.Pipeline()
	var cmds []*leaky.ReserveCmd
	for i := 0; i < 3; i++ {
		for _, p := range providers {
			cmds = append(cmds, q.ReserveCmd(ctx, pipe, p, c, 1))
		}
	}
	bad := q.ReserveCmd(ctx, pipe, "sms", c, 0)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("exec: %v", err)
	}
	for i, cmd := range cmds {
		r, err := cmd.Result()
		if err != nil {
			t.Fatalf("pipelined reserve %d: %v", i, err)
		}
		if want := time.Duration(i/len(providers)) * 100 * time.Millisecond; !r.OK || r.Delay != want {
			t.Fatalf("pipelined reserve %d: %+v, want ok with delay %v", i, r, want)
		}
	}
	if _, err := bad.Result(); err == nil || err.Error() != "reserve slot sms: cost must be at least 1, got 0" {
		t.Fatalf("invalid pipelined reserve: %v", err)
	}

	// a flushed script cache (restart, failover): pipelined EVALSHA fails
	// until Load
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	pipe = rdb.Pipeline()
	cmd := q.ReserveCmd(ctx, pipe, "sms", c, 1)
	_, _ = pipe.Exec(ctx)
	if _, err := cmd.Result(); err == nil || !strings.Contains(err.Error(), "NOSCRIPT") {
		t.Fatalf("pipelined reserve after SCRIPT FLUSH: %v, want NOSCRIPT", err)
	}
	if err := q.Load(ctx); err != nil {
		t.Fatal(err)
	}
	pipe = rdb.Pipeline()
	cmd = q.ReserveCmd(ctx, pipe, "sms", c, 1)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("exec after load: %v", err)
	}
	if r, err := cmd.Result(); err != nil || !r.OK || r.Delay != 300*time.Millisecond {
		t.Fatalf("pipelined reserve after load: %+v %v, want ok with delay 300ms", r, err)
	}
}

// TestColdStartOverride: a reservation that finds no state starts the
// queue max_queue_delay (plus an interval) ahead by default, at
// Contract.ColdStart when given (0: at once), never further than the
// default however large the override, and an override changes nothing for
// a queue whose state is there.
func TestColdStartOverride(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	q := newRedis(t, rdb, newPrefix("coldstart"))
	c := leaky.Contract{Rate: 100, MaxQueueDelay: 2 * time.Second}
	zero, one, day := time.Duration(0), time.Second, 24*time.Hour
	for _, tc := range []struct {
		name     string
		cold     *time.Duration
		min, max time.Duration
	}{
		{"default", nil, 1900 * time.Millisecond, 2100 * time.Millisecond},
		{"zero", &zero, 0, 50 * time.Millisecond},
		{"one second", &one, 900 * time.Millisecond, 1050 * time.Millisecond},
		{"clamped", &day, 1900 * time.Millisecond, 2100 * time.Millisecond},
	} {
		cc := c
		cc.ColdStart = tc.cold
		r, err := q.Reserve(ctx, "p-"+tc.name, cc, 1)
		if err != nil {
			t.Fatal(err)
		}
		// The default cold start fills the queue: the first reservation
		// is refused for one interval, then placed at the cold start.
		for !r.OK {
			time.Sleep(r.RetryAfter)
			if r, err = q.Reserve(ctx, "p-"+tc.name, cc, 1); err != nil {
				t.Fatal(err)
			}
		}
		if r.Delay < tc.min || r.Delay > tc.max {
			t.Errorf("%s: first slot %s ahead, want %s to %s", tc.name, r.Delay, tc.min, tc.max)
		}
	}
	// A queue with its state: the override is not read.
	r, err := q.Reserve(ctx, "p-default", leaky.Contract{Rate: 100, MaxQueueDelay: 2 * time.Second, ColdStart: &zero}, 1)
	if err != nil || !r.OK || r.Delay < 1900*time.Millisecond {
		t.Errorf("a queue with its state, reserved with ColdStart 0: %+v %v, want its slot after the others", r, err)
	}
}
