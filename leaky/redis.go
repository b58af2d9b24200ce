package leaky

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed reserve.lua
	reserveLua    string
	reserveScript = redis.NewScript(reserveLua)

	//go:embed cancel.lua
	cancelLua    string
	cancelScript = redis.NewScript(cancelLua)

	//go:embed pause.lua
	pauseLua    string
	pauseScript = redis.NewScript(pauseLua)

	//go:embed status.lua
	statusLua    string
	statusScript = redis.NewScript(statusLua)
)

// Redis is a Queue shared by the fleet through Redis (standalone, Sentinel
// or Cluster). Every operation is one atomic Lua script that reads the Redis
// clock; the script cache is refilled by EVAL after a restart or failover.
// It is safe for concurrent use by any number of goroutines and processes.
type Redis struct {
	rdb    redis.Scripter
	prefix string
	o      options
}

var _ Queue = (*Redis)(nil)

// NewRedis returns a queue whose keys start with prefix (the configured
// redis.key_prefix, e.g. "notifier:").
func NewRedis(rdb redis.Scripter, prefix string, opts ...Option) *Redis {
	return &Redis{rdb: rdb, prefix: prefix, o: buildOptions(opts)}
}

// tag is the hash tag every key of a provider shares.
func tag(prefix, provider string) string { return "{" + prefix + "p:" + provider + "}" }

func stateKey(prefix, provider string) string { return tag(prefix, provider) + ":tat" }
func pauseKey(prefix, provider string) string { return tag(prefix, provider) + ":pause" }

func (q *Redis) keys(provider string) []string {
	return []string{stateKey(q.prefix, provider), pauseKey(q.prefix, provider)}
}

// nowArg is the optional now argument: empty (Redis TIME) unless WithNow.
func (q *Redis) nowArg() string {
	if q.o.now == nil {
		return ""
	}
	return strconv.FormatInt(q.o.now().UnixMicro(), 10)
}

// guardArg is the guard flag: "1" checks the writer's run_id.
func (q *Redis) guardArg() string {
	if q.o.noGuard {
		return "0"
	}
	return "1"
}

func (q *Redis) reserveArgs(p plan) []any {
	return []any{p.inc, p.mqd, p.cold, q.o.idleTTL.Milliseconds(), q.nowArg(), q.guardArg()}
}

// Load loads the scripts into the script cache of every server rdb reaches
// (every master of a cluster), so that ReserveCmd can be pipelined: a
// pipelined EVALSHA does not fall back to EVAL. Call it again after a
// restart, failover or SCRIPT FLUSH (a pipelined reserve then fails with a
// NOSCRIPT error).
func (q *Redis) Load(ctx context.Context) error {
	for _, s := range []*redis.Script{reserveScript, cancelScript, pauseScript, statusScript} {
		if err := s.Load(ctx, q.rdb).Err(); err != nil {
			return fmt.Errorf("load leaky scripts: %w", err)
		}
	}
	return nil
}

// Reserve implements Queue.
func (q *Redis) Reserve(ctx context.Context, provider string, c Contract, cost int) (Reservation, error) {
	p, err := q.o.plan(c, cost)
	if err != nil {
		return Reservation{}, fmt.Errorf("reserve slot %s: %w", provider, err)
	}
	v, err := reserveScript.Run(ctx, q.rdb, q.keys(provider), q.reserveArgs(p)...).Result()
	if err != nil {
		return Reservation{}, fmt.Errorf("reserve slot %s: %w", provider, err)
	}
	r, err := decodeReservation(v)
	if err != nil {
		return Reservation{}, fmt.Errorf("reserve slot %s: %w", provider, err)
	}
	return r, nil
}

// ReserveCmd is a reservation queued on a pipeline; its Result is ready
// after the pipeline's Exec.
type ReserveCmd struct {
	provider string
	cmd      *redis.Cmd
	err      error // a request refused before it was queued
}

