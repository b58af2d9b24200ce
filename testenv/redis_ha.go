package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterOf is the node that is master of key's slot now, asked of a live
// node (a dead master may still be listed by the others until they have
// failed it over).
func (c *RedisClusterServer) MasterOf(key string) (*RedisServer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var lastErr error
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		cl := redis.NewClient(n.Options())
		addr, err := slotMaster(ctx, cl, key)
		_ = cl.Close()
		if err != nil {
			lastErr = err
			continue
		}
		for _, m := range c.Nodes {
			if m.Addr() == addr {
				return m, nil
			}
		}
		return nil, fmt.Errorf("slot of %q served by %s, not a node of this cluster", key, addr)
	}
	return nil, fmt.Errorf("no live node answered: %w", lastErr)
}

// slotMaster asks one node which address serves key's slot as master.
func slotMaster(ctx context.Context, cl *redis.Client, key string) (string, error) {
	slot, err := cl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return "", fmt.Errorf("cluster keyslot: %w", err)
	}
	shards, err := cl.ClusterShards(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("cluster shards: %w", err)
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if r.Start > slot || slot > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role == "master" {
					return net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)), nil
				}
			}
		}
	}
	return "", fmt.Errorf("slot %d of %q is served by no master", slot, key)
}

// WaitForFailover waits until every live node names a master other than
// old for key's slot and the cluster state is ok on each, and returns the
// new master. Stop old first.
func (c *RedisClusterServer) WaitForFailover(key string, old *RedisServer, timeout time.Duration) (*RedisServer, error) {
	var master *RedisServer
	err := waitFor(timeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		master = nil
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			cl := redis.NewClient(n.Options())
			info, err := cl.ClusterInfo(ctx).Result()
			if err == nil && !strings.Contains(info, "cluster_state:ok") {
				err = fmt.Errorf("node %s: %s", n.Addr(), firstLines(info, 1))
			}
			var addr string
			if err == nil {
				addr, err = slotMaster(ctx, cl, key)
			}
			_ = cl.Close()
			if err != nil {
				return err
			}
			if addr == old.Addr() {
				return fmt.Errorf("node %s still names %s master", n.Addr(), addr)
			}
			for _, m := range c.Nodes {
				if m.Addr() == addr {
					master = m
				}
			}
		}
		if master == nil {
			return fmt.Errorf("no master found for %q", key)
		}
		return nil
	})
	return master, err
}

// Running reports whether the server process is up (not Stopped).
func (s *RedisServer) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// RedisSentinelServer is a master, its replica and a Redis Sentinel that
// monitors the master under MasterName with a quorum of one, detecting a
// dead master after 1 s.
type RedisSentinelServer struct {
	Master, Replica *RedisServer
	Sentinel        *RedisServer
	MasterName      string
}

// RedisSentinel starts a master, a replica of it and a Sentinel watching
// it, and waits until the Sentinel knows the replica (without which it
// could not fail over).
func RedisSentinel(t testing.TB) *RedisSentinelServer {
	t.Helper()
	s := &RedisSentinelServer{MasterName: "notifier-master"}
	s.Master = Redis(t)
	s.Replica = Redis(t, WithRedisArgs("--replicaof", "127.0.0.1", strconv.Itoa(s.Master.Port())))
	// A Sentinel rewrites its configuration file: it must be its own.
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	body := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 1\n"+
		"sentinel down-after-milliseconds %[1]s 1000\n"+
		"sentinel failover-timeout %[1]s 5000\n"+
		"sentinel parallel-syncs %[1]s 1\n", s.MasterName, s.Master.Port())
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatalf("testenv: write sentinel.conf: %v", err)
	}
	s.Sentinel = Redis(t, withSentinel(conf))
	err := waitFor(20*time.Second, func() error {
		cl := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr()})
		defer cl.Close()
		replicas, err := cl.Replicas(context.Background(), s.MasterName).Result()
		if err != nil {
			return err
		}
		for _, r := range replicas {
			if r["port"] == strconv.Itoa(s.Replica.Port()) && !strings.Contains(r["flags"], "down") {
				return nil
			}
		}
		return fmt.Errorf("sentinel knows no live replica yet: %v", replicas)
	})
	if err != nil {
		t.Fatalf("testenv: Redis Sentinel: %v", err)
	}
	return s
}

// withSentinel runs the server as a Sentinel on the configuration file
// conf (redis-server <conf> --sentinel).
func withSentinel(conf string) RedisOption {
	return func(c *redisConfig) { c.sentinelConf = conf }
}

// Addrs are the Sentinels' addresses: a client's redis.addrs with
// redis.master_name.
func (s *RedisSentinelServer) Addrs() []string { return []string{s.Sentinel.Addr()} }

// Client returns a Sentinel-backed client of the master, closed when the
// test ends.
func (s *RedisSentinelServer) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.Addrs()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// WaitForFailover waits until the Sentinel names the replica master (Stop
// the master first).
func (s *RedisSentinelServer) WaitForFailover(timeout time.Duration) error {
	want := strconv.Itoa(s.Replica.Port())
	return waitFor(timeout, func() error {
		cl := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr()})
		defer cl.Close()
		addr, err := cl.GetMasterAddrByName(context.Background(), s.MasterName).Result()
		if err != nil {
			return err
		}
		if len(addr) != 2 || addr[1] != want {
			return fmt.Errorf("sentinel names %v master", addr)
		}
		return nil
	})
}
