package bench

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/internal/localenv"
	"github.com/notifier/notifier/internal/roundtrip"
	"github.com/notifier/notifier/internal/text"
)

// benchRedis is the Redis the bench runs the limits on: private
// redis-server child processes it started (one, or three as a Redis
// Cluster), or a server the user pointed it at with --redis-addr.
type benchRedis struct {
	addrs   []string
	desc    string // one line for the report
	private bool   // started by the bench (and stopped at the end)
	close1  func() // stops the private servers
	// client is the bench's own client for the statistics (INFO); it is not
	// the dispatchers' client, so its calls are not counted as theirs.
	client redis.UniversalClient
}

// noRedisHint names both ways to give the bench a Redis.
const noRedisHint = "the bench needs a Redis: install redis-server so that it can start a private one " +
	"(sudo apt-get install redis-server, or brew install redis), or point it at a server with --redis-addr host:port"

// startBenchRedis starts what the flags ask for: --redis-addr (comma-
// separated seeds of a Redis Cluster), else a private redis-server (three
// as a cluster with --cluster), else fails naming both options.
func startBenchRedis(ctx context.Context, addr string, cluster bool) (*benchRedis, error) {
	if addr != "" {
		r := &benchRedis{addrs: text.SplitList(addr)}
		r.client = newStatsClient(r.addrs)
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := r.client.Ping(pctx).Err(); err != nil {
			_ = r.client.Close()
			return nil, fmt.Errorf("connect to redis at %s (--redis-addr): %w", addr, err)
		}
		r.desc = fmt.Sprintf("redis %s at %s (--redis-addr; other clients' commands would count too)", r.version(ctx), addr)
		if len(r.addrs) > 1 {
			r.desc = fmt.Sprintf("Redis Cluster %s seeded by %s (--redis-addr; other clients' commands would count too)", r.version(ctx), addr)
		}
		return r, nil
	}
	r := &benchRedis{private: true}
	if cluster {
		c, err := localenv.StartRedisCluster(0, 5*time.Second)
		if err != nil {
			return nil, benchRedisError(err)
		}
		r.close1, r.addrs = c.Close, c.Addrs()
	} else {
		s, err := localenv.StartRedis()
		if err != nil {
			return nil, benchRedisError(err)
		}
		r.close1, r.addrs = s.Close, []string{s.Addr()}
	}
	r.client = newStatsClient(r.addrs)
	r.desc = fmt.Sprintf("private redis-server %s on %s", r.version(ctx), r.addrs[0])
	if cluster {
		r.desc = fmt.Sprintf("private 3-master Redis Cluster, redis-server %s on %s", r.version(ctx), strings.Join(r.addrs, ", "))
	}
	return r, nil
}

// benchRedisError is the error of a private server that would not start:
// with the hint naming both ways when redis-server is missing.
func benchRedisError(err error) error {
	if errors.Is(err, localenv.ErrNoRedis) {
		return errors.New(noRedisHint)
	}
	return fmt.Errorf("%w; or point the bench at a server with --redis-addr", err)
}

// newStatsClient is a client of addrs: standalone for one address, a
// cluster client for several.
func newStatsClient(addrs []string) redis.UniversalClient {
	if len(addrs) > 1 {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	}
	return redis.NewClient(&redis.Options{Addr: addrs[0]})
}

// newClient is the dispatchers' client, with the round-trip counter hooked
// into every connection to a server: on a cluster, into each node's client,
// where a pipeline split across nodes counts once per node it goes to.
// It is the client notifier run makes (NewRedisClient: same pool and
// timeouts), so the bench measures what runs in production.
func (r *benchRedis) newClient(workers int, trips *roundtrip.Counter) (redis.UniversalClient, error) {
	rdb, err := config.NewRedisClient(config.Redis{Addrs: r.addrs}.WithDefaults(), workers)
	if err != nil {
		return nil, err
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		c.OnNewNode(func(node *redis.Client) { node.AddHook(trips) })
	case *redis.Client:
		c.AddHook(trips)
	}
	return rdb, nil
}

// version is the server's redis_version.
func (r *benchRedis) version(ctx context.Context) string {
	infos, err := r.info(ctx, "server")
	if err != nil || len(infos) == 0 {
		return "(version unknown)"
	}
	return infos[0]["redis_version"]
}

