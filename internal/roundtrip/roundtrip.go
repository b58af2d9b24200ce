// Package roundtrip counts a go-redis client's round trips, for the
// benchmarks and the tests that hold the dispatcher to its promise of two
// round trips per sent job. It is instrumentation, not the product's API.
package roundtrip

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Counter is a go-redis hook (redis.Client.AddHook) that counts a
// client's round trips to its servers: one per command, one per pipeline
// however many commands it carries. It is how the benchmarks check the
// promise of two round trips per sent job. Safe for concurrent use.
type Counter struct{ n atomic.Int64 }

// Count is the round trips so far.
func (h *Counter) Count() int64 { return h.n.Load() }

// DialHook implements redis.Hook.
func (h *Counter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}
