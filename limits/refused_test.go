package limits

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/testenv"
)

// TestRefusedTellsTheJobsDataFromTheBackendFailing reads real replies of
// a real server: the errors the limit scripts raise about a request's own
// data, and a key of another type, are Refused (the dispatcher hands that
// job back and goes on); a connection refused, a timeout, a server error
// about its own state, and a join holding any of those are not (the
// dispatcher holds or falls back to local limits), nor is an answer about
// a key every job shares (Shared: a provider's queue, the fleet bucket),
// where a stray key fails every job alike (found by review: the fleet
// handed every job back instead of falling back to local limits).
func TestRefusedTellsTheJobsDataFromTheBackendFailing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testenv.Redis(t)
	rdb := srv.Client()
	l := ledger.NewRedis(rdb, "rf:", time.Hour)
	if err := rdb.Set(ctx, ledger.Key("rf:", "bad"), "not a record", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	_, malformed := l.Claim(ctx, "bad", "me", time.Minute)
	argument := rdb.Eval(ctx, "return redis.error_reply('ERR argument limit out of range: 0 (want an integer from 1 to 1e9)')", nil).Err()
	if err := rdb.Set(ctx, "rf:str", "x", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	wrongType := rdb.ZAdd(ctx, "rf:str", redis.Z{Score: 1, Member: "j"}).Err()
	serverState := rdb.Eval(ctx, "return redis.error_reply('LOADING Redis is loading the dataset in memory')", nil).Err()
	otherErr := rdb.Eval(ctx, "return redis.error_reply('ERR max number of clients reached')", nil).Err()
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	defer down.Close()
	unreachable := down.Ping(ctx).Err()

	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"a malformed ledger record", malformed, true},
		{"an argument out of range", argument, true},
		{"a key of another type", wrongType, true},
		{"wrapped", fmt.Errorf("reserve slot for sms-gw: %w", argument), true},
		{"joined, each refused", errors.Join(malformed, wrongType), true},
		{"joined with a failure", errors.Join(malformed, unreachable), false},
		{"about a key every job shares", Shared(wrongType), false},
		{"joined with one about a shared key", errors.Join(malformed, Shared(argument)), false},
		{"the server's state", serverState, false},
		{"another server error", otherErr, false},
		{"unreachable", unreachable, false},
		{"a timeout", context.DeadlineExceeded, false},
		{"nil", nil, false},
	} {
		if c.err == nil && c.name != "nil" {
			t.Fatalf("%s: no error to read", c.name)
		}
		if got := Refused(c.err); got != c.want {
			t.Errorf("%s (%v): Refused = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