// info runs INFO section on every master and parses each reply.
func (r *benchRedis) info(ctx context.Context, section string) ([]map[string]string, error) {
	var out []map[string]string
	parse := func(s string) map[string]string {
		m := map[string]string{}
		for _, line := range strings.Split(s, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
				m[k] = v
			}
		}
		return m
	}
	switch c := r.client.(type) {
	case *redis.ClusterClient:
		ch := make(chan map[string]string, 16)
		err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			s, err := node.Info(ctx, section).Result()
			if err != nil {
				return err
			}
			ch <- parse(s)
			return nil
		})
		close(ch)
		for m := range ch {
			out = append(out, m)
		}
		return out, err
	case *redis.Client:
		s, err := c.Info(ctx, section).Result()
		if err != nil {
			return nil, err
		}
		return append(out, parse(s)), nil
	}
	return nil, fmt.Errorf("redis client of type %T", r.client)
}

// redisStats is what the servers counted: commands by name (the calls of
// INFO commandstats, commands run inside scripts included) and CPU seconds,
// summed over the masters.
type redisStats struct {
	calls   map[string]int64
	cpu     float64
	masters int
}

func (r *benchRedis) stats(ctx context.Context) (redisStats, error) {
	st := redisStats{calls: map[string]int64{}}
	cmds, err := r.info(ctx, "commandstats")
	if err != nil {
		return st, fmt.Errorf("redis INFO commandstats: %w", err)
	}
	for _, m := range cmds {
		st.masters++
		for k, v := range m {
			name, ok := strings.CutPrefix(k, "cmdstat_")
			if !ok {
				continue
			}
			for _, f := range strings.Split(v, ",") {
				if n, ok := strings.CutPrefix(f, "calls="); ok {
					c, _ := strconv.ParseInt(n, 10, 64)
					st.calls[name] += c
				}
			}
		}
	}
	cpus, err := r.info(ctx, "cpu")
	if err != nil {
		return st, fmt.Errorf("redis INFO cpu: %w", err)
	}
	for _, m := range cpus {
		u, _ := strconv.ParseFloat(m["used_cpu_user"], 64)
		s, _ := strconv.ParseFloat(m["used_cpu_sys"], 64)
		st.cpu += u + s
	}
	return st, nil
}

// CommandCount is one command's calls.
type CommandCount struct {
	Command string  `json:"command"`
	Calls   int64   `json:"calls"`
	PerJob  float64 `json:"per_job"`
}

// diff is what the servers did between before and r, less the bench's own
// statistics calls: the INFO of before's snapshot (two per master: the
// commandstats and the cpu section) shows in r, r's own do not.
func (r redisStats) diff(before redisStats) (total int64, byCommand []CommandCount, cpu float64) {
	for name, n := range r.calls {
		d := n - before.calls[name]
		if name == "info" {
			d -= int64(2 * before.masters)
		}
		if d <= 0 {
			continue
		}
		total += d
		byCommand = append(byCommand, CommandCount{Command: name, Calls: d})
	}
	sort.Slice(byCommand, func(i, j int) bool {
		if byCommand[i].Calls != byCommand[j].Calls {
			return byCommand[i].Calls > byCommand[j].Calls
		}
		return byCommand[i].Command < byCommand[j].Command
	})
	return total, byCommand, r.cpu - before.cpu
}

// cleanup deletes the bench's keys from a server the user pointed it at (a
// private server is simply stopped). Keys carry hash tags, {<prefix>...}:
// both forms are matched.
func (r *benchRedis) cleanup(ctx context.Context, prefix string) {
	if r.private {
		return
	}
	// One pipeline of single-key UNLINKs per page of the scan (a page's
	// keys may lie in several cluster slots), where a DEL a key took a
	// round trip each: a bench leaves tens of thousands.
	del := func(ctx context.Context, c *redis.Client) error {
		for _, pattern := range []string{prefix + "*", "{" + prefix + "*"} {
			var cursor uint64
			for {
				keys, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
				if err != nil {
					return err
				}
				if len(keys) > 0 {
					pipe := c.Pipeline()
					for _, k := range keys {
						pipe.Unlink(ctx, k)
					}
					if _, err := pipe.Exec(ctx); err != nil {
						return err
					}
				}
				if cursor = next; cursor == 0 {
					break
				}
			}
		}
		return nil
	}
	switch c := r.client.(type) {
	case *redis.ClusterClient:
		_ = c.ForEachMaster(ctx, del)
	case *redis.Client:
		_ = del(ctx, c)
	}
}

func (r *benchRedis) close() {
	if r.client != nil {
		_ = r.client.Close()
	}
	if r.close1 != nil {
		r.close1()
	}
}
