package userlimit

import (
	"context"
	_ "embed" // peek.lua
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// peekJob is the job id a peek decides for: a space is in no valid job id
// (queue.Job: [A-Za-z0-9._:-]), so its marker never exists and nothing
// admitted can be taken for it.
const peekJob = " peek"

var (
	//go:embed peek.lua
	peekLua     string
	peekScripts = scriptsWith(peekLua)
)

// peekScript returns the read-only script of a valid algorithm.
func peekScript(a Algorithm) *redis.Script {
	if s, ok := peekScripts[a]; ok {
		return s
	}
	return peekScripts[SlidingLog] // the default algorithm
}

// Peeker answers what a limiter would decide for a new job of key now,
// changing nothing. Memory and Redis implement it.
type Peeker interface {
	Peek(ctx context.Context, key Key, rule Rule) (Result, error)
}

var (
	_ Peeker = (*Memory)(nil)
	_ Peeker = (*Redis)(nil)
)

// prepareRule applies the rule's defaults and checks it, for Peek.
func prepareRule(key Key, rule Rule) (Rule, error) {
	rule = rule.WithDefaults()
	if err := rule.Validate(); err != nil {
		return rule, fmt.Errorf("peek user limit %s %s: %w", key.Channel, rule.Algorithm, err)
	}
	return rule, nil
}

// Peek returns the decision Allow would make now for a job of key not
// admitted before, and writes nothing: the algorithm's own script runs with
// its writes dropped (peek.lua), in one round trip on the Redis clock.
// Remaining is what would be left after that job; RetryAfter, when denied,
// how long until a job would be allowed if nothing else is admitted. Safe
// for concurrent use.
func (r *Redis) Peek(ctx context.Context, key Key, rule Rule) (Result, error) {
	rule, err := prepareRule(key, rule)
	if err != nil {
		return Result{}, err
	}
	now := ""
	if r.now != nil {
		now = strconv.FormatInt(r.now().UnixMicro(), 10)
	}
	nkeys := 2
	if rule.Algorithm == SlidingLog {
		nkeys = 1
	}
	args := []any{now, nkeys, rule.Limit, rule.windowMicros(), peekJob, ""}
	v, err := peekScript(rule.Algorithm).Run(ctx, r.rdb, Keys(r.prefix, key, rule.Algorithm, peekJob), args...).Result()
	if err != nil {
		return Result{}, fmt.Errorf("peek user limit %s %s: %w", key.Channel, rule.Algorithm, err)
	}
	vals, ok := v.([]any)
	if !ok {
		return Result{}, fmt.Errorf("peek user limit %s %s: decode reply: %T %v", key.Channel, rule.Algorithm, v, v)
	}
	res, err := decode(vals)
	if err != nil {
		return Result{}, fmt.Errorf("peek user limit %s %s: %w", key.Channel, rule.Algorithm, err)
	}
	return res, nil
}

// Peek returns the decision Allow would make now for a job of key not
// admitted before, changing nothing: it decides on a copy of the key's
// state. It returns the context's error when ctx is already done. Safe for
// concurrent use.
func (m *Memory) Peek(ctx context.Context, key Key, rule Rule) (Result, error) {
	rule, err := prepareRule(key, rule)
	if err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("peek user limit %s %s: %w", key.Channel, rule.Algorithm, err)
	}
	now := m.now().UnixMicro()
	mk := memKey{key: key, alg: rule.Algorithm}
	sh := &m.shards[maphash.Comparable(m.seed, mk)%memShards]

	sh.mu.Lock()
	st := &memState{}
	if cur := sh.m[mk]; cur != nil {
		st = cur.clone()
	}
	sh.mu.Unlock()

	d := decision{now: now, at: now, limit: int64(rule.Limit), window: rule.windowMicros(), job: peekJob}
	o, ok := st.decide(rule.Algorithm, d)
	if !ok {
		return Result{}, errors.New("peek user limit: unknown algorithm") // Validate refuses it first
	}
	return result(o.allowed, o.remaining, o.retry, o.stands), nil
}

// clone is a deep copy of st, for a decision that must leave st as it is.
func (st *memState) clone() *memState {
	c := *st
	c.log = slices.Clone(st.log)
	c.ids = maps.Clone(st.ids)
	c.jobs = maps.Clone(st.jobs)
	if st.wins != nil {
		c.wins = make(map[int64]*memWindow, len(st.wins))
		for k, w := range st.wins {
			wc := *w
			c.wins[k] = &wc
		}
	}
	return &c
}
