// Package steptrace carries a hook that is told how long each step of a
// job took in the dispatcher, for the bench's per-layer latency. It rides
// on the context given to Dispatcher.Run, so that it is no part of the
// dispatcher's public options: only this module can set it.
package steptrace

import (
	"context"
	"time"
)

// Func is told each step's duration: "admit", "ledger" (claim), "user"
// (per-user cap), "global" (fleet bucket, including any wait), "leaky"
// (the reservation call, not the wait for the slot), "provider" (the send)
// and "ledger_sent". It must be fast and safe for concurrent use.
type Func func(step string, took time.Duration)

type key struct{}

// With returns ctx carrying f.
func With(ctx context.Context, f Func) context.Context { return context.WithValue(ctx, key{}, f) }

// From is the Func ctx carries, or nil.
func From(ctx context.Context) Func {
	f, _ := ctx.Value(key{}).(Func)
	return f
}
