package userlimit_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
	"github.com/notifier/notifier/userlimit/userlimittest"
	"github.com/redis/go-redis/v9"
)

// TestRedisRestart: while Redis is down every decision is a wrapped error
// naming the operation; once it is back the limiter works again by itself
// (the restarted server's script cache is empty: EVALSHA falls back to EVAL),
// starting from the empty state a restart without persistence leaves.
func TestRedisRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testenv.Redis(t)
	rdb := srv.Client()
	lim := userlimit.NewRedis(rdb, newPrefix("restart"))
	key := userlimit.Key{Channel: "push", User: "alice"}
	rule := func(alg userlimit.Algorithm) userlimit.Rule {
		return userlimit.Rule{Limit: 2, Window: time.Hour, Algorithm: alg}
	}
	for _, alg := range userlimittest.Algorithms {
		for _, job := range []string{"a", "b"} {
			if res, err := lim.Allow(ctx, key, job, rule(alg)); err != nil || !res.Allowed {
				t.Fatalf("%s %s before the restart: %+v, %v", alg, job, res, err)
			}
		}
		if res, err := lim.Allow(ctx, key, "c", rule(alg)); err != nil || res.Allowed {
			t.Fatalf("%s c before the restart: %+v, %v; want denied", alg, res, err)
		}
	}

	srv.Stop()
	for _, alg := range userlimittest.Algorithms {
		res, err := lim.Allow(ctx, key, "d", rule(alg))
		if err == nil {
			t.Fatalf("%s while Redis is down: got %+v and no error", alg, res)
		}
		if want := "decide user limit push " + string(alg) + ": "; !strings.HasPrefix(err.Error(), want) {
			t.Fatalf("%s while Redis is down: error %q does not start with %q", alg, err, want)
		}
		var netErr net.Error
		if !errors.As(err, &netErr) {
			t.Fatalf("%s while Redis is down: error %q does not wrap the network error (%T)", alg, err, errors.Unwrap(err))
		}
		if res != (userlimit.Result{}) {
			t.Fatalf("%s while Redis is down: got %+v with the error, want the zero Result", alg, res)
		}
	}

	srv.Start()
	testenv.WaitFor(t, 10*time.Second, "Redis to answer after the restart", func() bool {
		return rdb.Ping(ctx).Err() == nil
	})
	// The restarted server has none of the scripts: Allow must fall back
	// to EVAL, which caches them again.
	if n := cachedScripts(ctx, t, rdb); n != 0 {
		t.Fatalf("%d scripts cached after the restart: the test proves nothing", n)
	}
	for _, alg := range userlimittest.Algorithms {
		// The restart emptied the state: a full limit again.
		res, err := lim.Allow(ctx, key, "e", rule(alg))
		if err != nil || !res.Allowed || res.Remaining != 1 {
			t.Fatalf("%s after the restart: %+v, %v; want allowed with 1 remaining", alg, res, err)
		}
	}
	if n := cachedScripts(ctx, t, rdb); n == 0 {
		t.Fatal("no script cached after Allow on the restarted server: it did not fall back to EVAL")
	}
}

// cachedScripts is the server's number_of_cached_scripts (INFO memory).
func cachedScripts(ctx context.Context, t *testing.T, rdb *redis.Client) int {
	t.Helper()
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "number_of_cached_scripts:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("number_of_cached_scripts %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatal("INFO memory has no number_of_cached_scripts (Redis 7 or newer)")
	return 0
}
