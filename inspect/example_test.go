package inspect_test

import (
	"context"
	"fmt"
	"time"

	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/userlimit"
)

// Why would u42's next SMS not go out? Two sends of a cap of 2 per hour:
// the next is allowed when the first leaves the window.
func ExampleInspector_User() {
	ctx := context.Background()
	rdb := exampleRedis // a *redis.Client of the fleet's Redis
	prefix := newPrefix("example-user")
	rule := userlimit.Rule{Limit: 2, Window: time.Hour, Algorithm: userlimit.SlidingLog, OnExceed: userlimit.Drop}

	// What the dispatcher did: two jobs of u42 sent.
	users := userlimit.NewRedis(rdb, prefix)
	for _, job := range []string{"job-1", "job-2"} {
		if _, err := users.Allow(ctx, userlimit.Key{Channel: "sms", User: "u42"}, job, rule); err != nil {
			panic(err)
		}
	}

	in, err := inspect.New(rdb, nil, inspect.Config{
		Limits:     limits.Config{Prefix: prefix},
		UserLimits: map[string]userlimit.Rule{"sms": rule},
	})
	if err != nil {
		panic(err)
	}
	a, err := in.User(ctx, "sms", "u42")
	if err != nil {
		panic(err)
	}
	fmt.Printf("cap %d per %s (%s, %s): used %d, remaining %d, allowed now: %t\n",
		a.Rule.Limit, a.Rule.Window, a.Rule.Algorithm, a.Rule.OnExceed, a.Used, a.Remaining, a.Allowed)
	fmt.Println("next allowed in", time.Duration(a.NextAllowed.InSeconds*float64(time.Second)).Round(time.Minute))
	// Output:
	// cap 2 per 1h0m0s (sliding_log, drop): used 2, remaining 0, allowed now: false
	// next allowed in 1h0m0s
}

// Why do sms-gateway's jobs wait? Ten slots handed out at 10/s: the next
// free one is a second away.
func ExampleInspector_Provider() {
	ctx := context.Background()
	rdb := exampleRedis
	prefix := newPrefix("example-provider")
	p := providers.Config{Name: "sms-gateway", Channel: "sms", Rate: 10, MaxQueueDelay: 5 * time.Second}
	cfg := inspect.Config{Limits: limits.Config{Prefix: prefix}, Providers: []providers.Config{p}}

	// What the dispatcher did: ten slots reserved in the provider's queue.
	set, err := limits.Redis(rdb, cfg.Limits)
	if err != nil {
		panic(err)
	}
	q := set.Leaky
	c := limits.Contract(p)
	warm := time.Duration(0)
	c.ColdStart = &warm // a provider's first start
	for range 10 {
		if _, err := q.Reserve(ctx, p.Name, c, 1); err != nil {
			panic(err)
		}
	}

	in, err := inspect.New(rdb, nil, cfg)
	if err != nil {
		panic(err)
	}
	a, err := in.Provider(ctx, "sms-gateway")
	if err != nil {
		panic(err)
	}
	fmt.Printf("contract %g/s, burst %g, headroom %g\n", a.Contract.Rate, a.Contract.Burst, a.Contract.Headroom)
	fmt.Printf("queue: %.0f jobs, %.1fs; next free slot in %.1fs\n", a.Queue.Depth, a.Queue.DelaySeconds, a.NextFreeSlot.InSeconds)
	// Output:
	// contract 10/s, burst 50, headroom 0.015
	// queue: 10 jobs, 1.0s; next free slot in 1.0s
}

// What became of job j-7? It held its lease when the per-user cap dropped
// it: the ledger says so in the script run that gave the lease up.
func ExampleInspector_Job() {
	ctx := context.Background()
	rdb := exampleRedis
	prefix := newPrefix("example-job")

	// What the dispatcher did: claimed the job, then suppressed it.
	led := ledger.NewRedis(rdb, prefix, 24*time.Hour)
	if _, err := led.Claim(ctx, "j-7", "web-1/42", 30*time.Second); err != nil {
		panic(err)
	}
	if err := led.Ended(ctx, "j-7", "web-1/42", ledger.EndSuppressed, ledger.ReasonUserLimit); err != nil {
		panic(err)
	}

	in, err := inspect.New(rdb, nil, inspect.Config{Limits: limits.Config{Prefix: prefix, DedupTTL: 24 * time.Hour}})
	if err != nil {
		panic(err)
	}
	a, err := in.Job(ctx, "j-7")
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s: %s (%s), sent %t, attempts %d, lease %q\n", a.Job, a.State, a.Ledger.Reason, a.Ledger.Sent, a.Ledger.Attempts, a.Ledger.LeaseOwner)
	// Output:
	// j-7: suppressed (user_limit), sent false, attempts 0, lease ""
}
