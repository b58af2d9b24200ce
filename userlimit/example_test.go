package userlimit_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/userlimit"
)

func ExampleMemory() {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	lim := userlimit.NewMemory(userlimit.WithNow(func() time.Time { return now }))
	rule := userlimit.Rule{Limit: 2, Window: time.Hour} // sliding_log, drop
	key := userlimit.Key{Channel: "push", User: "alice"}

	for _, job := range []string{"job-1", "job-2", "job-3", "job-1"} {
		res, err := lim.Allow(ctx, key, job, rule)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s allowed=%t remaining=%d retry_after=%s\n", job, res.Allowed, res.Remaining, res.RetryAfter)
		now = now.Add(10 * time.Minute)
	}
	// Output:
	// job-1 allowed=true remaining=1 retry_after=0s
	// job-2 allowed=true remaining=0 retry_after=0s
	// job-3 allowed=false remaining=0 retry_after=40m0s
	// job-1 allowed=true remaining=0 retry_after=0s
}

// A job taken now but sent from its provider's queue later is counted when
// it is sent: its admission moves to its send slot with AllowAt.
func ExampleMemory_AllowAt() {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	lim := userlimit.NewMemory(userlimit.WithNow(func() time.Time { return now }))
	rule := userlimit.Rule{Limit: 2, Window: 3 * time.Second} // sliding_log
	key := userlimit.Key{Channel: "sms", User: "carol"}

	// Two jobs admitted now, whose send slots are 2 s ahead (a queue).
	for _, job := range []string{"a", "b"} {
		res, _ := lim.Allow(ctx, key, job, rule)
		res, _ = lim.AllowAt(ctx, key, job, rule, now.Add(2*time.Second))
		fmt.Printf("%s allowed=%t, counted at +%s\n", job, res.Allowed, res.At.Sub(now))
	}
	// 1.5 s later a third job would leave at once, 0.5 s after a and b: the
	// window of 3 s around their sends is full until 5 s.
	now = now.Add(1500 * time.Millisecond)
	res, _ := lim.Allow(ctx, key, "c", rule)
	fmt.Printf("c allowed=%t retry_after=%s\n", res.Allowed, res.RetryAfter)
	// Output:
	// a allowed=true, counted at +2s
	// b allowed=true, counted at +2s
	// c allowed=false retry_after=3.5s
}

func ExampleMemory_tokenBucket() {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	lim := userlimit.NewMemory(userlimit.WithNow(func() time.Time { return now }))
	// A burst of 3, then one more every 20 minutes.
	rule := userlimit.Rule{Limit: 3, Window: time.Hour, Algorithm: userlimit.TokenBucket}
	key := userlimit.Key{Channel: "sms", User: "bob"}

	for i := range 5 {
		res, _ := lim.Allow(ctx, key, fmt.Sprintf("job-%d", i), rule)
		fmt.Printf("job-%d allowed=%t retry_after=%s\n", i, res.Allowed, res.RetryAfter)
	}
	now = now.Add(20 * time.Minute)
	res, _ := lim.Allow(ctx, key, "job-5", rule)
	fmt.Printf("20m later: job-5 allowed=%t remaining=%d\n", res.Allowed, res.Remaining)
	// Output:
	// job-0 allowed=true retry_after=0s
	// job-1 allowed=true retry_after=0s
	// job-2 allowed=true retry_after=0s
	// job-3 allowed=false retry_after=20m0s
	// job-4 allowed=false retry_after=20m0s
	// 20m later: job-5 allowed=true remaining=0
}

func ExampleKeys() {
	key := userlimit.Key{Channel: "push", User: "alice"}
	fmt.Println(userlimit.Keys("notifier:", key, userlimit.SlidingLog, "job-1"))
	fmt.Println(userlimit.Keys("notifier:", key, userlimit.TokenBucket, "job-1"))
	fmt.Println(userlimit.Tag("notifier:", userlimit.Key{Channel: "push", User: "{odd}"}))
	// Output:
	// [{notifier:u:push:alice}:sl]
	// [{notifier:u:push:alice}:tb {notifier:u:push:alice}:tb:log]
	// {notifier:u:push:%7Bodd%7D}
}

// Two round trips per job at most: the per-user decision rides on a pipeline
// with the job's other per-job commands.
func ExampleRedis_AllowCmd() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "redis.example:6379"})
	defer rdb.Close()
	lim := userlimit.NewRedis(rdb, "notifier:")
	if err := lim.Load(ctx); err != nil { // pipelines have no EVAL fallback
		fmt.Println(err)
		return
	}
	pipe := rdb.Pipeline()
	d := lim.AllowCmd(ctx, pipe, userlimit.Key{Channel: "push", User: "alice"}, "job-1",
		userlimit.Rule{Limit: 5, Window: time.Hour})
	// ... queue the job's other commands on pipe ...
	_, _ = pipe.Exec(ctx)
	res, err := d.Result()
	if errors.Is(err, userlimit.ErrNotLoaded) {
		_ = lim.Load(ctx) // the server lost its scripts (restart, failover): load and decide again
	}
	fmt.Println(res.Allowed, err)
}

// The decisions of many jobs in one script run: a dispatcher batching its
// workers' requests adds each job's decision to the group of its algorithm
// (on a Redis Cluster, of its algorithm and cluster slot: see Redis.Tag)
// and sends the group once.
func ExampleRedis_Group() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "redis.example:6379"})
	defer rdb.Close()
	lim := userlimit.NewRedis(rdb, "notifier:")
	if err := lim.Load(ctx); err != nil {
		fmt.Println(err)
		return
	}
	rule := userlimit.Rule{Limit: 3, Window: 10 * time.Minute}
	g := lim.Group(userlimit.SlidingLog)
	alice := g.Add(userlimit.Key{Channel: "sms", User: "alice"}, "job-1", rule)
	bob := g.Add(userlimit.Key{Channel: "sms", User: "bob"}, "job-2", rule)
	pipe := rdb.Pipeline()
	g.Queue(ctx, pipe)
	_, _ = pipe.Exec(ctx)
	for _, d := range []*userlimit.Decision{alice, bob} {
		res, err := d.Result()
		fmt.Println(res.Allowed, res.Remaining, err)
	}
}

// Peek asks what a new job of the user would get now, without counting
// one: an operator's "why", or a check before a send.
func ExampleMemory_Peek() {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	lim := userlimit.NewMemory(userlimit.WithNow(func() time.Time { return now }))
	rule := userlimit.Rule{Limit: 2, Window: time.Hour}
	key := userlimit.Key{Channel: "sms", User: "u42"}

	for _, job := range []string{"job-1", "job-2"} {
		if _, err := lim.Allow(ctx, key, job, rule); err != nil {
			panic(err)
		}
		now = now.Add(10 * time.Minute)
	}
	for range 2 { // a peek counts nothing: asking twice answers the same
		res, err := lim.Peek(ctx, key, rule)
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%t retry_after=%s\n", res.Allowed, res.RetryAfter)
	}
	// Output:
	// allowed=false retry_after=40m0s
	// allowed=false retry_after=40m0s
}
