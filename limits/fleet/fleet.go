package fleet

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/internal/luapre"
)

var (
	//go:embed heartbeat.lua
	fleetHeartbeatLua    string
	fleetHeartbeatScript = redis.NewScript(luapre.Num + fleetHeartbeatLua)
)

// Heartbeat announces this process in Redis every Interval and counts the
// instances heard from within Liveness. The count is what
// redis.on_failure: local divides each contract by (the last one seen
// before Redis went away), and what `notifier status` lists.
type Heartbeat struct {
	rdb    redis.Scripter
	prefix string
	id     string
	info   func() InstanceInfo
	log    *slog.Logger
	// Interval is how often Run beats (2 s); set it before Run.
	Interval time.Duration
	liveness time.Duration

	live atomic.Int64
}

// InstanceInfo is what an instance says of itself in its heartbeat.
type InstanceInfo struct {
	Version  string    `json:"version"`
	Host     string    `json:"host"`
	Started  time.Time `json:"started"`
	InFlight int       `json:"in_flight"`
	Workers  int       `json:"workers"`
	Limits   string    `json:"limits"` // redis | local | holding
	// Recent work: sends per provider in the last 10 s with the breaker's
	// state, outcomes per channel in the last minute.
	Providers map[string]ProviderActivity `json:"providers,omitempty"`
	Channels  map[string]ChannelActivity  `json:"channels,omitempty"`
}

// Instance is one live member of the fleet as its heartbeat says.
type Instance struct {
	ID       string
	LastSeen time.Duration // since its last heartbeat
	Info     InstanceInfo
}

// Read lists the live instances (heard from within liveness), newest
// heartbeat first.
func Read(ctx context.Context, rdb redis.UniversalClient, prefix string) ([]Instance, error) {
	insts, infos := fleetKeys(prefix)
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("read fleet: %w", err)
	}
	zs, err := rdb.ZRangeByScoreWithScores(ctx, insts, &redis.ZRangeBy{
		Min: fmt.Sprint(now.Add(-fleetLiveness).UnixMilli()), Max: "+inf",
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("read fleet: %w", err)
	}
	var out []Instance
	for i := len(zs) - 1; i >= 0; i-- {
		id, _ := zs[i].Member.(string)
		inst := Instance{ID: id, LastSeen: now.Sub(time.UnixMilli(int64(zs[i].Score)))}
		if raw, err := rdb.HGet(ctx, infos, id).Result(); err == nil {
			_ = json.Unmarshal([]byte(raw), &inst.Info)
		}
		out = append(out, inst)
	}
	return out, nil
}

// fleetLiveness: an instance silent this long is gone.
const fleetLiveness = 10 * time.Second

// fleetKeys are the Redis keys of the fleet: the instances sorted set and
// their info hash, under one hash tag.
func fleetKeys(prefix string) (instances, info string) {
	tag := "{" + prefix + "fleet}"
	return tag + ":instances", tag + ":info"
}

// NewHeartbeat returns a Heartbeat for instance id; info is called at each
// heartbeat. It counts itself until the first heartbeat answers.
func NewHeartbeat(rdb redis.Scripter, prefix, id string, info func() InstanceInfo, log *slog.Logger) *Heartbeat {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Heartbeat{rdb: rdb, prefix: prefix, id: id, info: info, log: log, Interval: 2 * time.Second, liveness: fleetLiveness}
	f.live.Store(1)
	return f
}

// Live is the number of live instances at the last successful heartbeat
// (at least 1: this one).
func (f *Heartbeat) Live() int { return int(max(1, f.live.Load())) }

// Beat sends one heartbeat and returns the live count.
func (f *Heartbeat) Beat(ctx context.Context) (int, error) {
	return f.call(ctx, "")
}

func (f *Heartbeat) call(ctx context.Context, op string) (int, error) {
	info, err := json.Marshal(f.info())
	if err != nil {
		return 0, fmt.Errorf("encode instance info: %w", err)
	}
	insts, infos := fleetKeys(f.prefix)
	n, err := fleetHeartbeatScript.Run(ctx, f.rdb, []string{insts, infos}, f.id, string(info), f.liveness.Milliseconds(), op).Int()
	if err != nil {
		return 0, fmt.Errorf("heartbeat instance %s: %w", f.id, err)
	}
	if op == "" {
		f.live.Store(int64(n))
	}
	return n, nil
}

// Run beats every Interval until ctx ends, then leaves the fleet.
func (f *Heartbeat) Run(ctx context.Context) error {
	t := time.NewTicker(f.Interval)
	defer t.Stop()
	for {
		if _, err := f.Beat(ctx); err != nil && ctx.Err() == nil {
			f.log.Debug("fleet heartbeat", "err", err)
		}
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_, _ = f.call(lctx, "leave")
			cancel()
			return nil
		case <-t.C:
		}
	}
}

// ProviderActivity is what an instance reports of one provider in its
// heartbeat.
type ProviderActivity struct {
	Sent10s int64  `json:"sent_10s"` // jobs this instance sent in the last 10 s
	Breaker string `json:"breaker"`  // closed, half-open or open
	// Tenants is Sent10s by tenant (named in tenants.weights, "default",
	// or "other").
	Tenants map[string]int64 `json:"tenants,omitempty"`
}

// ChannelActivity is what an instance reports of one channel: outcomes in
// the last minute.
type ChannelActivity struct {
	Sent       int64 `json:"sent"`
	Suppressed int64 `json:"suppressed"`
	Dead       int64 `json:"dead"`
	// Queued is the jobs in the stream by tenant (named, "default" or
	// "other"), as this process last looked.
	Queued map[string]uint64 `json:"queued,omitempty"`
}
