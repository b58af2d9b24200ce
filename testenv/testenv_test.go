package testenv_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

func TestRedisRestartWipesStateOnSamePort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testenv.Redis(t)
	c := srv.Client()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("set: %v", err)
	}
	port := srv.Port()

	srv.Stop()
	if err := c.Get(ctx, "k").Err(); err == nil {
		t.Fatal("get on a stopped server succeeded")
	}
	srv.Start()
	if srv.Port() != port {
		t.Fatalf("port changed across restart: %d then %d", port, srv.Port())
	}
	if err := c.Get(ctx, "k").Err(); err != redis.Nil {
		t.Fatalf("get after restart: want redis.Nil (state wiped), got %v", err)
	}
	if err := c.Set(ctx, "k", "w", 0).Err(); err != nil {
		t.Fatalf("set after restart: %v", err)
	}
	srv.Restart()
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("exists after Restart: n=%d err=%v, want 0 and no error", n, err)
	}
}

func TestRedisPasswordAndACLUser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testenv.Redis(t, testenv.WithRedisPassword("s3cret-pw"), testenv.WithRedisACLUser("app", "app-pw"))

	if err := srv.Client().Ping(ctx).Err(); err != nil {
		t.Fatalf("ping with the right password: %v", err)
	}
	wrong := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "nope", MaxRetries: -1})
	defer wrong.Close()
	if err := wrong.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("ping with a wrong password: want WRONGPASS, got %v", err)
	}
	acl := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "app", Password: "app-pw"})
	defer acl.Close()
	if who, err := acl.Do(ctx, "ACL", "WHOAMI").Text(); err != nil || who != "app" {
		t.Fatalf("ACL WHOAMI: %q %v, want app", who, err)
	}
}

func TestRedisTLSRequiresTrustedClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	certs := testenv.NewCerts(t)
	srv := testenv.Redis(t, testenv.WithRedisTLS(certs))
	if err := srv.Client().Ping(ctx).Err(); err != nil {
		t.Fatalf("ping over TLS with the client certificate: %v", err)
	}
	plain := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Fatal("plain-text ping to a TLS-only server succeeded")
	}
}

func TestRedisClusterServesAllSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := testenv.RedisCluster(t)
	c := cl.Client()
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER SHARDS: %v", err)
	}
	served, withSlots := int64(0), 0
	for _, sh := range shards {
		for _, r := range sh.Slots {
			served += r.End - r.Start + 1
		}
		if len(sh.Slots) > 0 {
			withSlots++
		}
	}
	if served != 16384 {
		t.Fatalf("slots served: %d, want 16384", served)
	}
	if withSlots != 3 {
		t.Fatalf("shards serving slots: %d, want 3", withSlots)
	}
	// Keys spread over all three masters work through the cluster client.
	for i := 0; i < 100; i++ {
		k := "key-" + string(rune('a'+i%26)) + strings.Repeat("x", i)
		if err := c.Set(ctx, k, i, time.Minute).Err(); err != nil {
			t.Fatalf("set %s: %v", k, err)
		}
	}
	var masters atomic.Int32 // ForEachMaster calls back concurrently
	err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.DBSize(ctx).Result()
		if err != nil {
			return err
		}
		if n > 0 {
			masters.Add(1)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("DBSIZE per master: %v", err)
	}
	if masters.Load() != 3 {
		t.Fatalf("masters holding keys: %d, want 3", masters.Load())
	}
}

func TestNATSRestartKeepsStreamMessages(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := testenv.NATS(t)
	nc := srv.Conn()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	for i := 0; i < 10; i++ {
		if _, err := js.Publish(ctx, "s.x", []byte{byte(i)}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	port := srv.Port()
	srv.Restart()
	if srv.Port() != port {
		t.Fatalf("port changed across restart: %d then %d", port, srv.Port())
	}
	testenv.WaitFor(t, 10*time.Second, "client reconnected", nc.IsConnected)
	var info *jetstream.StreamInfo
	testenv.WaitFor(t, 10*time.Second, "stream info after restart", func() bool {
		s, err := js.Stream(ctx, "S")
		if err != nil {
			return false
		}
		info, err = s.Info(ctx)
		return err == nil
	})
	if info.State.Msgs != 10 {
		t.Fatalf("messages after restart: %d, want 10", info.State.Msgs)
	}
}

func TestNATSTokenAuth(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t, testenv.WithNATSToken("tok-123"))
	if nc := srv.Conn(); !nc.IsConnected() {
		t.Fatal("not connected with the right token")
	}
	nc, err := nats.Connect(srv.URL(), nats.Token("wrong"), nats.MaxReconnects(0))
	if err == nil {
		nc.Close()
		t.Fatal("connected with a wrong token")
	}
	if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("wrong token: want an authorization error, got %v", err)
	}
}

