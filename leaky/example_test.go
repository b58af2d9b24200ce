package leaky_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/leaky"
)

// A 10/s contract with a 250 ms queue: three sends are queued 100 ms apart,
// the fourth finds the queue full.
func ExampleMemory() {
	ctx := context.Background()
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	q, err := leaky.NewMemory(leaky.WithNow(func() time.Time { return now }), leaky.WithHeadroom(0))
	if err != nil {
		panic(err)
	}
	c := leaky.Contract{Rate: 10, MaxQueueDelay: 250 * time.Millisecond}
	for i := 0; i < 4; i++ {
		r, err := q.Reserve(ctx, "sms-gateway", c, 1)
		if err != nil {
			panic(err)
		}
		if r.OK {
			fmt.Printf("send in %v\n", r.Delay)
		} else {
			fmt.Printf("queue full, retry in %v\n", r.RetryAfter)
		}
	}
	depth, _ := q.Depth(ctx, "sms-gateway", c)
	fmt.Printf("depth %.0f\n", depth)
	// Output:
	// send in 0s
	// send in 100ms
	// send in 200ms
	// queue full, retry in 50ms
	// depth 3
}

// A 429 with Retry-After 2s pauses the provider: a job already holding a
// slot sees the pause before it sends, and new slots start after it.
func ExampleMemory_Pause() {
	ctx := context.Background()
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	q, err := leaky.NewMemory(leaky.WithNow(func() time.Time { return now }), leaky.WithHeadroom(0))
	if err != nil {
		panic(err)
	}
	c := leaky.Contract{Rate: 10, MaxQueueDelay: 5 * time.Second}
	held, _ := q.Reserve(ctx, "push", c, 1)
	fmt.Println("held slot in", held.Delay)

	_ = q.Pause(ctx, "push", 2*time.Second)
	paused, _ := q.PausedFor(ctx, "push")
	fmt.Println("before sending, paused for", paused)
	r, _ := q.Reserve(ctx, "push", c, 1)
	fmt.Println("next slot in", r.Delay)

	now = now.Add(2 * time.Second)
	paused, _ = q.PausedFor(ctx, "push")
	fmt.Println("2s later, paused for", paused)
	// Output:
	// held slot in 0s
	// before sending, paused for 2s
	// next slot in 2s
	// 2s later, paused for 0s
}

// An SMS of three segments costs three units of a segments contract.
func ExampleMemory_cost() {
	ctx := context.Background()
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	q, err := leaky.NewMemory(leaky.WithNow(func() time.Time { return now })) // default 1.5 % headroom
	if err != nil {
		panic(err)
	}
	c := leaky.Contract{Rate: 100, MaxQueueDelay: time.Second}
	a, _ := q.Reserve(ctx, "sms-gateway", c, 3)
	b, _ := q.Reserve(ctx, "sms-gateway", c, 1)
	fmt.Println(a.Delay, b.Delay)
	// Output:
	// 0s 30.457ms
}

// The slots of many jobs in one provider's queue, reserved by one script
// run: the answers of that many Reserve calls at one instant.
func ExampleRedis_ReserveGroup() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "redis.example:6379"})
	defer rdb.Close()
	q, err := leaky.NewRedis(rdb, "notifier:")
	if err != nil {
		panic(err)
	}
	if err := q.Load(ctx); err != nil { // pipelines have no EVAL fallback
		fmt.Println(err)
		return
	}
	g := q.ReserveGroup("sms-gateway", leaky.Contract{Rate: 100, MaxQueueDelay: 5 * time.Second})
	var slots []*leaky.ReserveCmd
	for _, segments := range []int{1, 3, 1} {
		slots = append(slots, g.Add(segments))
	}
	pipe := rdb.Pipeline()
	g.Queue(ctx, pipe)
	_, _ = pipe.Exec(ctx)
	for _, s := range slots {
		r, err := s.Result()
		fmt.Println(r.OK, r.Delay, err)
	}
}

// An adaptive 10/s contract with a quota of 3 a minute: the fourth unit
// waits for the next minute, beyond the 1 s queue; the 429 three workers
// meet at once halves the rate once (the 10/s it held met the provider's
// limit) and sets the target just under it, 9.8/s; from 30 s after it the
// rate climbs back by 0.05/s every second towards the target, and from
// leaky.AdaptiveHold after that (22 s) it probes above, ever faster: at a
// minute, 5 + 1.5 of the climb + 1.2 of 8 s of probing.
func ExampleMemory_adaptiveQuota() {
	ctx := context.Background()
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	q, err := leaky.NewMemory(leaky.WithNow(func() time.Time { return now }), leaky.WithHeadroom(0))
	if err != nil {
		panic(err)
	}
	c := leaky.Contract{
		Rate:          10,
		MaxQueueDelay: time.Second,
		Adaptive:      &leaky.Adaptive{MinRate: 1, Decrease: 0.5, IncreasePerS: 0.05, Quiet: 30 * time.Second},
		Quotas:        []leaky.Quota{{Limit: 3, Per: time.Minute}},
	}
	for i := 0; i < 4; i++ {
		r, _ := q.Reserve(ctx, "sms-gateway", c, 1)
		if r.OK {
			fmt.Println("send in", r.Delay)
		} else {
			fmt.Printf("quota %d spent, retry in %v\n", r.Quota, r.RetryAfter)
		}
	}
	for i := 0; i < 3; i++ {
		lowered, _ := q.Backoff(ctx, "sms-gateway", c, 2*time.Second)
		fmt.Println("429, lowered:", lowered)
	}
	s, _ := q.Shape(ctx, "sms-gateway", c)
	fmt.Printf("%v/s, quota %d of %d, resets in %v\n", s.EffectiveRate, s.Quotas[0].Used, s.Quotas[0].Limit, s.Quotas[0].ResetsIn)

	now = now.Add(time.Minute)
	a, _ := q.Reserve(ctx, "sms-gateway", c, 1)
	b, _ := q.Reserve(ctx, "sms-gateway", c, 1)
	s, _ = q.Shape(ctx, "sms-gateway", c)
	fmt.Printf("a minute later: send in %v, then %v (%v/s)\n", a.Delay, b.Delay, s.EffectiveRate)
	// Output:
	// send in 0s
	// send in 100ms
	// send in 200ms
	// quota 0 spent, retry in 59s
	// 429, lowered: true
	// 429, lowered: false
	// 429, lowered: false
	// 5/s, quota 3 of 3, resets in 1m0s
	// a minute later: send in 0s, then 129.871ms (7.7/s)
}
