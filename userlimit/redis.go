package userlimit

import (
	"context"
	_ "embed" // the .lua scripts
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/internal/luapre"
)

// Each script is the shared preambles (internal/luapre: now_us; str, idiv,
// ttl), its algorithm's decide function and the driver (decide.lua) that
// runs it for every decision of a call.
var (
	//go:embed decide.lua
	decideLua string

	// The window algorithms' marker reader, prepended to their scripts.
	//go:embed marker.lua
	markerLua string

	//go:embed sliding_log.lua
	slidingLogLua string
	//go:embed sliding_window.lua
	slidingWindowLua string
	//go:embed fixed_window.lua
	fixedWindowLua string
	//go:embed token_bucket.lua
	tokenBucketLua string

	// algorithmLua is each algorithm's decide function with what it
	// needs prepended.
	algorithmLua = map[Algorithm]string{
		SlidingLog:    slidingLogLua,
		SlidingWindow: markerLua + slidingWindowLua,
		FixedWindow:   markerLua + fixedWindowLua,
		TokenBucket:   tokenBucketLua,
	}
	decideScripts = scriptsWith("")
)

// scriptsWith builds every algorithm's script with prefix prepended (""
// for the deciding scripts, peek.lua for the read-only ones: before the
// preambles, so that every redis.call of the script goes through it).
func scriptsWith(prefix string) map[Algorithm]*redis.Script {
	m := make(map[Algorithm]*redis.Script, len(algorithmLua))
	for a, body := range algorithmLua {
		m[a] = redis.NewScript(prefix + luapre.Now + luapre.Num + body + decideLua)
	}
	return m
}

// script returns the script of a valid algorithm.
func script(a Algorithm) *redis.Script {
	if s, ok := decideScripts[a]; ok {
		return s
	}
	return decideScripts[SlidingLog] // the default algorithm
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
	now    func() time.Time // WithNow, tests only: passed to the scripts as ARGV[4]
}

// NewRedis returns a limiter on rdb (a *redis.Client, *redis.ClusterClient
// or *redis.Ring) whose keys start with prefix, e.g. "notifier:".
func NewRedis(rdb redis.Scripter, prefix string, opts ...Option) *Redis {
	return &Redis{rdb: rdb, prefix: prefix, now: buildOptions(opts).now}
}

// Allow decides one job for now, in one round trip. See Limiter.
func (r *Redis) Allow(ctx context.Context, key Key, jobID string, rule Rule) (Result, error) {
	return r.run(ctx, rule, func(g *Group) *Decision { return g.Add(key, jobID, rule) })
}

// AllowAt decides one job for the instant at, in one round trip. See
// Limiter.
func (r *Redis) AllowAt(ctx context.Context, key Key, jobID string, rule Rule, at time.Time) (Result, error) {
	return r.run(ctx, rule, func(g *Group) *Decision { return g.AddAt(key, jobID, rule, at) })
}

func (r *Redis) run(ctx context.Context, rule Rule, add func(*Group) *Decision) (Result, error) {
	g := r.Group(rule.WithDefaults().Algorithm)
	d := add(g)
	if d.err != nil {
		return Result{}, d.err
	}
	g.cmd = script(g.alg).Run(ctx, r.rdb, g.keys, g.args...)
	return d.Result()
}