// ReserveCmd queues a Reserve on pipe (EVALSHA only: call Load first) and
// returns a handle to decode after pipe.Exec. An invalid request is not
// queued; its error comes from Result.
func (q *Redis) ReserveCmd(ctx context.Context, pipe redis.Pipeliner, provider string, c Contract, cost int) *ReserveCmd {
	p, err := q.o.plan(c, cost)
	if err != nil {
		return &ReserveCmd{provider: provider, err: err}
	}
	cmd := reserveScript.EvalSha(ctx, pipe, q.keys(provider), q.reserveArgs(p)...)
	return &ReserveCmd{provider: provider, cmd: cmd}
}

// Result decodes the reservation after the pipeline's Exec.
func (rc *ReserveCmd) Result() (Reservation, error) {
	if rc.err != nil {
		return Reservation{}, fmt.Errorf("reserve slot %s: %w", rc.provider, rc.err)
	}
	v, err := rc.cmd.Result()
	if err != nil {
		return Reservation{}, fmt.Errorf("reserve slot %s: %w", rc.provider, err)
	}
	r, err := decodeReservation(v)
	if err != nil {
		return Reservation{}, fmt.Errorf("reserve slot %s: %w", rc.provider, err)
	}
	return r, nil
}

// Cancel implements Queue.
func (q *Redis) Cancel(ctx context.Context, provider string, c Contract, r Reservation, cost int) error {
	p, err := q.o.plan(c, cost)
	if err != nil {
		return fmt.Errorf("cancel slot %s: %w", provider, err)
	}
	if !r.OK {
		return nil
	}
	keys := []string{stateKey(q.prefix, provider)}
	if err := cancelScript.Run(ctx, q.rdb, keys, r.Slot, p.inc, r.seq, q.guardArg()).Err(); err != nil {
		return fmt.Errorf("cancel slot %s: %w", provider, err)
	}
	return nil
}

// Pause implements Queue.
func (q *Redis) Pause(ctx context.Context, provider string, d time.Duration) error {
	us := d.Microseconds()
	if us <= 0 {
		return nil
	}
	err := pauseScript.Run(ctx, q.rdb, q.keys(provider), us, q.o.idleTTL.Milliseconds(), q.nowArg(),
		PauseChannel(q.prefix), provider).Err()
	if err != nil {
		return fmt.Errorf("pause provider %s: %w", provider, err)
	}
	return nil
}

// status returns the queue length and the pause left, in µs.
func (q *Redis) status(ctx context.Context, provider string) (queued, paused int64, err error) {
	v, err := statusScript.Run(ctx, q.rdb, q.keys(provider), q.nowArg()).Result()
	if err != nil {
		return 0, 0, err
	}
	n, err := ints(v, 2)
	if err != nil {
		return 0, 0, err
	}
	return n[0], n[1], nil
}

// PausedFor implements Queue.
func (q *Redis) PausedFor(ctx context.Context, provider string) (time.Duration, error) {
	_, paused, err := q.status(ctx, provider)
	if err != nil {
		return 0, fmt.Errorf("read pause %s: %w", provider, err)
	}
	return micros(paused), nil
}

// Depth implements Queue.
func (q *Redis) Depth(ctx context.Context, provider string, c Contract) (float64, error) {
	if err := c.validate(); err != nil {
		return 0, fmt.Errorf("read queue depth %s: %w", provider, err)
	}
	queued, _, err := q.status(ctx, provider)
	if err != nil {
		return 0, fmt.Errorf("read queue depth %s: %w", provider, err)
	}
	return depthUnits(queued, c, q.o.headroom), nil
}

func decodeReservation(v any) (Reservation, error) {
	n, err := ints(v, 4)
	if err != nil {
		return Reservation{}, err
	}
	if n[0] == 1 {
		return Reservation{OK: true, Delay: micros(n[1]), Slot: n[2], seq: n[3]}, nil
	}
	return Reservation{RetryAfter: micros(n[1])}, nil
}

// ints checks that a script reply is an array of n integers.
func ints(v any, n int) ([]int64, error) {
	a, ok := v.([]any)
	if !ok || len(a) != n {
		return nil, fmt.Errorf("unexpected script reply %v: want %d integers", v, n)
	}
	out := make([]int64, n)
	for i, e := range a {
		x, ok := e.(int64)
		if !ok {
			return nil, fmt.Errorf("unexpected script reply %v: element %d is %T, want an integer", v, i, e)
		}
		out[i] = x
	}
	return out, nil
}
