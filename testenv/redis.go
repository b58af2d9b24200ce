package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// installHint is the message a test fails with when a Redis binary is missing.
const installHint = "install it with `sudo apt-get install redis-server` (Debian/Ubuntu; brings redis-cli too) " +
	"or `brew install redis` (macOS), then run the tests again"

// lookRedis returns the path of a Redis binary or fails the test with the
// install command.
func lookRedis(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("testenv: %s not found on PATH: %s", name, installHint)
	}
	return p
}

// RedisOption configures a private Redis server.
type RedisOption func(*redisConfig)

type redisConfig struct {
	password string
	aclUser  string
	aclPass  string
	tls      *Certs
	extra    []string
	// sentinelConf: run as a Redis Sentinel on this configuration file.
	sentinelConf string
}

// WithRedisPassword starts the server with --requirepass.
func WithRedisPassword(password string) RedisOption {
	return func(c *redisConfig) { c.password = password }
}

// WithRedisACLUser adds an ACL user with every permission and the given
// password (Redis 6+ ACL), in addition to the default user.
func WithRedisACLUser(user, password string) RedisOption {
	return func(c *redisConfig) { c.aclUser, c.aclPass = user, password }
}

// WithRedisTLS serves TLS only (the plain port is disabled), with the
// server certificate of certs, and requires client certificates signed by
// its CA.
func WithRedisTLS(certs *Certs) RedisOption {
	return func(c *redisConfig) { c.tls = certs }
}

// WithRedisArgs passes extra redis-server command-line arguments.
func WithRedisArgs(args ...string) RedisOption {
	return func(c *redisConfig) { c.extra = append(c.extra, args...) }
}

// RedisServer is a private redis-server process on a loopback port. It keeps
// nothing on disk, so Restart wipes its state, as a crash of a cache without
// persistence would. Its methods are safe for concurrent use.
type RedisServer struct {
	t    testing.TB
	bin  string
	dir  string
	cfg  redisConfig
	port int

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan error // receives the process's exit status when it ends
}

