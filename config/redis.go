package config

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/queue"
)

// Redis is YAML redis:. One address is a standalone server; several
// are the seeds of a Redis Cluster; with master_name, the addresses are
// Redis Sentinels that name the master.
type Redis struct {
	Addrs      []string `mapstructure:"addrs"`
	MasterName string   `mapstructure:"master_name"` // Sentinel: the monitored master's name
	// SentinelPassword is the Sentinels' own password (requirepass in
	// sentinel.conf), when they have one; better:
	// NOTIFIER_REDIS_SENTINEL_PASSWORD.
	SentinelPassword string   `mapstructure:"sentinel_password"`
	Username         string   `mapstructure:"username"` // Redis 6+ ACL user
	Password         string   `mapstructure:"password"` // better: NOTIFIER_REDIS_PASSWORD
	TLS              RedisTLS `mapstructure:"tls"`
	KeyPrefix        string   `mapstructure:"key_prefix"`
	OnFailure        string   `mapstructure:"on_failure"` // hold | local
}

// RedisTLS is YAML redis.tls:. Server verification is always on.
type RedisTLS struct {
	Enabled    bool   `mapstructure:"enabled"`
	CAFile     string `mapstructure:"ca_file"`     // trust this CA (default: the system roots)
	CertFile   string `mapstructure:"cert_file"`   // client certificate, with key_file
	KeyFile    string `mapstructure:"key_file"`    //
	ServerName string `mapstructure:"server_name"` // name to verify (default: the address's host)
}

// On-failure policies (SPEC §6).
const (
	OnFailureHold  = "hold"
	OnFailureLocal = "local"
)

// WithDefaults fills the keys left out.
func (c Redis) WithDefaults() Redis {
	if len(c.Addrs) == 0 {
		c.Addrs = []string{"127.0.0.1:6379"}
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = "notifier:"
	}
	if c.OnFailure == "" {
		c.OnFailure = OnFailureHold
	}
	return c
}

// Validate reports every problem, keys relative to redis:. It never prints
// the password.
func (c Redis) Validate() error {
	var errs []error
	for i, a := range c.Addrs {
		if _, port, err := net.SplitHostPort(a); err != nil || !validPort(port) || port == "0" {
			errs = append(errs, fmt.Errorf("addrs[%d]: must be host:port, got %q", i, queue.RedactAddr(a)))
		}
	}
	if strings.ContainsAny(c.KeyPrefix, "{}") {
		errs = append(errs, fmt.Errorf("key_prefix: must not contain { or } (they would break the keys' Redis Cluster hash tags), got %q", c.KeyPrefix))
	}
	if c.OnFailure != OnFailureHold && c.OnFailure != OnFailureLocal {
		errs = append(errs, fmt.Errorf("on_failure: %q is not one of hold, local", c.OnFailure))
	}
	if c.SentinelPassword != "" && c.MasterName == "" {
		errs = append(errs, errors.New("sentinel_password: only used with master_name (the addresses are then Sentinels)"))
	}
	if c.MasterName != "" && strings.ContainsAny(c.MasterName, " \t\r\n") {
		errs = append(errs, fmt.Errorf("master_name: must be one word, got %q", c.MasterName))
	}
	if c.Username != "" && c.Password == "" {
		errs = append(errs, errors.New("password: required with username (set NOTIFIER_REDIS_PASSWORD)"))
	}
	errs = append(errs, checkTLSFiles("tls.", c.TLS.CAFile, c.TLS.CertFile, c.TLS.KeyFile)...)
	if !c.TLS.Enabled && (c.TLS.CAFile != "" || c.TLS.CertFile != "") {
		errs = append(errs, errors.New("tls.enabled: must be true when tls files are given (they would be ignored)"))
	}
	return errors.Join(errs...)
}

// checkTLSFiles checks that named files are readable and that a certificate
// comes with its key.
func checkTLSFiles(prefix, ca, cert, key string) []error {
	var errs []error
	for _, f := range []struct{ key, path string }{{"ca_file", ca}, {"cert_file", cert}, {"key_file", key}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%s%s: cannot read %q: %w", prefix, f.key, f.path, errors.Unwrap(err)))
		}
	}
	if (cert == "") != (key == "") {
		errs = append(errs, fmt.Errorf("%scert_file, %skey_file: give both or neither", prefix, prefix))
	}
	return errs
}