// AllowCmd queues the decision of one job on pipe (EVALSHA only) and returns
// it; read it with Decision.Result after pipe.Exec. Inside a pipeline a
// NOSCRIPT has no EVAL fallback: call Load once before pipelining, and again
// when a Decision's error wraps ErrNotLoaded.
func (r *Redis) AllowCmd(ctx context.Context, pipe redis.Pipeliner, key Key, jobID string, rule Rule) *Decision {
	g := r.Group(rule.Algorithm)
	d := g.Add(key, jobID, rule)
	g.Queue(ctx, pipe)
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

// Tag is the hash tag of key's Redis keys under this limiter's prefix: the
// decisions of a Group must share its cluster slot on a Redis Cluster.
func (r *Redis) Tag(key Key) string { return Tag(r.prefix, key) }

// Group is the decisions of several jobs under one algorithm, made by one
// script run: the same answers, in the order of Add, as that many Allow
// calls at one instant, for one EVALSHA and one read of the clock. It is how
// the dispatcher decides the jobs of one pipeline. On a Redis Cluster every
// decision's key must hash to one slot (see Tag). Add and Queue are not
// safe for concurrent use; the Decisions' Results are, once the pipeline
// has run.
type Group struct {
	r    *Redis
	alg  Algorithm
	keys []string
	args []any
	n    int // decisions queued
	cmd  *redis.Cmd

	limit               int // the latest decision's rule, boxed in limitArg and windowArg
	window              int64
	limitArg, windowArg any
	// handles holds the Decisions Add returns (a Decision never changes
	// once made, so a pointer into a slice that grew since still reads
	// right).
	handles []Decision

	once    sync.Once
	replies []Result
	err     error
}

// Group starts a group of decisions under algorithm alg (the rules added
// must all have it, after defaults: "" is sliding_log).
func (r *Redis) Group(alg Algorithm) *Group {
	if alg == "" {
		alg = SlidingLog
	}
	now := ""
	if r.now != nil {
		now = strconv.FormatInt(r.now().UnixMicro(), 10)
	}
	nkeys := 2
	if alg == SlidingLog {
		nkeys = 1
	}
	args := make([]any, 2, 2+4*groupCap)
	args[0], args[1] = now, nkeys
	return &Group{r: r, alg: alg, args: args, keys: make([]string, 0, nkeys*groupCap),
		handles: make([]Decision, 0, groupCap)}
}

// groupCap is the decisions a group makes room for at its start (it grows
// past it as a slice does): a pipeline's group is a few to a few dozen
// jobs, and growing from nothing would cost an allocation every doubling
// of each of its slices.
const groupCap = 16

// Add adds the decision of one job for now and returns its handle. An
// invalid request, or a rule of another algorithm than the group's, is not
// queued; its error comes from Result.
func (g *Group) Add(key Key, jobID string, rule Rule) *Decision {
	return g.add(key, jobID, rule, "")
}

// AddAt adds the decision of one job for the instant at (see
// Limiter.AllowAt) and returns its handle.
func (g *Group) AddAt(key Key, jobID string, rule Rule, at time.Time) *Decision {
	if at.IsZero() {
		r := rule.WithDefaults()
		return &Decision{key: key, rule: r, err: wrapDecide(key, r, errZeroInstant)}
	}
	return g.add(key, jobID, rule, strconv.FormatInt(at.UnixMicro(), 10))
}

func (g *Group) add(key Key, jobID string, rule Rule, at string) *Decision {
	rule, err := prepare(key, jobID, rule)
	if err == nil && rule.Algorithm != g.alg {
		err = wrapDecide(key, rule, fmt.Errorf("a %s decision in a group of %s", rule.Algorithm, g.alg))
	}
	if err != nil {
		return &Decision{key: key, rule: rule, err: err}
	}
	g.handles = append(g.handles, Decision{key: key, rule: rule, g: g, i: g.n})
	d := &g.handles[len(g.handles)-1]
	g.n++
	g.keys = appendKeys(g.keys, g.r.prefix, key, rule.Algorithm, jobID)
	// A group's decisions mostly share their rule: its limit and window
	// are boxed once and the values reused (an interface holding an
	// int64 is never written to).
	if g.n == 1 || rule.Limit != g.limit || rule.windowMicros() != g.window {
		g.limit, g.window = rule.Limit, rule.windowMicros()
		g.limitArg, g.windowArg = g.limit, g.window
	}
	g.args = append(g.args, g.limitArg, g.windowArg, jobID, at)
	return d
}

// Len is the number of decisions queued.
func (g *Group) Len() int { return g.n }

// Queue queues the group's script on pipe (EVALSHA only: call Load first).
// A group with no valid decision queues nothing.
func (g *Group) Queue(ctx context.Context, pipe redis.Pipeliner) {
	if g.n > 0 {
		g.cmd = script(g.alg).EvalSha(ctx, pipe, g.keys, g.args...)
	}
}

// decodeAll reads the group's reply once.
func (g *Group) decodeAll() {
	if g.cmd == nil {
		g.err = errors.New("decision not queued")
		return
	}
	v, err := g.cmd.Result()
	if err != nil {
		if errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT") {
			err = fmt.Errorf("%w: %w", ErrNotLoaded, err)
		}
		g.err = err
		return
	}
	vals, ok := v.([]any)
	if !ok || len(vals) != 4*g.n {
		g.err = fmt.Errorf("decode reply: want %d integers, got %T %v", 4*g.n, v, v)
		return
	}
	g.replies = make([]Result, g.n)
	for i := range g.replies {
		if g.replies[i], err = decode(vals[4*i : 4*i+4]); err != nil {
			g.err = err
			return
		}
	}
}

// Decision is a decision queued on a pipeline by Redis.AllowCmd or in a
// Group. Read it once the pipeline has run.
type Decision struct {
	key  Key
	rule Rule
	err  error
	g    *Group
	i    int
}

// Result returns the decision once the pipeline has run. A NOSCRIPT reply
// is returned as an error wrapping ErrNotLoaded.
func (d *Decision) Result() (Result, error) {
	if d.err != nil {
		return Result{}, d.err
	}
	g := d.g
	g.once.Do(g.decodeAll)
	if g.err != nil {
		return Result{}, wrapDecide(d.key, d.rule, g.err)
	}
	return g.replies[d.i], nil
}

// decode reads one decision's four integers of a script's reply
// {allowed, remaining, retry_after_us, at_us}.
func decode(vals []any) (Result, error) {
	if len(vals) != 4 {
		return Result{}, fmt.Errorf("decode reply: want 4 integers, got %v", vals)
	}
	var n [4]int64
	for i, x := range vals {
		var ok bool
		if n[i], ok = x.(int64); !ok {
			return Result{}, fmt.Errorf("decode reply: element %d is %T, want an integer", i, x)
		}
	}
	return result(n[0] == 1, n[1], n[2], n[3]), nil
}