func TestNATSTLS(t *testing.T) {
	t.Parallel()
	certs := testenv.NewCerts(t)
	srv := testenv.NATS(t, testenv.WithNATSTLS(certs))
	if !strings.HasPrefix(srv.URL(), "tls://") {
		t.Fatalf("URL %q: want tls://", srv.URL())
	}
	if nc := srv.Conn(); !nc.IsConnected() {
		t.Fatal("not connected over TLS")
	}
	nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(0), nats.Timeout(2*time.Second))
	if err == nil {
		nc.Close()
		t.Fatal("connected over TLS without trusting the CA")
	}
}

// TestRedisClusterFailover: with replicas, stopping the master of a key's
// slot gets its replica promoted, and the key's value (replicated before
// the stop) is still there.
func TestRedisClusterFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := testenv.RedisClusterWithReplicas(t)
	if len(cl.Nodes) != 6 {
		t.Fatalf("%d nodes, want 3 masters and 3 replicas", len(cl.Nodes))
	}
	old, err := cl.MasterOf("{q}k")
	if err != nil {
		t.Fatal(err)
	}
	setReplicated(t, old, "{q}k")
	old.Stop()
	start := time.Now()
	now, err := cl.WaitForFailover("{q}k", old, 30*time.Second)
	if err != nil {
		t.Fatalf("failover: %v", err)
	}
	t.Logf("replica %s promoted %s after the master stopped", now.Addr(), time.Since(start).Round(10*time.Millisecond))
	n := redis.NewClient(now.Options())
	defer n.Close()
	if got, err := n.Get(ctx, "{q}k").Result(); err != nil || got != "v" {
		t.Fatalf("key on the promoted replica: %q, %v; want v", got, err)
	}
}

// TestRedisSentinelFailover: the Sentinel names the replica master a few
// seconds after the master stops, and a Sentinel-backed client follows.
func TestRedisSentinelFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.RedisSentinel(t)
	c := s.Client(t)
	setReplicated(t, s.Master, "k")
	s.Master.Stop()
	start := time.Now()
	if err := s.WaitForFailover(30 * time.Second); err != nil {
		t.Fatalf("failover: %v", err)
	}
	t.Logf("replica promoted %s after the master stopped", time.Since(start).Round(10*time.Millisecond))
	testenv.WaitFor(t, 10*time.Second, "the client writing to the new master", func() bool {
		return c.Set(ctx, "k2", "v", time.Minute).Err() == nil
	})
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("key after the failover: %q, %v; want v", got, err)
	}
}

// setReplicated sets key to "v" on master and waits until a replica has
// it (WAIT, on the connection that wrote it). The client's read timeout is
// longer than the WAIT's: a replica still making its first sync on a
// loaded machine takes seconds to answer.
func setReplicated(t *testing.T, master *testenv.RedisServer, key string) {
	t.Helper()
	o := master.Options()
	o.ReadTimeout = 20 * time.Second
	c := redis.NewClient(o)
	defer c.Close()
	wait := redis.NewIntCmd(context.Background(), "wait", 1, 15000)
	if _, err := c.Pipelined(context.Background(), func(p redis.Pipeliner) error {
		p.Set(context.Background(), key, "v", time.Minute)
		return p.Process(context.Background(), wait)
	}); err != nil {
		t.Fatal(err)
	}
	if n := wait.Val(); n < 1 {
		t.Fatalf("WAIT: %d replicas have %s, want 1", n, key)
	}
}
