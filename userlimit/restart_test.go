package userlimit_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
	"github.com/notifier/notifier/userlimit/userlimittest"
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
	// The restarted server has none of the scripts: Allow must fall back.
	for _, alg := range userlimittest.Algorithms {
		src, err := os.ReadFile(string(alg) + ".lua")
		if err != nil {
			t.Fatal(err)
		}
		sum := sha1.Sum(src)
		if ok, err := rdb.ScriptExists(ctx, hex.EncodeToString(sum[:])).Result(); err != nil || ok[0] {
			t.Fatalf("%s script cached after the restart (%v, %v): the test proves nothing", alg, ok, err)
		}
	}
	for _, alg := range userlimittest.Algorithms {
		// The restart emptied the state: a full limit again.
		res, err := lim.Allow(ctx, key, "e", rule(alg))
		if err != nil || !res.Allowed || res.Remaining != 1 {
			t.Fatalf("%s after the restart: %+v, %v; want allowed with 1 remaining", alg, res, err)
		}
	}
}
