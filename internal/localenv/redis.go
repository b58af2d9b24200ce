package localenv

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNoRedis is the error when a Redis binary is not on PATH; its text
// says how to install one.
var ErrNoRedis = errors.New("install it with `sudo apt-get install redis-server` (Debian/Ubuntu; brings redis-cli too) " +
	"or `brew install redis` (macOS)")

// LookRedis returns the path of a Redis binary (redis-server, redis-cli),
// or an error wrapping ErrNoRedis.
func LookRedis(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found on PATH: %w", name, ErrNoRedis)
	}
	return p, nil
}

// RedisOption configures a private Redis server.
type RedisOption func(*redisConfig)

type redisConfig struct {
	password string
	aclUser  string
	aclPass  string
	tls      *RedisTLS
	extra    []string
	// sentinelConf: run as a Redis Sentinel on this configuration file.
	sentinelConf string
}

// RedisTLS is what a TLS-only server needs: its certificate and key files,
// the CA file its clients' certificates must be signed by, and the client
// configuration that reaches it (Options uses it).
type RedisTLS struct {
	CertFile, KeyFile, CAFile string
	Client                    *tls.Config
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

// WithRedisTLS serves TLS only (the plain port is disabled) and requires
// client certificates signed by t.CAFile.
func WithRedisTLS(t RedisTLS) RedisOption {
	return func(c *redisConfig) { c.tls = &t }
}

// WithRedisArgs passes extra redis-server command-line arguments.
func WithRedisArgs(args ...string) RedisOption {
	return func(c *redisConfig) { c.extra = append(c.extra, args...) }
}

// RedisServer is a private redis-server process on a loopback port. It
// keeps nothing on disk, so Restart wipes its state, as a crash of a cache
// without persistence would. Its methods are safe for concurrent use.
type RedisServer struct {
	bin  string
	dir  string
	cfg  redisConfig
	port int

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan error // receives the process's exit status when it ends
}

// StartRedis starts a private redis-server on a free port. Close stops it
// and removes its work directory.
func StartRedis(opts ...RedisOption) (*RedisServer, error) {
	bin, err := LookRedis("redis-server")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "notifier-redis-*")
	if err != nil {
		return nil, fmt.Errorf("redis-server work directory: %w", err)
	}
	s := &RedisServer{bin: bin, dir: dir}
	for _, o := range opts {
		o(&s.cfg)
	}
	for attempt := 0; attempt < 5; attempt++ {
		if s.port, err = FreePort(); err != nil {
			break
		}
		if err = s.start(); err == nil {
			return s, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("start redis-server: %w", err)
}

// Addr is the server's host:port.
func (s *RedisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Port is the server's TCP port; it does not change across restarts.
func (s *RedisServer) Port() int { return s.port }

// Options returns go-redis options that reach this server, with the
// default user's password and TLS client certificate when the server has
// them.
func (s *RedisServer) Options() *redis.Options {
	o := &redis.Options{Addr: s.Addr(), Password: s.cfg.password, MaxRetries: -1}
	if s.cfg.tls != nil {
		o.TLSConfig = s.cfg.tls.Client
	}
	return o
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
	if t := s.cfg.tls; t != nil {
		a = append(a,
			"--port", "0",
			"--tls-port", strconv.Itoa(s.port),
			"--tls-cert-file", t.CertFile,
			"--tls-key-file", t.KeyFile,
			"--tls-ca-cert-file", t.CAFile,
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
	BindToParent(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("exec %s: %w", s.bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	c := redis.NewClient(s.Options())
	defer c.Close()
	err := WaitFor(10*time.Second, func() error {
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
// too). Clients see connection errors until Start. Stopping a stopped
// server does nothing.
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

// Close stops the server and removes its work directory.
func (s *RedisServer) Close() {
	s.Stop()
	_ = os.RemoveAll(s.dir)
}

// Start starts a stopped server again on the same port, empty. It retries
// for up to 5 s: the port may linger for a moment after a kill.
func (s *RedisServer) Start() error {
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = s.start(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("restart redis-server on port %d: %w", s.port, err)
}

// Restart is Stop then Start: the same port, all state wiped.
func (s *RedisServer) Restart() error {
	s.Stop()
	return s.Start()
}

// Running reports whether the server process is up (not Stopped).
func (s *RedisServer) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Version is the server's redis_version, or "" when it cannot be read.
func (s *RedisServer) Version(ctx context.Context) string {
	c := redis.NewClient(s.Options())
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return ""
}