// tlsConfig builds the client TLS configuration: verification on, the CA
// (or the system roots), and the client certificate when given.
func (c RedisTLS) tlsConfig() (*tls.Config, error) {
	if !c.Enabled {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read redis.tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redis.tls.ca_file %s: no PEM certificate in it", c.CAFile)
		}
		cfg.RootCAs = pool
	}
	if c.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load redis.tls.cert_file and key_file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// NewRedisClient makes a standalone, Sentinel or cluster client; it does
// not dial.
func NewRedisClient(c Redis, workers int) (redis.UniversalClient, error) {
	tlsCfg, err := c.TLS.tlsConfig()
	if err != nil {
		return nil, err
	}
	// A pool a little larger than the workers, so no worker waits for a
	// connection; commands fail fast enough for hold/local to react.
	o := &redis.UniversalOptions{
		Addrs:            c.Addrs,
		MasterName:       c.MasterName,
		SentinelPassword: c.SentinelPassword,
		Username:         c.Username,
		Password:         c.Password,
		TLSConfig:        tlsCfg,
		PoolSize:         workers + 8,
		DialTimeout:      2 * time.Second,
		ReadTimeout:      2 * time.Second,
		WriteTimeout:     2 * time.Second,
	}
	switch {
	case c.MasterName != "":
		// The Sentinels name the master and announce a failover; the
		// client follows it by itself.
		return redis.NewFailoverClient(o.Failover()), nil
	case len(c.Addrs) > 1:
		// A Cluster: the slot map is also read again every few seconds
		// (go-redis's default is a minute), and the dispatcher's health
		// check reads it at once after a failed operation
		// (limits.Health), so a promoted replica is found as soon
		// as the cluster has promoted it.
		co := o.Cluster()
		co.ClusterStateReloadInterval = clusterStateReload
		return redis.NewClusterClient(co), nil
	default:
		return redis.NewClient(o.Simple()), nil
	}
}

// clusterStateReload is how old a Redis Cluster slot map may get before
// the client reads it again on its next command.
const clusterStateReload = 5 * time.Second

// ConnectRedis makes the client and checks that it reaches the server and
// is allowed in. Errors name the addresses, never the password.
func ConnectRedis(ctx context.Context, c Redis, workers int) (redis.UniversalClient, error) {
	rdb, err := NewRedisClient(c, workers)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("connect to redis at %s: %w", strings.Join(c.Addrs, ","), RedactErr(err, c.Password, c.SentinelPassword))
	}
	if err := checkRedisVersion(pctx, rdb); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis at %s: %w", strings.Join(c.Addrs, ","), err)
	}
	return rdb, nil
}

// MinRedisVersion is the oldest Redis the scripts run on: the per-user
// cap's sliding log moves its expiry with PEXPIRE ... GT, new in 7.0.
const MinRedisVersion = "7.0"

// checkRedisVersion refuses a server (each master of a Cluster) older
// than MinRedisVersion, which would otherwise fail the first cap decision
// with a syntax error. A server that will not say (INFO refused by an
// ACL) is let through: its version is unknown, not known to be old.
func checkRedisVersion(ctx context.Context, rdb redis.UniversalClient) error {
	check := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return nil
		}
		if v := infoField(info, "redis_version"); !versionAtLeast(v, 7, 0) {
			return fmt.Errorf("%s runs Redis %q; notifier needs Redis %s or newer (the per-user cap's script uses PEXPIRE ... GT)", c.Options().Addr, v, MinRedisVersion)
		}
		return nil
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, check)
	case *redis.Client:
		return check(ctx, c)
	}
	return nil
}

// infoField is field's value in an INFO reply ("" when absent).
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// versionAtLeast says whether v ("7.0.15", "8.2") is major.minor or newer;
// one it cannot read is not.
func versionAtLeast(v string, major, minor int) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || (ma == major && mi >= minor)
}

// RedactErr makes sure a secret never leaves in an error message.
func RedactErr(err error, secrets ...string) error {
	msg := err.Error()
	changed := false
	for _, s := range secrets {
		if s != "" && strings.Contains(msg, s) {
			msg = strings.ReplaceAll(msg, s, "[redacted]")
			changed = true
		}
	}
	if !changed {
		return err
	}
	return errors.New(msg)
}
