package userlimit

import (
	"context"
	_ "embed" // the .lua scripts
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed sliding_log.lua
	slidingLogLua    string
	slidingLogScript = redis.NewScript(slidingLogLua)

	//go:embed sliding_window.lua
	slidingWindowLua    string
	slidingWindowScript = redis.NewScript(slidingWindowLua)

	//go:embed fixed_window.lua
	fixedWindowLua    string
	fixedWindowScript = redis.NewScript(fixedWindowLua)

	//go:embed token_bucket.lua
	tokenBucketLua    string
	tokenBucketScript = redis.NewScript(tokenBucketLua)
)

// script returns the script of a valid algorithm.
func script(a Algorithm) *redis.Script {
	switch a {
	case SlidingWindow:
		return slidingWindowScript
	case FixedWindow:
		return fixedWindowScript
	case TokenBucket:
		return tokenBucketScript
	default:
		return slidingLogScript
	}
}

// Redis is a Limiter whose state lives in Redis and is shared by every
// process using the same server (standalone or Cluster) and key prefix.
// Each decision is one atomic script run (EVALSHA, falling back to EVAL when
// the server's script cache is empty) that reads the server's clock, so the
// workers' clocks never matter. Safe for concurrent use. Use NewRedis; the
// zero value is not usable.
type Redis struct {
	rdb    redis.Scripter
	prefix string
	now    func() time.Time // tests only: passed to the scripts as ARGV[4]
}

// NewRedis returns a limiter on rdb (a *redis.Client, *redis.ClusterClient
// or *redis.Ring) whose keys start with prefix, e.g. "notifier:".
func NewRedis(rdb redis.Scripter, prefix string) *Redis {
	return &Redis{rdb: rdb, prefix: prefix}
}

// Allow decides one job in one round trip. See Limiter.
func (r *Redis) Allow(ctx context.Context, key Key, jobID string, rule Rule) (Result, error) {
	rule, err := prepare(key, jobID, rule)
	if err != nil {
		return Result{}, err
	}
	keys, args := r.call(key, jobID, rule)
	v, err := script(rule.Algorithm).Run(ctx, r.rdb, keys, args...).Result()
	if err != nil {
		return Result{}, wrapDecide(key, rule, err)
	}
	res, err := decode(v)
	if err != nil {
		return Result{}, wrapDecide(key, rule, err)
	}
	return res, nil
}

// AllowCmd queues the decision of one job on pipe (EVALSHA only) and returns
// it; read it with Decision.Result after pipe.Exec. Inside a pipeline a
// NOSCRIPT has no EVAL fallback: call Load once before pipelining, and again
// when a Decision's error wraps ErrNotLoaded.
func (r *Redis) AllowCmd(ctx context.Context, pipe redis.Pipeliner, key Key, jobID string, rule Rule) *Decision {
	rule, err := prepare(key, jobID, rule)
	d := &Decision{key: key, rule: rule, err: err}
	if err != nil {
		return d
	}
	keys, args := r.call(key, jobID, rule)
	d.cmd = script(rule.Algorithm).EvalSha(ctx, pipe, keys, args...)
	return d
}

// Load loads every script into the server's script cache (on every master
// of a Cluster), so that pipelined decisions find them.
func (r *Redis) Load(ctx context.Context) error {
	for _, a := range algorithms {
		if err := script(a).Load(ctx, r.rdb).Err(); err != nil {
			return fmt.Errorf("load user limit script %s: %w", a, err)
		}
	}
	return nil
}

// call builds the KEYS and ARGV of one decision.
func (r *Redis) call(key Key, jobID string, rule Rule) ([]string, []any) {
	args := []any{rule.Limit, rule.windowMicros(), jobID}
	if r.now != nil {
		args = append(args, r.now().UnixMicro())
	}
	return Keys(r.prefix, key, rule.Algorithm, jobID), args
}

// Decision is a decision queued on a pipeline by Redis.AllowCmd. Read it
// once the pipeline has run, from any one goroutine.
type Decision struct {
	key  Key
	rule Rule
	err  error
	cmd  *redis.Cmd
}

// Result returns the decision once the pipeline has run. A NOSCRIPT reply
// is returned as an error wrapping ErrNotLoaded.
func (d *Decision) Result() (Result, error) {
	if d.err != nil {
		return Result{}, d.err
	}
	v, err := d.cmd.Result()
	if err != nil {
		if errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT") {
			return Result{}, wrapDecide(d.key, d.rule, fmt.Errorf("%w: %w", ErrNotLoaded, err))
		}
		return Result{}, wrapDecide(d.key, d.rule, err)
	}
	res, err := decode(v)
	if err != nil {
		return Result{}, wrapDecide(d.key, d.rule, err)
	}
	return res, nil
}

// decode reads a script's reply {allowed, remaining, retry_after_us}.
func decode(v any) (Result, error) {
	vals, ok := v.([]any)
	if !ok || len(vals) != 3 {
		return Result{}, fmt.Errorf("decode reply: want 3 integers, got %T %v", v, v)
	}
	var n [3]int64
	for i, x := range vals {
		if n[i], ok = x.(int64); !ok {
			return Result{}, fmt.Errorf("decode reply: element %d is %T, want an integer", i, x)
		}
	}
	return result(n[0] == 1, n[1], n[2]), nil
}
