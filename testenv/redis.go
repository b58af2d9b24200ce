package testenv

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/internal/localenv"
)

// RedisOption configures a private Redis server.
type RedisOption = localenv.RedisOption

// WithRedisPassword starts the server with --requirepass.
func WithRedisPassword(password string) RedisOption { return localenv.WithRedisPassword(password) }

// WithRedisACLUser adds an ACL user with every permission and the given
// password (Redis 6+ ACL), in addition to the default user.
func WithRedisACLUser(user, password string) RedisOption {
	return localenv.WithRedisACLUser(user, password)
}

// WithRedisTLS serves TLS only (the plain port is disabled), with the
// server certificate of certs, and requires client certificates signed by
// its CA.
func WithRedisTLS(certs *Certs) RedisOption {
	return localenv.WithRedisTLS(localenv.RedisTLS{CertFile: certs.ServerCertFile, KeyFile: certs.ServerKeyFile,
		CAFile: certs.CAFile, Client: certs.ClientTLS()})
}

// WithRedisArgs passes extra redis-server command-line arguments.
func WithRedisArgs(args ...string) RedisOption { return localenv.WithRedisArgs(args...) }

// RedisServer is a private redis-server process on a loopback port
// (localenv.RedisServer) whose failures fail the test. It keeps nothing on
// disk, so Restart wipes its state, as a crash of a cache without
// persistence would.
type RedisServer struct {
	*localenv.RedisServer
	t testing.TB
}

// Redis starts a private redis-server on a free port and stops it when the
// test ends. A missing redis-server fails the test with the command that
// installs it.
func Redis(t testing.TB, opts ...RedisOption) *RedisServer {
	t.Helper()
	s, err := localenv.StartRedis(opts...)
	if err != nil {
		fatalRedis(t, err)
	}
	t.Cleanup(s.Close)
	return &RedisServer{RedisServer: s, t: t}
}

// fatalRedis fails t, adding what to do when the binary is missing.
func fatalRedis(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, localenv.ErrNoRedis) {
		t.Fatalf("testenv: %v, then run the tests again", err)
	}
	t.Fatalf("testenv: %v", err)
}

// Client returns a new client of this server, closed when the test ends.
// Each call makes a separate client with its own connection pool, as a
// separate process would have.
func (s *RedisServer) Client() *redis.Client {
	s.t.Helper()
	c := redis.NewClient(s.Options())
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Start starts a stopped server again on the same port, empty.
func (s *RedisServer) Start() {
	s.t.Helper()
	if err := s.RedisServer.Start(); err != nil {
		s.t.Fatalf("testenv: %v", err)
	}
}

// Restart is Stop then Start: the same port, all state wiped.
func (s *RedisServer) Restart() {
	s.t.Helper()
	s.Stop()
	s.Start()
}

// Freeze stops the server process (SIGSTOP) without closing its port: the
// kernel still accepts connections, and every command times out, as on a
// host that hangs or a network that drops packets. Thaw resumes it.
func (s *RedisServer) Freeze() {
	s.t.Helper()
	if err := s.RedisServer.Freeze(); err != nil {
		s.t.Fatalf("testenv: %v", err)
	}
}

// Thaw resumes a Frozen server (SIGCONT), its state intact.
func (s *RedisServer) Thaw() {
	s.t.Helper()
	if err := s.RedisServer.Thaw(); err != nil {
		s.t.Fatalf("testenv: %v", err)
	}
}

// RedisClusterServer is three redis-server masters with --cluster-enabled
// (and, from RedisClusterWithReplicas, a replica of each), joined with
// redis-cli --cluster create and serving all 16384 slots.
type RedisClusterServer struct {
	c     *localenv.RedisCluster
	t     testing.TB
	Nodes []*RedisServer // every node; which are masters changes on a failover
}

// RedisCluster starts a three-master Redis Cluster on free loopback ports
// and waits until every slot is served.
func RedisCluster(t testing.TB) *RedisClusterServer {
	t.Helper()
	return redisCluster(t, 0, 2*time.Second)
}

// RedisClusterWithReplicas starts three masters with one replica each and
// a cluster-node-timeout of 1 s, so that a master's replica is promoted a
// few seconds after the master dies (Stop it: see MasterOf and
// WaitForFailover).
func RedisClusterWithReplicas(t testing.TB) *RedisClusterServer {
	t.Helper()
	return redisCluster(t, 1, time.Second)
}

func redisCluster(t testing.TB, replicas int, nodeTimeout time.Duration) *RedisClusterServer {
	t.Helper()
	c, err := localenv.StartRedisCluster(replicas, nodeTimeout)
	if err != nil {
		fatalRedis(t, err)
	}
	t.Cleanup(c.Close)
	w := &RedisClusterServer{c: c, t: t}
	for _, n := range c.Nodes {
		w.Nodes = append(w.Nodes, &RedisServer{RedisServer: n, t: t})
	}
	return w
}

// Addrs are the nodes' host:port addresses (the masters' and, with
// replicas, theirs too): a client's seeds.
func (c *RedisClusterServer) Addrs() []string { return c.c.Addrs() }

// Client returns a new cluster client, closed when the test ends.
func (c *RedisClusterServer) Client() *redis.ClusterClient {
	c.t.Helper()
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// wrap is the node of c that n is.
func (c *RedisClusterServer) wrap(n *localenv.RedisServer) *RedisServer {
	for _, w := range c.Nodes {
		if w.RedisServer == n {
			return w
		}
	}
	return nil
}

// MasterOf is the node that is master of key's slot now, asked of a live
// node (a dead master may still be listed by the others until they have
// failed it over).
func (c *RedisClusterServer) MasterOf(key string) (*RedisServer, error) {
	n, err := c.c.MasterOf(key)
	if err != nil {
		return nil, err
	}
	return c.wrap(n), nil
}

// WaitForFailover waits until every live node names a master other than
// old for key's slot and the cluster state is ok on each, and returns the
// new master. Stop old first.
func (c *RedisClusterServer) WaitForFailover(key string, old *RedisServer, timeout time.Duration) (*RedisServer, error) {
	n, err := c.c.WaitForFailover(key, old.RedisServer, timeout)
	if err != nil {
		return nil, err
	}
	return c.wrap(n), nil
}

// RedisSentinelServer is a master, its replica and a Redis Sentinel that
// monitors the master under MasterName with a quorum of one, detecting a
// dead master after 1 s.
type RedisSentinelServer struct {
	s               *localenv.RedisSentinel
	Master, Replica *RedisServer
	Sentinel        *RedisServer
	MasterName      string
}

// RedisSentinel starts a master, a replica of it and a Sentinel watching
// it, and waits until the Sentinel knows the replica (without which it
// could not fail over).
func RedisSentinel(t testing.TB) *RedisSentinelServer {
	t.Helper()
	s, err := localenv.StartRedisSentinel()
	if err != nil {
		fatalRedis(t, err)
	}
	t.Cleanup(s.Close)
	return &RedisSentinelServer{s: s, MasterName: s.MasterName,
		Master:   &RedisServer{RedisServer: s.Master, t: t},
		Replica:  &RedisServer{RedisServer: s.Replica, t: t},
		Sentinel: &RedisServer{RedisServer: s.Sentinel, t: t}}
}

// Addrs are the Sentinels' addresses: a client's redis.addrs with
// redis.master_name.
func (s *RedisSentinelServer) Addrs() []string { return s.s.Addrs() }

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
	return s.s.WaitForFailover(timeout)
}
