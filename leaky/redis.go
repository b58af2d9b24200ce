package leaky

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/internal/luapre"
)

// Each script is its .lua file with what its header says comes prepended:
// the shared preambles of internal/luapre (now_us; str, idiv, ttl),
// shaping.lua and runid.lua.
var (
	// shapingLua is the adaptive-rate arithmetic reserve.lua and pause.lua
	// share: prepended to each, after luapre.Num (its idiv).
	//go:embed shaping.lua
	shapingLua string

	// runIDLua is the failover guard's run_id(), prepended to reserve.lua
	// and cancel.lua.
	//go:embed runid.lua
	runIDLua string

	//go:embed reserve.lua
	reserveLua    string
	reserveScript = redis.NewScript(luapre.Now + luapre.Num + shapingLua + runIDLua + reserveLua)

	//go:embed cancel.lua
	cancelLua    string
	cancelScript = redis.NewScript(runIDLua + cancelLua)

	//go:embed pause.lua
	pauseLua    string
	pauseScript = redis.NewScript(luapre.Now + luapre.Num + shapingLua + pauseLua)
	//go:embed resume.lua
	resumeLua    string
	resumeScript = redis.NewScript(luapre.Now + luapre.Num + resumeLua)

	//go:embed status.lua
	statusLua    string
	statusScript = redis.NewScript(luapre.Now + statusLua)

	//go:embed shape.lua
	shapeLua    string
	shapeScript = redis.NewScript(luapre.Now + shapeLua)
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
// redis.key_prefix, e.g. "notifier:"). It returns an error when an option
// is out of its range.
func NewRedis(rdb redis.Scripter, prefix string, opts ...Option) (*Redis, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("new leaky queue on redis: %w", err)
	}
	return &Redis{rdb: rdb, prefix: prefix, o: o}, nil
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

// reserveArgs are reserve.lua's arguments before the reservations' own.
func (q *Redis) reserveArgs(p plan, sp *shapePlan, n int) []any {
	if sp == nil {
		return append(make([]any, 0, 6+n), p.mqd, p.start, q.o.idleTTL.Milliseconds(), q.nowArg(), q.guardArg(), 0)
	}
	args := append(make([]any, 0, 13+2*len(sp.quotas)+2*n), p.mqd, p.start, q.o.idleTTL.Milliseconds(), q.nowArg(), q.guardArg())
	return sp.args(args)
}

// Load loads the scripts into the script cache of every server rdb reaches
// (every master of a cluster), so that ReserveCmd can be pipelined: a
// pipelined EVALSHA does not fall back to EVAL. Call it again after a
// restart, failover or SCRIPT FLUSH (a pipelined reserve then fails with a
// NOSCRIPT error).
func (q *Redis) Load(ctx context.Context) error {
	for _, s := range []*redis.Script{reserveScript, cancelScript, pauseScript, resumeScript, statusScript, shapeScript} {
		if err := s.Load(ctx, q.rdb).Err(); err != nil {
			return fmt.Errorf("load leaky scripts: %w", err)
		}
	}
	return nil
}

// Reserve implements Queue.
func (q *Redis) Reserve(ctx context.Context, provider string, c Contract, cost int) (Reservation, error) {
	p, sp, err := q.o.plan(&c, cost)
	if err != nil {
		return Reservation{}, fmt.Errorf("reserve slot %s: %w", provider, err)
	}
	args := append(q.reserveArgs(p, sp, 1), p.inc)
	width := 4
	if sp != nil {
		args, width = append(args, cost), 5
	}
	v, err := reserveScript.Run(ctx, q.rdb, q.keys(provider), args...).Result()
	if err != nil {
		return Reservation{}, fmt.Errorf("reserve slot %s: %w", provider, err)
	}
	n, err := ints(v, width)
	if err != nil {
		return Reservation{}, fmt.Errorf("reserve slot %s: %w", provider, err)
	}
	return reservationOf(n, cost), nil
}

// ReserveCmd is a reservation queued on a pipeline, alone or in a
// ReserveGroup; its Result is ready after the pipeline's Exec.
type ReserveCmd struct {
	g   *ReserveGroup
	i   int   // its place in the group
	err error // a request refused before it was queued
}

// ReserveCmd queues a Reserve on pipe (EVALSHA only: call Load first) and
// returns a handle to decode after pipe.Exec. An invalid request is not
// queued; its error comes from Result.
func (q *Redis) ReserveCmd(ctx context.Context, pipe redis.Pipeliner, provider string, c Contract, cost int) *ReserveCmd {
	g := q.ReserveGroup(provider, c)
	rc := g.Add(cost)
	g.Queue(ctx, pipe)
	return rc
}

// ReserveGroup is several reservations in one provider's queue under one
// contract, made by one script run: the same answers, in the order of Add,
// as that many Reserve calls at one instant, for a fraction of the cost
// (one EVALSHA, one read of the clock, of the state and of the failover
// guard's run_id, one write). It is how the dispatcher reserves the slots
// of all the jobs one pipeline carries. Add and Queue are not safe for
// concurrent use; the ReserveCmds' Results are, once the pipeline has run.
type ReserveGroup struct {
	q        *Redis
	provider string
	c        Contract
	plan     plan       // of cost 1: mqd and cold are the same for every cost
	shape    *shapePlan // of cost 1: the same for every cost but the incs
	err      error      // an invalid contract: every reservation fails
	incs     []int64
	costs    []int // shaped contracts only
	cmd      *redis.Cmd
	// handles holds the ReserveCmds Add returns (a ReserveCmd never
	// changes once made, so a pointer into a slice that grew since still
	// reads right).
	handles []ReserveCmd

	once     sync.Once
	replies  []Reservation
	replyErr error
}

// ReserveGroup starts a group of reservations in provider's queue under c.
func (q *Redis) ReserveGroup(provider string, c Contract) *ReserveGroup {
	p, sp, err := q.o.plan(&c, 1)
	return &ReserveGroup{q: q, provider: provider, c: c, plan: p, shape: sp, err: err,
		incs: make([]int64, 0, groupCap), handles: make([]ReserveCmd, 0, groupCap)}
}

// groupCap is the reservations a group makes room for at its start (it
// grows past it as a slice does): a pipeline's group is a few to a few
// dozen jobs, and growing from nothing would cost an allocation every
// doubling.
const groupCap = 16

// Add adds a reservation of cost units to the group and returns its handle.
func (g *ReserveGroup) Add(cost int) *ReserveCmd {
	rc := ReserveCmd{g: g, i: len(g.incs), err: g.err}
	if rc.err == nil {
		if p, sp, err := g.q.o.plan(&g.c, cost); err != nil {
			rc.err = err
		} else {
			g.incs = append(g.incs, p.inc)
			if sp != nil {
				g.costs = append(g.costs, cost)
			}
		}
	}
	g.handles = append(g.handles, rc)
	return &g.handles[len(g.handles)-1]
}

// Len is the number of reservations added.
func (g *ReserveGroup) Len() int { return len(g.incs) }

// Queue queues the group's script on pipe (EVALSHA only: call Load first).
// A group with no valid reservation queues nothing.
func (g *ReserveGroup) Queue(ctx context.Context, pipe redis.Pipeliner) {
	if len(g.incs) == 0 {
		return
	}
	args := g.q.reserveArgs(g.plan, g.shape, len(g.incs))
	for i, inc := range g.incs {
		args = append(args, inc)
		if g.shape != nil {
			args = append(args, g.costs[i])
		}
	}
	g.cmd = reserveScript.EvalSha(ctx, pipe, g.q.keys(g.provider), args...)
}

// decode reads the group's reply once.
func (g *ReserveGroup) decode() {
	if g.cmd == nil {
		g.replyErr = errors.New("reservation group not queued")
		return
	}
	v, err := g.cmd.Result()
	if err != nil {
		g.replyErr = err
		return
	}
	w := 4
	if g.shape != nil {
		w = 5
	}
	n, err := ints(v, w*len(g.incs))
	if err != nil {
		g.replyErr = err
		return
	}
	g.replies = make([]Reservation, len(g.incs))
	for i := range g.replies {
		cost := 0
		if g.shape != nil {
			cost = g.costs[i]
		}
		g.replies[i] = reservationOf(n[w*i:w*i+w], cost)
	}
}

// Result decodes the reservation after the pipeline's Exec.
func (rc *ReserveCmd) Result() (Reservation, error) {
	g := rc.g
	if rc.err != nil {
		return Reservation{}, fmt.Errorf("reserve slot %s: %w", g.provider, rc.err)
	}
	g.once.Do(g.decode)
	if g.replyErr != nil {
		return Reservation{}, fmt.Errorf("reserve slot %s: %w", g.provider, g.replyErr)
	}
	return g.replies[rc.i], nil
}

// Cancel implements Queue.
func (q *Redis) Cancel(ctx context.Context, provider string, c Contract, r Reservation, cost int) error {
	p, sp, err := q.o.plan(&c, cost)
	if err != nil {
		return fmt.Errorf("cancel slot %s: %w", provider, err)
	}
	if !r.OK {
		return nil
	}
	keys := []string{stateKey(q.prefix, provider)}
	args := []any{r.Slot, p.inc, r.seq, q.guardArg()}
	if r.shaped != nil {
		if r.shaped.cost != cost {
			return nil
		}
		args[1] = r.shaped.inc
		if sp != nil {
			args = append(args, len(sp.quotas), cost)
			for _, qp := range sp.quotas {
				args = append(args, qp.per)
			}
		}
	}
	if err := cancelScript.Run(ctx, q.rdb, keys, args...).Err(); err != nil {
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

// Backoff implements Queue.
func (q *Redis) Backoff(ctx context.Context, provider string, c Contract, d time.Duration) (bool, error) {
	_, sp, err := q.o.plan(&c, 1)
	if err != nil {
		return false, fmt.Errorf("back off provider %s: %w", provider, err)
	}
	us := d.Microseconds()
	if us <= 0 {
		return false, nil
	}
	args := []any{us, q.o.idleTTL.Milliseconds(), q.nowArg(), PauseChannel(q.prefix), provider}
	if sp != nil && sp.adaptive {
		args = sp.adaptiveArgs(args)
	}
	v, err := pauseScript.Run(ctx, q.rdb, q.keys(provider), args...).Result()
	if err != nil {
		return false, fmt.Errorf("back off provider %s: %w", provider, err)
	}
	n, err := ints(v, 2)
	if err != nil {
		return false, fmt.Errorf("back off provider %s: %w", provider, err)
	}
	return n[1] == 1, nil
}

// Shape implements Queue.
func (q *Redis) Shape(ctx context.Context, provider string, c Contract) (Shape, error) {
	_, sp, err := q.o.plan(&c, 1)
	if err != nil {
		return Shape{}, fmt.Errorf("read shape %s: %w", provider, err)
	}
	if sp == nil {
		return Shape{EffectiveRate: c.Rate}, nil
	}
	keys := []string{stateKey(q.prefix, provider)}
	v, err := shapeScript.Run(ctx, q.rdb, keys, q.nowArg(), len(sp.quotas)).Result()
	if err != nil {
		return Shape{}, fmt.Errorf("read shape %s: %w", provider, err)
	}
	n, err := ints(v, 4+2*len(sp.quotas))
	if err != nil {
		return Shape{}, fmt.Errorf("read shape %s: %w", provider, err)
	}
	qs := make([]quotaState, len(sp.quotas))
	for i := range qs {
		qs[i] = quotaState{start: n[4+2*i], used: n[5+2*i]}
	}
	return sp.shapeOf(c, n[1], n[2], n[3], n[0], qs), nil
}

// Resume implements Queue.
func (q *Redis) Resume(ctx context.Context, provider string, c Contract) (time.Duration, error) {
	p, _, err := q.o.plan(&c, 1)
	if err != nil {
		return 0, fmt.Errorf("resume provider %s: %w", provider, err)
	}
	left, err := resumeScript.Run(ctx, q.rdb, q.keys(provider), p.cold, q.nowArg(), PauseChannel(q.prefix), provider).Int64()
	if err != nil {
		return 0, fmt.Errorf("resume provider %s: %w", provider, err)
	}
	return micros(left), nil
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
	return depthUnits(queued, c, q.o.headroomOf(&c)), nil
}

// reservationOf reads one reservation's integers of a reserve reply: four
// for a plain contract, five for a shaped one (of cost units).
func reservationOf(n []int64, cost int) Reservation {
	shaped := len(n) == 5
	switch {
	case n[0] == 1 && shaped:
		return Reservation{OK: true, Delay: micros(n[1]), Slot: n[2], Quota: -1, seq: n[3], shaped: &shapedRes{inc: n[4], cost: cost}}
	case n[0] == 1:
		return Reservation{OK: true, Delay: micros(n[1]), Slot: n[2], Quota: -1, seq: n[3]}
	case shaped:
		return Reservation{RetryAfter: micros(n[1]), Paused: micros(n[2]), Quota: int(n[4])}
	}
	return Reservation{RetryAfter: micros(n[1]), Paused: micros(n[2]), Quota: -1}
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
