package localenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is three redis-server masters with --cluster-enabled (and,
// with replicas, a replica of each), joined with redis-cli --cluster
// create and serving all 16384 slots.
type RedisCluster struct {
	Nodes []*RedisServer // every node; which are masters changes on a failover
}

// StartRedisCluster starts a three-master Redis Cluster on free loopback
// ports, each master with replicas replicas (0 or 1), and waits until
// every slot is served (and every replica is in sync). nodeTimeout is
// cluster-node-timeout: how long a master may be unreachable before its
// replica is promoted. Close stops every node.
func StartRedisCluster(replicas int, nodeTimeout time.Duration) (*RedisCluster, error) {
	cli, err := LookRedis("redis-cli")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		c, err := startCluster(cli, replicas, nodeTimeout)
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("start a Redis Cluster: %w", lastErr)
}

func startCluster(cli string, replicas int, nodeTimeout time.Duration) (*RedisCluster, error) {
	c := &RedisCluster{}
	var addrs []string
	for i := 0; i < 3*(1+replicas); i++ {
		busPort, err := FreePort()
		if err != nil {
			c.Close()
			return nil, err
		}
		n, err := StartRedis(WithRedisArgs(
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
			"--cluster-port", strconv.Itoa(busPort),
		))
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
		addrs = append(addrs, n.Addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis-cli --cluster create: %w: %s", err, out)
	}
	err := WaitFor(20*time.Second, func() error {
		for _, n := range c.Nodes {
			info, err := c.nodeInfo(n, func(ctx context.Context, cl *redis.Client) (string, error) { return cl.ClusterInfo(ctx).Result() })
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
				return fmt.Errorf("node %s not ready: %s", n.Addr(), firstLines(info, 3))
			}
		}
		return nil
	})
	if err == nil && replicas > 0 {
		// A replica counts as synced once it has had its master's data:
		// until then a failover would find no replica able to take over.
		err = WaitFor(20*time.Second, func() error {
			for _, n := range c.Nodes {
				info, err := c.nodeInfo(n, func(ctx context.Context, cl *redis.Client) (string, error) {
					return cl.Info(ctx, "replication").Result()
				})
				if err != nil {
					return err
				}
				if strings.Contains(info, "role:slave") && !strings.Contains(info, "master_link_status:up") {
					return fmt.Errorf("replica %s not in sync yet", n.Addr())
				}
			}
			return nil
		})
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// nodeInfo asks one node with a client of its own.
func (c *RedisCluster) nodeInfo(n *RedisServer, ask func(context.Context, *redis.Client) (string, error)) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	cl := redis.NewClient(n.Options())
	defer cl.Close()
	return ask(ctx, cl)
}

// Addrs are the nodes' host:port addresses (the masters' and, with
// replicas, theirs too): a client's seeds.
func (c *RedisCluster) Addrs() []string {
	a := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		a[i] = n.Addr()
	}
	return a
}

// Close stops every node and removes their work directories.
func (c *RedisCluster) Close() {
	for _, n := range c.Nodes {
		n.Close()
	}
}

// MasterOf is the node that is master of key's slot now, asked of a live
// node (a dead master may still be listed by the others until they have
// failed it over).
func (c *RedisCluster) MasterOf(key string) (*RedisServer, error) {
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
		if m := c.node(addr); m != nil {
			return m, nil
		}
		return nil, fmt.Errorf("slot of %q served by %s, not a node of this cluster", key, addr)
	}
	return nil, fmt.Errorf("no live node answered: %w", lastErr)
}

// node is the node at addr, or nil.
func (c *RedisCluster) node(addr string) *RedisServer {
	for _, m := range c.Nodes {
		if m.Addr() == addr {
			return m
		}
	}
	return nil
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
func (c *RedisCluster) WaitForFailover(key string, old *RedisServer, timeout time.Duration) (*RedisServer, error) {
	var master *RedisServer
	err := WaitFor(timeout, func() error {
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
			if m := c.node(addr); m != nil {
				master = m
			}
		}
		if master == nil {
			return fmt.Errorf("no master found for %q", key)
		}
		return nil
	})
	return master, err
}

// RedisSentinel is a master, its replica and a Redis Sentinel that
// monitors the master under MasterName with a quorum of one, detecting a
// dead master after 1 s.
type RedisSentinel struct {
	Master, Replica *RedisServer
	Sentinel        *RedisServer
	MasterName      string
	dir             string
}

// StartRedisSentinel starts a master, a replica of it and a Sentinel
// watching it, and waits until the Sentinel knows the replica (without
// which it could not fail over). Close stops all three.
func StartRedisSentinel() (_ *RedisSentinel, err error) {
	s := &RedisSentinel{MasterName: "notifier-master"}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.Master, err = StartRedis(); err != nil {
		return nil, err
	}
	if s.Replica, err = StartRedis(WithRedisArgs("--replicaof", "127.0.0.1", strconv.Itoa(s.Master.Port()))); err != nil {
		return nil, err
	}
	// A Sentinel rewrites its configuration file: it must be its own.
	if s.dir, err = os.MkdirTemp("", "notifier-sentinel-*"); err != nil {
		return nil, fmt.Errorf("sentinel directory: %w", err)
	}
	conf := filepath.Join(s.dir, "sentinel.conf")
	body := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 1\n"+
		"sentinel down-after-milliseconds %[1]s 1000\n"+
		"sentinel failover-timeout %[1]s 5000\n"+
		"sentinel parallel-syncs %[1]s 1\n", s.MasterName, s.Master.Port())
	if err = os.WriteFile(conf, []byte(body), 0o600); err != nil {
		return nil, fmt.Errorf("write sentinel.conf: %w", err)
	}
	if s.Sentinel, err = StartRedis(func(c *redisConfig) { c.sentinelConf = conf }); err != nil {
		return nil, err
	}
	err = WaitFor(20*time.Second, func() error {
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
		return nil, fmt.Errorf("redis sentinel: %w", err)
	}
	return s, nil
}

// Addrs are the Sentinels' addresses: a client's redis.addrs with
// redis.master_name.
func (s *RedisSentinel) Addrs() []string { return []string{s.Sentinel.Addr()} }

// WaitForFailover waits until the Sentinel names the replica master (Stop
// the master first).
func (s *RedisSentinel) WaitForFailover(timeout time.Duration) error {
	want := strconv.Itoa(s.Replica.Port())
	return WaitFor(timeout, func() error {
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

// Close stops the three servers and removes the Sentinel's directory.
func (s *RedisSentinel) Close() {
	for _, n := range []*RedisServer{s.Sentinel, s.Replica, s.Master} {
		if n != nil {
			n.Close()
		}
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// firstLines is the first n lines of s joined by spaces: a multi-line
// answer cut for an error message.
func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " ")
}
