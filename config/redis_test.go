package config

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/testenv"
)

// TestRedisTLSAndACL: the client built from redis: config connects over TLS
// with the CA and a client certificate, as an ACL user; without the CA the
// server's certificate does not verify.
func TestRedisTLSAndACL(t *testing.T) {
	t.Parallel()
	certs := testenv.NewCerts(t)
	srv := testenv.Redis(t, testenv.WithRedisTLS(certs), testenv.WithRedisACLUser("app", "app-secret"))
	ctx := context.Background()
	good := Redis{
		Addrs: []string{srv.Addr()}, Username: "app", Password: "app-secret",
		TLS: RedisTLS{Enabled: true, CAFile: certs.CAFile, CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile},
	}.WithDefaults()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	rdb, err := ConnectRedis(ctx, good, 4)
	if err != nil {
		t.Fatalf("connect over TLS as app: %v", err)
	}
	who, err := rdb.Do(ctx, "ACL", "WHOAMI").Text()
	_ = rdb.Close()
	if err != nil || who != "app" {
		t.Fatalf("ACL WHOAMI = %q, %v", who, err)
	}
	noCA := good
	noCA.TLS.CAFile = ""
	if _, err := ConnectRedis(ctx, noCA, 4); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: %v, want a certificate error", err)
	}
	wrong := good
	wrong.Password = "not-the-secret"
	_, err = ConnectRedis(ctx, wrong, 4)
	if err == nil || strings.Contains(err.Error(), "not-the-secret") || strings.Contains(err.Error(), "app-secret") {
		t.Fatalf("wrong password: %v (must fail and not echo a secret)", err)
	}
}

// TestRedisSentinel: with redis.master_name, redis.addrs are Sentinels; the
// client writes to the master they name and follows a failover to the
// promoted replica. The cluster kind of client reads its slot map every
// few seconds, not go-redis's default minute.
func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.RedisSentinel(t)
	cfg := Redis{Addrs: s.Addrs(), MasterName: s.MasterName}.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	rdb, err := ConnectRedis(ctx, cfg, 4)
	if err != nil {
		t.Fatalf("connect through the Sentinel: %v", err)
	}
	defer rdb.Close()
	if err := rdb.Set(ctx, "k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Master.Client().Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("the write reached the master as %q, %v", got, err)
	}
	s.Master.Stop()
	if err := s.WaitForFailover(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "a write through the client reaching the promoted replica", func() bool {
		if rdb.Set(ctx, "k2", "v2", time.Minute).Err() != nil {
			return false
		}
		got, err := s.Replica.Client().Get(ctx, "k2").Result()
		return err == nil && got == "v2"
	})

	cc, err := NewRedisClient(Redis{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}.WithDefaults(), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c, ok := cc.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("two addresses make a %T, want a cluster client", cc)
	}
	if got := c.Options().ClusterStateReloadInterval; got != clusterStateReload {
		t.Fatalf("cluster slot map read every %s, want %s", got, clusterStateReload)
	}
}

// TestRedisVersionCheck: the server's redis_version is read from INFO and
// anything older than 7.0 (PEXPIRE ... GT) is refused; a version that
// cannot be read counts as too old.
func TestRedisVersionCheck(t *testing.T) {
	t.Parallel()
	info := "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n"
	if v := infoField(info, "redis_version"); v != "7.0.15" {
		t.Fatalf("infoField: %q", v)
	}
	for v, want := range map[string]bool{
		"7.0.15": true, "7.2.4": true, "8.0.0": true, "10.1": true,
		"6.2.14": false, "6.0.0": false, "5": false, "": false, "x.y": false,
	} {
		if got := versionAtLeast(v, 7, 0); got != want {
			t.Errorf("versionAtLeast(%q, 7, 0) = %v, want %v", v, got, want)
		}
	}
	// The machine's redis-server passes the check the client runs.
	srv := testenv.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	if err := checkRedisVersion(context.Background(), rdb); err != nil {
		t.Fatalf("checkRedisVersion on %s: %v", srv.Addr(), err)
	}
}