// Redis starts a private redis-server on a free port and stops it when the
// test ends.
func Redis(t testing.TB, opts ...RedisOption) *RedisServer {
	t.Helper()
	s := &RedisServer{t: t, bin: lookRedis(t, "redis-server"), dir: t.TempDir()}
	for _, o := range opts {
		o(&s.cfg)
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		s.port = FreePort(t)
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("testenv: start redis-server: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Addr is the server's host:port.
func (s *RedisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Port is the server's TCP port; it does not change across restarts.
func (s *RedisServer) Port() int { return s.port }

// Options returns go-redis options that reach this server, with the default
// user's password and TLS client certificate when the server has them.
func (s *RedisServer) Options() *redis.Options {
	o := &redis.Options{Addr: s.Addr(), Password: s.cfg.password, MaxRetries: -1}
	if s.cfg.tls != nil {
		o.TLSConfig = s.cfg.tls.ClientTLS()
	}
	return o
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

func (s *RedisServer) args() []string {
	if s.cfg.sentinelConf != "" {
		return []string{s.cfg.sentinelConf, "--sentinel",
			"--bind", "127.0.0.1",
			"--port", strconv.Itoa(s.port),
			"--dir", s.dir,
			"--daemonize", "no",
			"--protected-mode", "no",
			"--loglevel", "warning",
		}
	}
	a := []string{
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--loglevel", "warning",
	}
	if s.cfg.tls != nil {
		a = append(a,
			"--port", "0",
			"--tls-port", strconv.Itoa(s.port),
			"--tls-cert-file", s.cfg.tls.ServerCertFile,
			"--tls-key-file", s.cfg.tls.ServerKeyFile,
			"--tls-ca-cert-file", s.cfg.tls.CAFile,
			"--tls-auth-clients", "yes",
		)
	} else {
		a = append(a, "--port", strconv.Itoa(s.port))
	}
	if s.cfg.password != "" {
		a = append(a, "--requirepass", s.cfg.password)
	}
	return append(a, s.cfg.extra...)
}

func (s *RedisServer) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	cmd := exec.Command(s.bin, s.args()...)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	bindToParent(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("exec %s: %w", s.bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	c := redis.NewClient(s.Options())
	defer c.Close()
	err := waitFor(10*time.Second, func() error {
		select {
		case err := <-exited:
			exited <- err
			return nil
		default:
		}
		return c.Ping(context.Background()).Err()
	})
	select {
	case werr := <-exited:
		return fmt.Errorf("redis-server on port %d exited (%v): %s", s.port, werr, strings.TrimSpace(out.String()))
	default:
	}
	if err != nil {
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("redis-server on port %d not ready: %w: %s", s.port, err, strings.TrimSpace(out.String()))
	}
	if s.cfg.aclUser != "" {
		if err := c.Do(context.Background(), "ACL", "SETUSER", s.cfg.aclUser, "on", ">"+s.cfg.aclPass, "~*", "&*", "+@all").Err(); err != nil {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("add ACL user: %w", err)
		}
	}
	s.cmd, s.exited = cmd, exited
	return nil
}

// Stop kills the server with SIGKILL, as a crash would (a Frozen server
// too). Clients see
// connection errors until Start. Stopping a stopped server does nothing.
func (s *RedisServer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited // reaped: the port is free for a following Start
	s.cmd, s.exited = nil, nil
}

// Start starts a stopped server again on the same port, empty.
func (s *RedisServer) Start() {
	s.t.Helper()
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond) // the port may linger for a moment after a kill
	}
	s.t.Fatalf("testenv: restart redis-server on port %d: %v", s.port, err)
}

// Restart is Stop then Start: the same port, all state wiped.
func (s *RedisServer) Restart() {
	s.t.Helper()
	s.Stop()
	s.Start()
}

// RedisClusterServer is three redis-server masters with --cluster-enabled
// (and, from RedisClusterWithReplicas, a replica of each), joined with
// redis-cli --cluster create and serving all 16384 slots.
type RedisClusterServer struct {
	t     testing.TB
	Nodes []*RedisServer // every node; which are masters changes on a failover
}

// RedisCluster starts a three-master Redis Cluster on free loopback ports
// and waits until every slot is served.
func RedisCluster(t testing.TB) *RedisClusterServer {
	t.Helper()
	return redisCluster(t, 0, 2000)
}

// RedisClusterWithReplicas starts three masters with one replica each and
// a cluster-node-timeout of 1 s, so that a master's replica is promoted a
// few seconds after the master dies (Stop it: see MasterOf and
// WaitForFailover).
func RedisClusterWithReplicas(t testing.TB) *RedisClusterServer {
	t.Helper()
	c := redisCluster(t, 1, 1000)
	// A replica counts as synced once it has had its master's data:
	// until then a failover would find no replica able to take over.
	err := waitFor(20*time.Second, func() error {
		for _, n := range c.Nodes {
			cl := redis.NewClient(n.Options())
			info, err := cl.Info(context.Background(), "replication").Result()
			_ = cl.Close()
			if err != nil {
				return err
			}
			if strings.Contains(info, "role:slave") && !strings.Contains(info, "master_link_status:up") {
				return fmt.Errorf("replica %s not in sync yet", n.Addr())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("testenv: Redis Cluster replicas: %v", err)
	}
	return c
}

func redisCluster(t testing.TB, replicas, nodeTimeoutMs int) *RedisClusterServer {
	t.Helper()
	cli := lookRedis(t, "redis-cli")
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		c, err := startCluster(t, cli, replicas, nodeTimeoutMs)
		if err == nil {
			return c
		}
		lastErr = err
	}
	t.Fatalf("testenv: start Redis Cluster: %v", lastErr)
	return nil
}

func startCluster(t testing.TB, cli string, replicas, nodeTimeoutMs int) (*RedisClusterServer, error) {
	t.Helper()
	c := &RedisClusterServer{t: t}
	var addrs []string
	for i := 0; i < 3*(1+replicas); i++ {
		busPort := FreePort(t)
		n := Redis(t, WithRedisArgs(
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.Itoa(nodeTimeoutMs),
			"--cluster-port", strconv.Itoa(busPort),
		))
		c.Nodes = append(c.Nodes, n)
		addrs = append(addrs, n.Addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		for _, n := range c.Nodes {
			n.Stop()
		}
		return nil, fmt.Errorf("redis-cli --cluster create: %w: %s", err, out)
	}
	err = waitFor(20*time.Second, func() error {
		for _, n := range c.Nodes {
			cl := redis.NewClient(n.Options())
			info, err := cl.ClusterInfo(context.Background()).Result()
			_ = cl.Close()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
				return fmt.Errorf("node %s not ready: %s", n.Addr(), firstLines(info, 3))
			}
		}
		return nil
	})
	if err != nil {
		for _, n := range c.Nodes {
			n.Stop()
		}
		return nil, err
	}
	return c, nil
}

// Addrs are the nodes' host:port addresses (the masters' and, with
// replicas, theirs too): a client's seeds.
func (c *RedisClusterServer) Addrs() []string {
	a := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		a[i] = n.Addr()
	}
	return a
}

// Client returns a new cluster client, closed when the test ends.
func (c *RedisClusterServer) Client() *redis.ClusterClient {
	c.t.Helper()
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " ")
}
