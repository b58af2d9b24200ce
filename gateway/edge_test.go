package gateway_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/gateway"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// TestCapacityIsSharedByEveryKey is the outside test: two keys of
// 100/s each, as fast as the clients go, against a capacity of 50/s and
// 50 at once: at most 50 + 50/s are accepted, the rest refused at once,
// 503 over-capacity with Retry-After and the capacity's RateLimit fields;
// every 202 is in the stream once.
func TestCapacityIsSharedByEveryKey(t *testing.T) {
	t.Parallel()
	const rate, burst = 50.0, 50
	b := setup(t, gateway.Config{Keys: keys(100, 100), Capacity: gateway.Limit{Rate: rate, Burst: burst}})
	var mu sync.Mutex
	var ids []string
	tenantOf := func(w int) (key, tenant string) {
		if w%2 == 1 {
			return otherKey, ""
		}
		return acmeKey, "acme"
	}
	counts, elapsed := hammerPosts(t, 1500*time.Millisecond, 8, func(w int) response {
		key, _ := tenantOf(w)
		return post(t, b.srv.URL, key, smsJob(""))
	}, map[int]func(int, response) bool{
		http.StatusAccepted: func(w int, r response) bool {
			var a struct{ ID string }
			r.json(t, &a)
			_, tenant := tenantOf(w)
			mu.Lock()
			ids = append(ids, queue.MsgID(tenant, a.ID))
			mu.Unlock()
			return true
		},
		http.StatusServiceUnavailable: func(_ int, r response) bool {
			var p problem
			r.json(t, &p)
			if p.Type != gateway.TypeOverCapacity || r.header.Get("Retry-After") != "1" {
				t.Errorf("503 %+v Retry-After %q, want over-capacity after 1 s", p, r.header.Get("Retry-After"))
				return false
			}
			rateHeaders(t, r, "capacity")
			return true
		},
	})
	accepted, refused := counts[http.StatusAccepted], counts[http.StatusServiceUnavailable]
	checkAccepted(t, accepted, rate, burst, elapsed)
	if refused == 0 {
		t.Fatal("nothing was refused")
	}
	stored := map[string]int{}
	for _, m := range b.stored(t) {
		stored[m.Header.Get(jetstream.MsgIDHeader)]++
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if stored[id] != 1 {
			t.Errorf("job %s accepted, in the stream %d times", id, stored[id])
		}
	}
	if len(stored) != len(ids) {
		t.Errorf("%d jobs stored, %d accepted", len(stored), len(ids))
	}
	t.Logf("%d accepted, %d refused over capacity in %s", accepted, refused, elapsed)
}

// TestOverCapacityIsRefusedWithoutRedis: once the capacity bucket is
// known empty, a request is refused 503 over-capacity from memory, before
// its key is counted: Redis stopped, a valid key and a bad one get the
// same answer, with Retry-After.
func TestOverCapacityIsRefusedWithoutRedis(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{Capacity: gateway.Limit{Rate: 0.01, Burst: 2}})
	for range 2 {
		if r := b.post(t, acmeKey, smsJob("")); r.status != http.StatusAccepted {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	if r := b.post(t, otherKey, smsJob("")); r.status != http.StatusServiceUnavailable {
		t.Fatalf("a third job: %d %s, want 503", r.status, r.body)
	}
	b.redis.Stop()
	for _, key := range []string{otherKey, "not-a-key"} {
		r := b.post(t, key, smsJob(""))
		ra, _ := strconv.Atoi(r.header.Get("Retry-After"))
		if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), gateway.TypeOverCapacity) || ra < 99 || ra > 100 {
			t.Errorf("key %q over capacity with Redis stopped: %d %s Retry-After %q, want 503 over-capacity after about 100 s", key, r.status, r.body, r.header.Get("Retry-After"))
		}
		rateHeaders(t, r, "capacity")
	}
}

// bucketState reads one of the gateway's buckets in Redis.
func bucketState(t *testing.T, b *bundle, kind, name string, l gateway.Limit) gateway.Take {
	t.Helper()
	_, ts, err := gateway.NewBuckets(b.rdb).Take(ctx(t), 0, gateway.Bucket{Key: gateway.BucketKey(b.prefix, kind, name), Limit: l})
	if err != nil {
		t.Fatal(err)
	}
	return ts[0]
}

// TestTenantKeysShareOneBucketAllOrNothing: a tenant's two keys share its
// bucket (3 jobs between them, not 3 each); a batch is taken from every
// bucket it passes or from none: refused by the tenant's, the key's
// bucket and the capacity keep their tokens, and refused by the key's,
// the tenant's keep theirs.
func TestTenantKeysShareOneBucketAllOrNothing(t *testing.T) {
	t.Parallel()
	capacity := gateway.Limit{Rate: 0.01, Burst: 100}
	tenant := gateway.Limit{Rate: 0.01, Burst: 3}
	ks := []gateway.Key{
		{Name: "acme-a", Tenant: "acme", SHA256: gateway.HashKey(acmeKey), Rate: 0.01, Burst: 10},
		{Name: "acme-b", Tenant: "acme", SHA256: gateway.HashKey(otherKey), Rate: 0.01, Burst: 10},
		{Name: "small", Tenant: "bank", SHA256: gateway.HashKey("small-key"), Rate: 0.01, Burst: 2},
	}
	b := setup(t, gateway.Config{Keys: ks, Capacity: capacity,
		Tenants: map[string]gateway.Limit{"acme": tenant, "bank": {Rate: 0.01, Burst: 10}}})
	if r := b.post(t, acmeKey, "["+smsJob("")+","+smsJob("")+"]"); r.status != http.StatusAccepted {
		t.Fatalf("2 jobs of acme-a: %d %s", r.status, r.body)
	}
	// 2 more of acme-b: the tenant has 1 left. Nothing is taken.
	r := b.post(t, otherKey, "["+smsJob("")+","+smsJob("")+"]")
	var p problem
	r.json(t, &p)
	if r.status != http.StatusTooManyRequests || p.Type != gateway.TypeQuotaExceeded {
		t.Fatalf("2 jobs of acme-b with 1 left in the tenant: %d %s, want 429", r.status, r.body)
	}
	if left := rateHeaders(t, r, "tenant"); left != 1 {
		t.Errorf("tenant r=%d, want 1", left)
	}
	if got := bucketState(t, b, gateway.KindKey, "acme-b", gateway.Limit{Rate: 0.01, Burst: 10}).Remaining; got != 10 {
		t.Errorf("acme-b's own bucket holds %d after a batch the tenant refused, want 10 (untouched)", got)
	}
	if got := bucketState(t, b, gateway.KindCapacity, "", capacity).Remaining; got != 98 {
		t.Errorf("the capacity holds %d, want 98 (only the 2 accepted)", got)
	}
	if r := b.post(t, otherKey, smsJob("")); r.status != http.StatusAccepted {
		t.Fatalf("acme-b's one job with 1 left in the tenant: %d %s", r.status, r.body)
	}
	for _, key := range []string{acmeKey, otherKey} {
		if r := b.post(t, key, smsJob("")); r.status != http.StatusTooManyRequests {
			t.Errorf("a 4th job of tenant acme: %d, want 429", r.status)
		} else {
			rateHeaders(t, r, "tenant")
		}
	}
	// Refused by the key's own bucket: the tenant's and the capacity keep
	// their tokens.
	if r := b.post(t, "small-key", "["+smsJob("")+","+smsJob("")+"]"); r.status != http.StatusAccepted {
		t.Fatalf("2 jobs of small: %d %s", r.status, r.body)
	}
	if r := b.post(t, "small-key", smsJob("")); r.status != http.StatusTooManyRequests {
		t.Fatalf("a 3rd job of small (burst 2): %d", r.status)
	} else {
		rateHeaders(t, r, "key")
	}
	if got := bucketState(t, b, gateway.KindTenant, "bank", gateway.Limit{Rate: 0.01, Burst: 10}).Remaining; got != 8 {
		t.Errorf("bank's bucket holds %d, want 8", got)
	}
	if n := len(b.stored(t)); n != 5 {
		t.Errorf("%d jobs stored, want 5", n)
	}
}

// TestPriorityLaneIsAPermission: ?priority=high with a key without
// priority: true is 403 priority-not-allowed, costs no token and
// publishes nothing; with it, the job takes the priority lane. Another
// priority is 400 invalid-job; both answers carry the key's RateLimit
// fields, as every answer of the handler does (SPEC §9).
func TestPriorityLaneIsAPermission(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{Keys: keys(0.01, 1)})
	req := func(key string) response {
		return postURL(t, b.srv.URL+"/v1/notifications?priority=high", key, smsJob(""))
	}
	r := req(otherKey)
	var p problem
	r.json(t, &p)
	if r.status != http.StatusForbidden || p.Type != gateway.TypePriorityNotAllowed {
		t.Fatalf("priority=high without the permission: %d %s, want 403 priority-not-allowed", r.status, r.body)
	}
	if left := rateHeaders(t, r, "key"); left != 1 {
		t.Errorf("the 403 says %d left, want the key's 1", left)
	}
	r = postURL(t, b.srv.URL+"/v1/notifications?priority=urgent", otherKey, smsJob(""))
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), gateway.TypeInvalidJob) {
		t.Fatalf("priority=urgent: %d %s, want 400 invalid-job", r.status, r.body)
	}
	rateHeaders(t, r, "key")
	if r := b.post(t, otherKey, smsJob("")); r.status != http.StatusAccepted {
		t.Fatalf("the same key's one token after the 403: %d %s (the 403 took it?)", r.status, r.body)
	}
	if r := req(acmeKey); r.status != http.StatusAccepted {
		t.Fatalf("priority=high with the permission: %d %s", r.status, r.body)
	}
	var subjects []string
	for _, m := range b.stored(t) {
		subjects = append(subjects, queueOf(t, m))
	}
	want := queue.JobSubjectFor("sms", "", false) + " " + queue.JobSubjectFor("sms", "acme", true)
	if strings.Join(subjects, " ") != want {
		t.Fatalf("stored on %v, want %s", subjects, want)
	}
}

// TestIdsArePerTenant: a job id is unique within its tenant. Two tenants
// may use the same Idempotency-Key, and neither learns the other did (no
// "duplicate"); the same id with another body is 409
// idempotency-key-reused and publishes nothing; the same body again is
// 202 duplicate. The body's own id is held the same way, and in an array
// a reused item is reported while the others are published.
func TestIdsArePerTenant(t *testing.T) {
	t.Parallel()
	ks := append(keys(100, 100), gateway.Key{Name: "bank-app", Tenant: "bank", SHA256: gateway.HashKey("bank-key"), Rate: 100, Burst: 100})
	b := setup(t, gateway.Config{Keys: ks})
	type acceptedBody struct {
		ID        string
		Duplicate bool
	}
	for _, key := range []string{"bank-key", acmeKey} {
		r := b.post(t, key, smsJob(""), "Idempotency-Key", "order-42")
		var a acceptedBody
		r.json(t, &a)
		if r.status != http.StatusAccepted || a.ID != "order-42" || a.Duplicate {
			t.Fatalf("key %s, order-42: %d %s, want 202 not duplicate (another tenant's id is not this one's)", key, r.status, r.body)
		}
	}
	r := b.post(t, acmeKey, smsJob(`,"title":"another job"`), "Idempotency-Key", "order-42")
	var p problem
	r.json(t, &p)
	if r.status != http.StatusConflict || p.Type != gateway.TypeIDReused || p.Field != "id" {
		t.Fatalf("acme's order-42 with another body: %d %s, want 409 idempotency-key-reused", r.status, r.body)
	}
	r = b.post(t, acmeKey, smsJob(""), "Idempotency-Key", "order-42")
	var a acceptedBody
	r.json(t, &a)
	if r.status != http.StatusAccepted || !a.Duplicate {
		t.Fatalf("acme's order-42 with the same body: %d %s, want 202 duplicate", r.status, r.body)
	}
	// The body's id, and an array of a new item and a reused one.
	if r := b.post(t, acmeKey, smsJob(`,"id":"inv-7"`)); r.status != http.StatusAccepted {
		t.Fatalf("body id inv-7: %d %s", r.status, r.body)
	}
	if r := b.post(t, acmeKey, smsJob(`,"id":"inv-7","title":"changed"`)); r.status != http.StatusConflict {
		t.Fatalf("body id inv-7 with another body: %d %s, want 409", r.status, r.body)
	}
	r = b.post(t, acmeKey, "["+smsJob(`,"id":"inv-8"`)+","+smsJob(`,"id":"inv-7","title":"again another"`)+"]")
	var res []map[string]any
	r.json(t, &res)
	if r.status != http.StatusAccepted || len(res) != 2 || res[0]["status"] != "accepted" || res[1]["status"] != "reused" {
		t.Fatalf("an array with a reused id: %d %s", r.status, r.body)
	}
	r = b.post(t, acmeKey, "["+smsJob(`,"id":"inv-7","title":"x"`)+"]")
	r.json(t, &p)
	if r.status != http.StatusConflict || len(p.Items) != 1 || p.Items[0]["status"] != "reused" {
		t.Fatalf("an array of a reused id only: %d %s, want 409 with items", r.status, r.body)
	}
	var ids []string
	for _, m := range b.stored(t) {
		ids = append(ids, m.Header.Get(jetstream.MsgIDHeader))
	}
	if got := strings.Join(ids, " "); got != "bank/order-42 acme/order-42 acme/inv-7 acme/inv-8" {
		t.Fatalf("stream holds %s, want bank/order-42 acme/order-42 acme/inv-7 acme/inv-8", got)
	}
	ttl, err := b.rdb.PTTL(ctx(t), gateway.IDKey(b.prefix, "acme", "order-42")).Result()
	if err != nil || ttl <= 23*time.Hour || ttl > gateway.DefaultIdempotencyTTL {
		t.Errorf("acme's order-42 record expires in %s (%v), want idempotency_ttl (24h)", ttl, err)
	}
}

// TestABlockedAddressIsRefusedBeforeRedis: once an address is over the
// failed-authentication limit, its requests (a bad key, a good one) are
// answered 429 from memory, with the "auth" RateLimit fields, and not one
// reaches Redis.
func TestABlockedAddressIsRefusedBeforeRedis(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{AuthFailures: gateway.AuthFailures{Limit: 3, Window: time.Minute}, LegacyHeaders: true})
	for i := range 4 {
		b.post(t, "guess-"+strconv.Itoa(i), smsJob(""))
	}
	if err := b.rdb.ConfigResetStat(ctx(t)).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		key := "guess-more-" + strconv.Itoa(i)
		if i == 49 {
			key = acmeKey
		}
		r := b.post(t, key, smsJob(""))
		var p problem
		r.json(t, &p)
		ra, _ := strconv.Atoi(r.header.Get("Retry-After"))
		if r.status != http.StatusTooManyRequests || p.Type != gateway.TypeAuthFailures || ra < 1 || ra > 60 {
			t.Fatalf("request %d from the blocked address: %d %s Retry-After %q", i, r.status, r.body, r.header.Get("Retry-After"))
		}
		if left := rateHeaders(t, r, "auth"); left != 0 {
			t.Fatalf("blocked: auth r=%d, want 0", left)
		}
		if r.header.Get("RateLimit-Limit") != "3" || r.header.Get("RateLimit-Remaining") != "0" {
			t.Fatalf("blocked: legacy fields %v", r.header)
		}
	}
	stats, err := b.rdb.Info(ctx(t), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stats, "cmdstat_evalsha") || strings.Contains(stats, "cmdstat_eval:") {
		t.Fatalf("requests from a blocked address reached Redis:\n%s", stats)
	}
}

// TestAnIPv6SlashSixtyFourIsOneAddress: the per-address bounds count an
// IPv6 client by its /64: failures from two addresses of one /64 add up
// and block the whole /64 (a valid key too), while another /64 and an
// IPv4 client are not touched.
func TestAnIPv6SlashSixtyFourIsOneAddress(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{ClientIPHeader: "X-Forwarded-For", AuthFailures: gateway.AuthFailures{Limit: 1, Window: time.Minute}})
	for _, c := range []struct {
		key, from string
		want      int
	}{
		{"guess-1", "2001:db8:1:2::1", http.StatusUnauthorized},
		{"guess-2", "2001:db8:1:2:ffff:ffff:ffff:fffe", http.StatusTooManyRequests}, // the same /64: its second failure
		{acmeKey, "2001:db8:1:2:abcd::7", http.StatusTooManyRequests},               // the /64 is blocked
		{acmeKey, "2001:db8:1:3::1", http.StatusAccepted},                           // the next /64
		{"guess-3", "2001:db8:1:3::2", http.StatusUnauthorized},
		{acmeKey, "192.0.2.1", http.StatusAccepted},
	} {
		if r := b.post(t, c.key, smsJob(""), "X-Forwarded-For", c.from); r.status != c.want {
			t.Errorf("from %s: %d %s, want %d", c.from, r.status, r.body, c.want)
		}
	}
	if n, err := b.rdb.Get(ctx(t), gateway.AuthFailKey(b.prefix, "2001:db8:1:2::/64")).Int(); err != nil || n != 2 {
		t.Errorf("failures counted for 2001:db8:1:2::/64: %d (%v), want 2", n, err)
	}
}

// TestRangesAreEnforced: every rate, burst, duration and bound of the
// gateway has a range; a value out of it is refused naming its path, the
// value and what is allowed.
func TestRangesAreEnforced(t *testing.T) {
	t.Parallel()
	h := gateway.HashKey("k")
	cases := []struct {
		change func(*gateway.Config)
		want   string
	}{
		{func(c *gateway.Config) { c.Keys[0].Rate = 1e-15 }, "keys[0].rate: must be a number of jobs per second from 0.001 to 1000000, got 1e-15"},
		{func(c *gateway.Config) { c.Keys[0].Rate = 1e12 }, "keys[0].rate: must be a number of jobs per second from 0.001 to 1000000, got 1e+12"},
		{func(c *gateway.Config) { c.Keys[0].Burst = 1e12 }, "keys[0].burst: must be a whole number from 1 to 1000000, got 1000000000000"},
		{func(c *gateway.Config) { c.Keys[0].Rate, c.Keys[0].Burst = 0.001, 1000 }, "keys[0].burst: 1000 at rate 0.001 takes 277h46m40s to refill (burst/rate): at most 168h (7 days)"},
		{func(c *gateway.Config) { c.Capacity = gateway.Limit{Rate: 1e12, Burst: 1e12} }, "capacity.rate: must be a number of jobs per second from 0.001 to 1000000, got 1e+12"},
		{func(c *gateway.Config) { c.Capacity = gateway.Limit{Rate: 5} }, "capacity.burst: must be a whole number from 1 to 1000000, got 0"},
		{func(c *gateway.Config) { c.Tenants = map[string]gateway.Limit{"acme": {Rate: 1e-15, Burst: 1}} }, "tenants.acme.rate:"},
		{func(c *gateway.Config) { c.Tenants = map[string]gateway.Limit{"nobody": {Rate: 1, Burst: 1}} }, `tenants.nobody: no key of gateway.keys has tenant "nobody"`},
		{func(c *gateway.Config) { c.AuthFailures.Limit = 2e6 }, "auth_failures.limit: must be a whole number from 1 to 1000000, got 2000000"},
		{func(c *gateway.Config) { c.AuthFailures.Window = 48 * time.Hour }, "auth_failures.window: must be from 1s to 24h, got 48h0m0s"},
		{func(c *gateway.Config) { c.PublishTimeout = time.Hour }, "publish_timeout: must be from 100ms to 1m, got 1h0m0s"},
		{func(c *gateway.Config) { c.ReadTimeout = time.Millisecond }, "read_timeout: must be from 1s to 5m, got 1ms"},
		{func(c *gateway.Config) { c.IdleTimeout = 2 * time.Hour }, "idle_timeout: must be from 1s to 1h, got 2h0m0s"},
		{func(c *gateway.Config) { c.IdempotencyTTL = time.Minute }, "idempotency_ttl: must be from 2m to 720h, got 1m0s"},
		{func(c *gateway.Config) { c.Shed.MaxConns = -1 }, "shed.max_conns: must be a whole number from 1 to 1000000, got -1"},
		{func(c *gateway.Config) { c.Shed.MaxConnsPerIP = 2e6 }, "shed.max_conns_per_ip: must be a whole number from 1 to 1000000, got 2000000"},
		{func(c *gateway.Config) { c.Shed.MaxInFlight = 1e6 }, "shed.max_in_flight: must be a whole number from 1 to 100000, got 1000000"},
		{func(c *gateway.Config) { c.Shed.MaxInFlightPerIP = -3 }, "shed.max_in_flight_per_ip: must be a whole number from 1 to 100000, got -3"},
		{func(c *gateway.Config) { c.Shed.MaxPublishLatency = time.Millisecond }, "shed.max_publish_latency: must be from 10ms to publish_timeout (5s), got 1ms"},
		{func(c *gateway.Config) { c.Shed.MaxPublishLatency = 6 * time.Second }, "shed.max_publish_latency: must be from 10ms to publish_timeout (5s), got 6s"},
		{func(c *gateway.Config) { c.Shed.MaxStreamDepth = -1 }, "shed.max_stream_depth: must be a whole number of jobs from 0 (no bound) to 1000000000000, got -1"},
	}
	for _, c := range cases {
		cfg := gateway.Config{Keys: []gateway.Key{{Name: "a", Tenant: "acme", SHA256: h, Rate: 1, Burst: 1}}}
		c.change(&cfg)
		err := cfg.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want %q, got %v", c.want, err)
		}
	}
	// The bounds themselves are allowed.
	cfg := gateway.Config{Keys: []gateway.Key{
		{Name: "slowest", SHA256: h, Rate: gateway.MinRate, Burst: 604},
		{Name: "fastest", SHA256: gateway.HashKey("k2"), Rate: gateway.MaxRate, Burst: gateway.MaxBurst},
	}, Capacity: gateway.Limit{Rate: gateway.MaxRate, Burst: gateway.MaxBurst}}
	if err := cfg.WithDefaults().Validate(); err != nil {
		t.Errorf("the bounds: %v", err)
	}
}

// TestBucketStateIsClampedToTheWindow: a bucket's state further ahead
// than the configuration allows (written under a slower rate, or the
// ~9e18 ms of an overflowed script) is read as an empty bucket that
// refills at the configured rate, and no call writes a key whose expiry
// passes MaxWindow, whatever the limit it is given.
func TestBucketStateIsClampedToTheWindow(t *testing.T) {
	t.Parallel()
	rs := testenv.Redis(t)
	rdb := rs.Client()
	c := ctx(t)
	bk := gateway.Bucket{Key: gateway.BucketKey("clamp:", gateway.KindKey, "k"), Limit: gateway.Limit{Rate: 10, Burst: 5}}
	if err := rdb.Do(c, "SET", bk.Key, "9000000000000000000", "PX", "9000000000000000000").Err(); err != nil {
		t.Fatal(err)
	}
	bs := gateway.NewBuckets(rdb)
	ok, ts, err := bs.Take(c, 1, bk)
	if err != nil || ok || ts[0].Wait > 100*time.Millisecond || ts[0].Reset > 500*time.Millisecond {
		t.Fatalf("a poisoned bucket of rate 10, burst 5: allowed %v %+v %v; want refused, one token in 100 ms, full in 500 ms", ok, ts, err)
	}
	time.Sleep(ts[0].Wait)
	if ok, ts, err := bs.Take(c, 1, bk); err != nil || !ok {
		t.Fatalf("after the wait: %v %+v %v, want the token", ok, ts, err)
	}
	if ttl, err := rdb.PTTL(c, bk.Key).Result(); err != nil || ttl > 2*time.Second {
		t.Fatalf("the healed key expires in %s (%v), want within a second or two", ttl, err)
	}
	// A limit no configuration allows (rate 1e-15, burst 10^6 would be
	// 10^27 µs): taken without overflow, and the key's expiry is clamped.
	absurd := gateway.Bucket{Key: gateway.BucketKey("clamp:", gateway.KindKey, "absurd"), Limit: gateway.Limit{Rate: 1e-15, Burst: 1e6}}
	if ok, _, err := bs.Take(c, 1, absurd); err != nil || !ok {
		t.Fatalf("an absurd limit: %v %v", ok, err)
	}
	if ttl, err := rdb.PTTL(c, absurd.Key).Result(); err != nil || ttl > gateway.MaxWindow+2*time.Second {
		t.Fatalf("an absurd limit left a key expiring in %s (%v), want at most MaxWindow (%s)", ttl, err, gateway.MaxWindow)
	}
}

// TestLegacyHeadersIncludeTheSeedsNames: legacy_headers also sends the
// seed's RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset.
func TestLegacyHeadersIncludeTheSeedsNames(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{Keys: keys(10, 50), LegacyHeaders: true})
	r := b.post(t, acmeKey, smsJob(""))
	for name, want := range map[string]string{"RateLimit-Limit": "50", "RateLimit-Remaining": "49", "RateLimit-Reset": "1"} {
		if got := r.header.Get(name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	r = b.post(t, "wrong-key", smsJob(""))
	if r.header.Get("RateLimit-Limit") != "10" || r.header.Get("RateLimit-Remaining") != "9" {
		t.Errorf("401 legacy fields: %v", r.header)
	}
}

// TestAKeyIsMatchedOnItsWholeHash: a configured hash that equals the
// presented key's SHA-256 in all but one byte (the last, the first, the
// ninth) is no match; only the whole hash is.
func TestAKeyIsMatchedOnItsWholeHash(t *testing.T) {
	t.Parallel()
	const presented = "presented-key-0003"
	sum := sha256.Sum256([]byte(presented))
	near := func(i int) string {
		s := sum
		s[i] ^= 0x01
		return hex.EncodeToString(s[:])
	}
	ks := []gateway.Key{
		{Name: "last-byte", SHA256: near(31), Rate: 100, Burst: 100},
		{Name: "first-byte", SHA256: near(0), Rate: 100, Burst: 100},
		{Name: "ninth-byte", SHA256: near(8), Rate: 100, Burst: 100},
		{Name: "half", SHA256: near(16), Rate: 100, Burst: 100},
		{Name: "whole", SHA256: gateway.HashKey("whole-key"), Rate: 100, Burst: 100},
	}
	b := setup(t, gateway.Config{Keys: ks})
	if r := b.post(t, presented, smsJob("")); r.status != http.StatusUnauthorized {
		t.Fatalf("a key whose hash differs from configured ones in one byte: %d %s, want 401", r.status, r.body)
	}
	if r := b.post(t, "whole-key", smsJob("")); r.status != http.StatusAccepted {
		t.Fatalf("the whole hash: %d %s", r.status, r.body)
	}
}

// TestRetryAfterIsUntilTheBucketHoldsTheRequest: with rate 10 and burst
// 50, an emptied bucket holds 20 jobs in 2 s: Retry-After is at most 2
// (1 once more than a second has passed), not the 5 s until it is full,
// both from Redis (another instance, which never saw the key) and from the
// instance's bound. (TestTakeSteps holds the script to the exact waits on
// a fake clock: 100 ms for one job, where the bucket fills in 5 s.)
func TestRetryAfterIsUntilTheBucketHoldsTheRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{Keys: keys(10, 50)})
	gw2, _ := b.newGateway(t)
	other := serve(t, gw2, b.recording).URL
	jobs := func(n int) string { return "[" + strings.Repeat(smsJob("")+",", n-1) + smsJob("") + "]" }
	twenty := jobs(20)
	start := time.Now()
	if r := b.post(t, acmeKey, jobs(50)); r.status != http.StatusAccepted {
		t.Fatalf("50 jobs: %d %s", r.status, r.body)
	}
	for _, base := range []string{other, b.srv.URL} {
		r := post(t, base, acmeKey, twenty)
		if r.status == http.StatusAccepted && time.Since(start) > 2*time.Second {
			t.Skipf("the requests took %s, more than the 2 s that refill 20 jobs: no verdict", time.Since(start))
		}
		if ra, err := strconv.Atoi(r.header.Get("Retry-After")); r.status != http.StatusTooManyRequests || err != nil || ra > 2 {
			t.Errorf("20 jobs from an emptied rate-10 bucket of 50 via %s: %d Retry-After %q, want 429 and at most 2 (not the 5 s until it is full)",
				base, r.status, r.header.Get("Retry-After"))
		}
	}
}

// TestUnacknowledgedPublishIs503AndShed: a JetStream that receives a
// publish and does not acknowledge it: the request is answered 503 after
// publish_timeout, never 202; while the acknowledgement is late, /readyz
// is not ready and further requests are refused at once (503 overloaded);
// once acknowledgements flow again, requests are accepted.
func TestUnacknowledgedPublishIs503AndShed(t *testing.T) {
	t.Parallel()
	n := testenv.NATS(t)
	proxy := newStallProxy(t, strings.TrimPrefix(n.URL(), "nats://"))
	b := &bundle{nats: n, redis: testenv.Redis(t), natsURL: proxy.URL()}
	b = setupWith(t, b, gateway.Config{PublishTimeout: 500 * time.Millisecond, Shed: gateway.Shed{MaxPublishLatency: 200 * time.Millisecond}})
	if r := b.post(t, acmeKey, smsJob("")); r.status != http.StatusAccepted {
		t.Fatalf("before the stall: %d %s", r.status, r.body)
	}
	proxy.setStall(true)
	start := time.Now()
	r := b.post(t, acmeKey, smsJob(""))
	var p problem
	r.json(t, &p)
	if r.status != http.StatusServiceUnavailable || p.Type != gateway.TypeUnavailable || !strings.Contains(p.Detail, "may have been stored") {
		t.Fatalf("a publish JetStream does not acknowledge: %d %s, want 503 unavailable (a job may have been stored)", r.status, r.body)
	}
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Errorf("answered 503 after %s, before publish_timeout", took)
	}
	// While a publish waits: not ready, and refused at once.
	var wg sync.WaitGroup
	wg.Go(func() { b.post(t, acmeKey, smsJob("")) }) // waits publish_timeout
	testenv.WaitFor(t, 5*time.Second, "the gateway to shed", func() bool {
		r := b.post(t, acmeKey, smsJob(""))
		return r.status == http.StatusServiceUnavailable && strings.Contains(string(r.body), gateway.TypeOverloaded)
	})
	if r := get(t, b.srv.URL+"/readyz"); r.status != http.StatusServiceUnavailable {
		t.Errorf("/readyz while JetStream does not acknowledge: %d %s", r.status, r.body)
	}
	wg.Wait()
	proxy.setStall(false)
	testenv.WaitFor(t, 10*time.Second, "a 202 once acknowledgements flow", func() bool {
		return b.post(t, acmeKey, smsJob("")).status == http.StatusAccepted
	})
	testenv.WaitFor(t, 10*time.Second, "/readyz ready once JetStream acknowledges", func() bool {
		return get(t, b.srv.URL+"/readyz").status == http.StatusOK
	})
}

// TestNATSDownSaysNothingWasPublished: with NATS unreachable nothing is
// sent, and the 503 says so rather than "a job may have been stored".
func TestNATSDownSaysNothingWasPublished(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{})
	b.nats.Stop()
	testenv.WaitFor(t, 10*time.Second, "a 503 for NATS down", func() bool {
		return b.post(t, acmeKey, smsJob("")).status == http.StatusServiceUnavailable
	})
	r := b.post(t, acmeKey, smsJob(""))
	var p problem
	r.json(t, &p)
	if r.status != http.StatusServiceUnavailable || strings.Contains(p.Detail, "may have been stored") || !strings.Contains(p.Detail, "nothing was published") {
		t.Fatalf("NATS down: %d %s, want 503 saying nothing was published", r.status, r.body)
	}
}

// TestAnUnsentJobLeavesItsIDFree: a job NATS refused before it left
// (NATS down: nothing stored) does not keep the id it claimed, nor does an
// array naming one id twice (its second item finds the first's claim, its
// own). Once NATS is back, a retry with the same Idempotency-Key is stored
// and answered 202 as a new job (no "duplicate"), and a retry with a
// corrected body is stored too, not refused 409 for idempotency_ttl.
func TestAnUnsentJobLeavesItsIDFree(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{})
	b.nats.Stop()
	n := 0
	testenv.WaitFor(t, 10*time.Second, "a 503 for NATS down", func() bool {
		n++ // a new id each time: a job stored before the client saw the outage keeps its id
		return b.post(t, acmeKey, smsJob(""), "Idempotency-Key", fmt.Sprintf("probe-%d", n)).status == http.StatusServiceUnavailable
	})
	for _, id := range []string{"order-1", "order-2"} {
		r := b.post(t, acmeKey, smsJob(""), "Idempotency-Key", id)
		if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "nothing was published") {
			t.Fatalf("%s with NATS down: %d %s, want 503 nothing was published", id, r.status, r.body)
		}
		if err := b.rdb.Get(ctx(t), gateway.IDKey(b.prefix, "acme", id)).Err(); err != redis.Nil {
			t.Errorf("%s: the id's record is kept after a 503 that published nothing (%v)", id, err)
		}
	}
	twice := smsJob(`,"id":"order-3"`)
	if r := b.post(t, acmeKey, "["+twice+","+twice+"]"); r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "nothing was published") {
		t.Fatalf("an array naming order-3 twice with NATS down: %d %s, want 503 nothing was published", r.status, r.body)
	}
	if err := b.rdb.Get(ctx(t), gateway.IDKey(b.prefix, "acme", "order-3")).Err(); err != redis.Nil {
		t.Errorf("order-3: the id's record is kept after a 503 that published nothing (%v)", err)
	}
	b.nats.Start()
	testenv.WaitFor(t, 10*time.Second, "a 202 once NATS is back", func() bool {
		return b.post(t, acmeKey, smsJob("")).status == http.StatusAccepted
	})
	for _, c := range []struct{ id, body string }{
		{"order-1", smsJob("")},                      // the same body again
		{"order-2", smsJob(`,"data":{"fixed":"1"}`)}, // a corrected body
		{"order-3", smsJob(`,"id":"order-3","data":{"fixed":"1"}`)},
	} {
		r := b.post(t, acmeKey, c.body, "Idempotency-Key", c.id)
		var a struct {
			ID        string
			Duplicate bool
		}
		if r.status == http.StatusAccepted {
			r.json(t, &a)
		}
		if r.status != http.StatusAccepted || a.ID != c.id || a.Duplicate {
			t.Errorf("%s retried once NATS is back: %d %s, want 202 with the id, not a duplicate", c.id, r.status, r.body)
		}
	}
	in := map[string]int{}
	for _, m := range b.stored(t) {
		in[m.Header.Get(jetstream.MsgIDHeader)]++
	}
	for _, id := range []string{"acme/order-1", "acme/order-2", "acme/order-3"} {
		if in[id] != 1 {
			t.Errorf("job %s is in the stream %d times, want once", id, in[id])
		}
	}
}

// TestInFlightBounds: past max_in_flight requests are refused at once
// (503 overloaded), and past max_in_flight_per_ip those of one client
// while another's pass.
func TestInFlightBounds(t *testing.T) {
	t.Parallel()
	n := testenv.NATS(t)
	proxy := newStallProxy(t, strings.TrimPrefix(n.URL(), "nats://"))
	b := &bundle{nats: n, redis: testenv.Redis(t), natsURL: proxy.URL()}
	b = setupWith(t, b, gateway.Config{PublishTimeout: 3 * time.Second, ClientIPHeader: "X-Forwarded-For",
		Shed: gateway.Shed{MaxInFlight: 3, MaxInFlightPerIP: 2, MaxPublishLatency: 3 * time.Second}})
	proxy.setStall(true) // publishes wait: their requests stay in flight
	var wg sync.WaitGroup
	held := func(client string) {
		wg.Go(func() { b.post(t, acmeKey, smsJob(""), "X-Forwarded-For", client) })
	}
	held("192.0.2.1")
	held("192.0.2.1")
	testenv.WaitFor(t, 10*time.Second, "2 requests in flight", func() bool { return b.gw.InFlight() == 2 })
	overloaded := func(client, want string) {
		t.Helper()
		r := b.post(t, acmeKey, smsJob(""), "X-Forwarded-For", client)
		if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), gateway.TypeOverloaded) || !strings.Contains(string(r.body), want) {
			t.Errorf("client %s: %d %s, want 503 overloaded (%s)", client, r.status, r.body, want)
		}
	}
	overloaded("192.0.2.1", "this address")
	held("192.0.2.2")
	testenv.WaitFor(t, 10*time.Second, "3 requests in flight", func() bool { return b.gw.InFlight() == 3 })
	overloaded("192.0.2.3", "as many requests as it may")
	wg.Wait()
	proxy.setStall(false)
}

// TestSlowBodiesHoldNoRequestSlot: a request whose body is still arriving
// is not in flight: two clients trickling more bodies than max_in_flight
// (and than max_in_flight_per_ip each) make neither another client's
// request nor their own next ones 503, and their slow requests are
// answered once their bodies are in.
func TestSlowBodiesHoldNoRequestSlot(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{ClientIPHeader: "X-Forwarded-For", ReadTimeout: 20 * time.Second,
		Shed: gateway.Shed{MaxInFlight: 2, MaxInFlightPerIP: 1}})
	// The server reads the first 8 KiB of a body before the handler runs:
	// these bodies reach the handler with half of their 20 KiB.
	body := smsJob("") + strings.Repeat(" ", 20<<10)
	head := "POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + acmeKey +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nX-Forwarded-For: "
	half := len(body) / 2
	var slow []*rawConn
	for i := range 4 {
		c, err := dialFrom("127.0.0.1", hostOf(b.srv.URL))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := io.WriteString(c, head+fmt.Sprintf("192.0.2.%d\r\n\r\n", 1+i%2)+body[:half]); err != nil {
			t.Fatal(err)
		}
		slow = append(slow, c)
	}
	for i := range 5 { // over a second: the slow requests have long reached the handler
		time.Sleep(200 * time.Millisecond)
		for _, client := range []string{"192.0.2.9", "192.0.2.1", "192.0.2.2"} {
			if r := b.post(t, acmeKey, smsJob(""), "X-Forwarded-For", client); r.status != http.StatusAccepted {
				t.Fatalf("try %d, client %s beside 2 slow bodies of 192.0.2.1 and 2 of 192.0.2.2: %d %s, want 202", i, client, r.status, r.body)
			}
		}
	}
	for i, c := range slow {
		if _, err := io.WriteString(c, body[half:]); err != nil {
			t.Fatal(err)
		}
		if r := c.read(); r.err != nil || r.status != http.StatusAccepted {
			t.Errorf("slow request %d, its body in: %d %s %v, want 202", i, r.status, r.body, r.err)
		}
	}
}

// TestStreamDepthSheds: past shed.max_stream_depth jobs waiting in the
// stream, requests are refused at once (503 overloaded).
func TestStreamDepthSheds(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{Shed: gateway.Shed{MaxStreamDepth: 3}})
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.gw.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	for range 4 {
		if r := b.post(t, acmeKey, smsJob("")); r.status != http.StatusAccepted {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	testenv.WaitFor(t, 5*time.Second, "a 503 for the stream's depth", func() bool {
		r := b.post(t, acmeKey, smsJob(""))
		return r.status == http.StatusServiceUnavailable && strings.Contains(string(r.body), "the job stream holds")
	})
}

// TestLargeDeclaredBodyIsRefusedAtOnce: a request declaring 5 MiB is
// answered 413 as soon as its headers arrive, not after read_timeout.
func TestLargeDeclaredBodyIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{})
	req := "POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + acmeKey +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(5<<20) + "\r\n\r\n"
	start := time.Now()
	r := rawExchange(hostOf(b.srv.URL), req, 10*time.Second)
	if r.err != nil || r.status != http.StatusRequestEntityTooLarge || !strings.Contains(r.body, gateway.TypeTooLarge) {
		t.Fatalf("a declared 5 MiB body: %d %q %v, want 413 too-large", r.status, r.body, r.err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("answered after %s", took)
	}
}

// TestAMalformedChunkIsAMalformedRequest: a chunk size that is not one
// (hex past 64 bits, a sign, not hex), or a chunked body that ends early,
// is answered 400 malformed-request as SPEC §9 lists it, although the
// handler, not the server, meets it (the body is streamed).
func TestAMalformedChunkIsAMalformedRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{})
	job := `{"user_id":"u1","channel":"sms","to":"+14155550123","body":"hi"}`
	head := "POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + acmeKey +
		"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
	for _, chunks := range []string{
		"ffffffffffffffff1\r\n" + job + "\r\n0\r\n\r\n",
		"-1\r\n" + job + "\r\n0\r\n\r\n",
		"zz\r\n" + job + "\r\n0\r\n\r\n",
		"10\r\n" + job[:16] + "\r\n", // then the connection ends
	} {
		var r rawResponse
		if strings.HasSuffix(chunks, "0\r\n\r\n") {
			r = rawExchange(hostOf(b.srv.URL), head+chunks, 5*time.Second)
		} else {
			r = rawHalfClose(t, hostOf(b.srv.URL), head+chunks)
		}
		if r.status != http.StatusBadRequest || !strings.Contains(r.body, gateway.TypeMalformed) {
			t.Errorf("chunks %q: %d %s, want 400 %s", chunks[:min(len(chunks), 20)], r.status, r.body, gateway.TypeMalformed)
		}
	}
}

// TestChunkedBodyTimingOutIs408: a chunked body that stops arriving is
// answered 408 request-timeout once read_timeout passes, not 400.
func TestChunkedBodyTimingOutIs408(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{ReadTimeout: time.Second})
	req := "POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + acmeKey +
		"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"use\r\n"
	r := rawExchange(hostOf(b.srv.URL), req, 10*time.Second)
	if r.err != nil || r.status != http.StatusRequestTimeout || !strings.Contains(r.body, gateway.TypeRequestTimeout) {
		t.Fatalf("a chunked body that stalls: %d %q %v, want 408 request-timeout", r.status, r.body, r.err)
	}
	if !policyRe.MatchString(r.header.Get("RateLimit-Policy")) || !limitRe.MatchString(r.header.Get("RateLimit")) {
		t.Errorf("the 408 carries RateLimit-Policy %q, RateLimit %q; want the key's (SPEC §9: every answer of the handler)",
			r.header.Get("RateLimit-Policy"), r.header.Get("RateLimit"))
	}
}

// TestTrickledHeadersAreCutAtTheHeaderTimeout: a connection that sends
// its headers a byte at a time, faster than any read deadline between
// bytes but slower than header_timeout as a whole, is answered 408 and
// closed once header_timeout passes, not read_timeout (a connection
// receiving headers is busy: no new one can close it); a body keeps
// read_timeout from the end of the headers.
func TestTrickledHeadersAreCutAtTheHeaderTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{HeaderTimeout: time.Second, ReadTimeout: 20 * time.Second})
	c, err := dialFrom("127.0.0.1", hostOf(b.srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		req := "POST /v1/notifications HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("s", 200)
		for i := range len(req) {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := io.WriteString(c, req[i:i+1]); err != nil {
				return // closed by the server
			}
		}
	})
	r := c.read()
	took := time.Since(start)
	close(stop)
	wg.Wait()
	if r.err != nil || r.status != http.StatusRequestTimeout || !strings.Contains(r.body, gateway.TypeRequestTimeout) {
		t.Fatalf("headers trickled a byte every 50 ms: %d %q %v after %s, want 408 request-timeout", r.status, r.body, r.err, took)
	}
	if took < 900*time.Millisecond || took > 3*time.Second {
		t.Errorf("answered after %s, want about header_timeout (1s)", took)
	}
	if !c.closedByServer() {
		t.Error("the connection was kept after the header timeout")
	}
	t.Logf("trickled headers answered 408 and closed after %s", took.Round(time.Millisecond))

	// Headers at once, the body after more than header_timeout: accepted.
	d, err := dialFrom("127.0.0.1", hostOf(b.srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	req := validRequest(acmeKey)
	cut := strings.Index(req, "\r\n\r\n") + 4
	if _, err := io.WriteString(d, req[:cut]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if r := d.exchange(req[cut:]); r.err != nil || r.status != http.StatusAccepted {
		t.Errorf("a body 1.5 s after its headers (header_timeout 1s, read_timeout 20s): %d %q %v, want 202", r.status, r.body, r.err)
	}
}

// TestNothingSecretInTheLogs sends every malformed kind of request found,
// each carrying a valid key, a phone number and a message, and finds none
// of them in the gateway's log; each is answered with a problem, and each
// the server cannot read is logged, one line (the throttle of a line a
// second per instance would leave most unwritten, and unchecked, on the
// real clock).
func TestNothingSecretInTheLogs(t *testing.T) {
	t.Parallel()
	// A clock a second further at every reading: the malformed-request
	// line, at most one a second, is written for every request.
	var clockMu sync.Mutex
	clock := time.Now()
	b := &bundle{nats: testenv.NATS(t), redis: testenv.Redis(t), deps: func(d *gateway.Deps) {
		d.Now = func() time.Time {
			clockMu.Lock()
			defer clockMu.Unlock()
			clock = clock.Add(time.Second)
			return clock
		}
	}}
	b = setupWith(t, b, gateway.Config{ReadTimeout: time.Second, HeaderTimeout: time.Second})
	const phone, secret = "+15557654321", "Your code is 482910"
	body := `{"user_id":"u1","channel":"sms","to":"` + phone + `","body":"` + secret + `"}`
	auth := "Authorization: Bearer " + acmeKey + "\r\n"
	head := "POST /v1/notifications HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Type: application/json\r\n"
	// server: the server cannot read the request, and its error handler
	// answers and logs it; the others reach the gateway's handler (a body
	// the handler cannot read, or that it reads as valid).
	cases := []struct {
		name, req string
		server    bool
	}{
		{"negative Content-Length", head + "Content-Length: -1\r\n\r\n" + body, true},
		{"NUL in a header", head + "X-Note: a\x00b " + phone + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body, true},
		{"unsupported Transfer-Encoding", head + "Transfer-Encoding: gzip\r\n\r\n" + body, true},
		{"Transfer-Encoding and Content-Length", head + "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n" + body, false},
		{"two Content-Lengths", head + "Content-Length: 3\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body, true},
		{"a header without a colon", head + "X-Phone " + phone + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body, true},
		{"a bad chunk size", head + "Transfer-Encoding: chunked\r\n\r\nzz\r\n" + body + "\r\n0\r\n\r\n", false},
		{"a bad HTTP version", "POST /v1/notifications HTTP/9.9\r\nHost: x\r\n" + auth + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body, false},
		{"an obs-fold continuation", head + "X-Fold: a\r\n " + phone + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body, false},
		{"a huge Content-Length", head + "Content-Length: 99999999999999999999\r\n\r\n" + body, true},
		{"a control character in the target", "POST /v1/notifications?to=" + phone + "\x01 HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body, true},
		{"headers over 16 KiB", head + "X-Pad: " + strings.Repeat("p", 17<<10) + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body, true},
		{"a space before the colon", head + "Authorization : Bearer " + acmeKey + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body, true},
		{"no Host", "POST /v1/notifications HTTP/1.1\r\n" + auth + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body, true},
		{"a body that stops (timeout)", head + "Content-Length: " + strconv.Itoa(len(body)+100) + "\r\n\r\n" + body, true},
		{"a chunked body that stops (timeout)", head + "Transfer-Encoding: chunked\r\n\r\n10\r\n" + body[:16] + "\r\n", false},
		{"a truncated request line", "POST /v1/notifications " + phone + "\r\n" + auth + "\r\n", true},
	}
	statuses := map[string]int{}
	for _, c := range cases {
		before := strings.Count(b.logs.String(), `"msg":"malformed request"`)
		r := rawExchange(hostOf(b.srv.URL), c.req, 5*time.Second)
		statuses[c.name] = r.status
		want := 0
		if c.server {
			want = 1
		}
		if n := strings.Count(b.logs.String(), `"msg":"malformed request"`) - before; n != want {
			t.Errorf("%s: %d malformed-request lines, want %d", c.name, n, want)
		}
		if r.err == nil && r.status >= 400 && !strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("%s: %d with Content-Type %q, want a problem", c.name, r.status, r.header.Get("Content-Type"))
		}
		for _, s := range []string{acmeKey, phone, secret} {
			if strings.Contains(r.body, s) {
				t.Errorf("%s: the answer quotes the request: %s", c.name, r.body)
			}
		}
	}
	t.Logf("answers: %v", statuses)
	logs := b.logs.String()
	for _, s := range []string{acmeKey, phone, secret, "482910", "Bearer"} {
		if strings.Contains(logs, s) {
			t.Errorf("the log holds %q:\n%s", s, logs)
		}
	}
	if !strings.Contains(logs, `"msg":"malformed request"`) {
		t.Errorf("no line for the malformed requests:\n%s", logs)
	}
}

// TestConnectionBounds: at max_conns_per_ip the connection of that
// address idle longest is closed for a new one, and so at max_conns for
// any address; with none idle a new connection is answered 429
// too-many-connections (the address's bound) or 503 overloaded (the
// total) and closed.
func TestConnectionBounds(t *testing.T) {
	t.Parallel()
	n := testenv.NATS(t)
	proxy := newStallProxy(t, strings.TrimPrefix(n.URL(), "nats://"))
	b := &bundle{nats: n, redis: testenv.Redis(t), natsURL: proxy.URL()}
	// header_timeout 1m: the connections opened here wait seconds before
	// their first request, and must not be closed for that meanwhile.
	b = setupWith(t, b, gateway.Config{PublishTimeout: 3 * time.Second, HeaderTimeout: time.Minute,
		Shed: gateway.Shed{MaxConns: 3, MaxConnsPerIP: 1, MaxPublishLatency: 3 * time.Second}})
	addr := hostOf(b.srv.URL)
	dial := func(from string, idle int) *rawConn {
		t.Helper()
		c, err := dialFrom(from, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if idle >= 0 { // accepted, in this order
			testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("%d idle connections", idle), func() bool {
				_, n := b.gw.ConnStats()
				return n == idle
			})
		}
		return c
	}
	a1 := dial("127.0.0.1", 1)
	a2 := dial("127.0.0.1", 1) // over the address's 1: a1, idle, is closed
	if !a1.closedByServer() {
		t.Errorf("the idle connection of the address was not closed for its new one")
	}
	if r := a2.exchange(validRequest(acmeKey)); r.status != http.StatusAccepted {
		t.Errorf("the new connection: %d %v", r.status, r.err)
	}
	// The server counts a2 idle again once it waits for its next request,
	// which can be after the client read the answer: wait for it, so that
	// a2 is idle before bc, as the order below assumes.
	testenv.WaitFor(t, 10*time.Second, "a2 idle again after its answer", func() bool {
		_, n := b.gw.ConnStats()
		return n == 1
	})
	bc := dial("127.0.0.2", 2)
	cc := dial("127.0.0.3", 3)
	dc := dial("127.0.0.4", 3) // over the 3: a2, idle longest, is closed
	if !a2.closedByServer() {
		t.Errorf("the longest-idle connection was not closed for another address's")
	}
	// Busy connections are not closed: with the publishes stalled, three
	// requests in flight hold every connection.
	proxy.setStall(true)
	var wg sync.WaitGroup
	for _, c := range []*rawConn{bc, cc, dc} {
		wg.Go(func() { c.exchange(validRequest(acmeKey)) })
	}
	testenv.WaitFor(t, 10*time.Second, "3 requests in flight", func() bool { return b.gw.InFlight() == 3 })
	r := dial("127.0.0.2", -1).read()
	if r.status != http.StatusTooManyRequests || !strings.Contains(r.body, gateway.TypeTooManyConnections) || r.header.Get("Retry-After") != "1" {
		t.Errorf("another connection of an address whose one is busy: %d %q %v, want 429 too-many-connections", r.status, r.body, r.err)
	}
	r = dial("127.0.0.5", -1).read()
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, gateway.TypeOverloaded) || r.header.Get("Retry-After") != "1" {
		t.Errorf("a connection with every one busy: %d %q %v, want 503 overloaded", r.status, r.body, r.err)
	}
	proxy.setStall(false)
	wg.Wait()
}

// TestARefusedConnectionClosesNoOtherOne: a connection its address's bound
// refuses (its one connection busy) is answered 429 without closing
// another address's idle connection at max_conns: that closing would give
// no one the place, and one address holding its bound of slow requests
// could close every other client's keep-alive connection, one a connect.
func TestARefusedConnectionClosesNoOtherOne(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{HeaderTimeout: time.Minute, ReadTimeout: time.Minute,
		Shed: gateway.Shed{MaxConns: 2, MaxConnsPerIP: 1}})
	addr := hostOf(b.srv.URL)
	dial := func(from string) *rawConn {
		t.Helper()
		c, err := dialFrom(from, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	busy := dial("127.0.0.2") // a body that has not all arrived
	body := `{"user_id":"u1","channel":"sms","to":"+14155550123","body":"hi"}`
	if _, err := io.WriteString(busy, "POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+acmeKey+
		"\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body[:10]); err != nil {
		t.Fatal(err)
	}
	idle := dial("127.0.0.3")
	testenv.WaitFor(t, 10*time.Second, "2 open, 1 idle", func() bool {
		open, idle := b.gw.ConnStats()
		return open == 2 && idle == 1
	})
	if r := dial("127.0.0.2").read(); r.status != http.StatusTooManyRequests {
		t.Fatalf("a second connection of the busy address: %d %v, want 429", r.status, r.err)
	}
	if idle.closedByServer() {
		t.Errorf("another address's idle connection was closed for a connection that was then refused")
	}
	_, _ = io.WriteString(busy, body[10:])
}

// TestIdleConnectionsCannotStopTheGateway: 20,000 idle connections (the
// issue's; GATEWAY_IDLE_CONNS to change it) to a gateway process, with the
// default limit of open files, under `ulimit -n 1024`, and under that
// limit with the gateway told it may open more (so that accept runs out of
// descriptors): the gateway stays up, still answers a valid request with
// 202, and logs the trouble at most once a second. The three run at once
// (each its own processes, servers and addresses), and no other test of
// the package with them.
func TestIdleConnectionsCannotStopTheGateway(t *testing.T) {
	total := 20_000
	if v := os.Getenv(idleConnsEnv); v != "" {
		total, _ = strconv.Atoi(v)
	}
	for si, sc := range []struct {
		name   string
		nofile string
		lie    bool
	}{
		{"default limit", "", false},
		{"ulimit -n 1024", "1024", false},
		{"ulimit -n 1024, accept out of descriptors", "1024", true},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			n := testenv.NATS(t)
			rs := testenv.Redis(t)
			js, err := jetstream.New(n.Conn())
			if err != nil {
				t.Fatal(err)
			}
			if err := queue.EnsureStreams(ctx(t), js, queue.Config{URL: n.URL()}.WithDefaults(), 1); err != nil {
				t.Fatal(err)
			}
			env := []string{childNATSEnv + "=" + n.URL(), childRedisEnv + "=" + rs.Addr(), childNoFile + "=" + sc.nofile,
				childConnsCap + "=" + os.Getenv(childConnsCap)}
			if sc.lie {
				env = append(env, childLieEnv+"=1")
			}
			gw := startChild(t, "gateway", env...)
			var addr string
			var maxConns int
			if _, err := fmt.Sscanf(gw.line(t, 30*time.Second), "listening %s %d", &addr, &maxConns); err != nil {
				t.Fatal(err)
			}
			base := "http://" + addr
			if r := post(t, base, acmeKey, smsJob("")); r.status != http.StatusAccepted {
				t.Fatalf("before: %d %s", r.status, r.body)
			}
			start := time.Now()
			// Holders of 10,000 connections each (a process may open
			// 20,000 files here), from 100 addresses each: 100 an
			// address, shed.max_conns_per_ip, so that the total is the
			// bound reached.
			var holders []*child
			const perHolder = 10_000
			for h, left := 0, total; left > 0; h, left = h+1, left-perHolder {
				var ips []string
				for i := range 100 {
					ips = append(ips, fmt.Sprintf("127.%d.%d.%d", si+1, h+1, i+1))
				}
				holders = append(holders, startChild(t, "holder", childAddrEnv+"="+addr,
					childConnsEnv+"="+strconv.Itoa(min(left, perHolder)), childFromEnv+"="+strings.Join(ips, ",")))
			}
			opened, failed := 0, 0
			for _, h := range holders {
				var o, f int
				if _, err := fmt.Sscanf(h.line(t, 3*time.Minute), "held %d %d", &o, &f); err != nil {
					t.Fatal(err)
				}
				opened, failed = opened+o, failed+f
			}
			t.Logf("%d connections opened (%d failed to connect) in %s; the gateway's max_conns %d; the gateway: %s",
				opened, failed, time.Since(start).Round(time.Millisecond), maxConns, gw.usage())
			if !gw.running() {
				t.Fatalf("the gateway exited: %v\n%s", gw.err, tail(gw.stderr.String(), 3000))
			}
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
			var r *http.Response
			testenv.WaitFor(t, time.Minute, "a valid request answered", func() bool {
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/notifications", strings.NewReader(smsJob("")))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+acmeKey)
				var err error
				r, err = client.Do(req)
				if err != nil {
					return false
				}
				r.Body.Close()
				return r.StatusCode == http.StatusAccepted
			})
			for _, h := range holders {
				if err := h.stop(t, time.Minute); err != nil {
					t.Errorf("holder: %v", err)
				}
			}
			if err := gw.stop(t, 30*time.Second); err != nil {
				t.Fatalf("the gateway: %v\n%s", err, tail(gw.stderr.String(), 3000))
			}
			logs := gw.stderr.String()
			secs := time.Since(start).Seconds()
			for _, what := range []string{"out of file descriptors", "too many connections"} {
				if n := strings.Count(logs, what); float64(n) > secs+2 {
					t.Errorf("%d lines of %q in %.0f s: more than one a second", n, what, secs)
				}
			}
			if sc.lie && !strings.Contains(logs, "out of file descriptors") {
				t.Errorf("accept never ran out of descriptors:\n%s", tail(logs, 2000))
			}
			t.Logf("gateway log: %d lines:\n%s", strings.Count(logs, "\n"), tail(logs, 1500))
		})
	}
}

// TestAPanicIsA500NotAnExit: a panic while answering (here in a
// dependency of /readyz) is answered 500 internal-error and logged; the
// gateway goes on serving.
func TestAPanicIsA500NotAnExit(t *testing.T) {
	t.Parallel()
	b := &bundle{nats: testenv.NATS(t), redis: testenv.Redis(t)}
	b.deps = func(d *gateway.Deps) { d.Ready = func(context.Context) error { panic("a bug") } }
	b = setupWith(t, b, gateway.Config{})
	r := get(t, b.srv.URL+"/readyz")
	if r.status != http.StatusInternalServerError || !strings.Contains(string(r.body), gateway.TypeInternal) {
		t.Fatalf("/readyz panicking: %d %s, want 500 internal-error", r.status, r.body)
	}
	if r := b.post(t, acmeKey, smsJob("")); r.status != http.StatusAccepted {
		t.Fatalf("after the panic: %d %s", r.status, r.body)
	}
	if !strings.Contains(b.logs.String(), "request handling panicked") {
		t.Errorf("no log line for the panic:\n%s", b.logs.String())
	}
}

// TestReadyzFloodAsksTheDependenciesLittle: /readyz is unauthenticated, so
// a flood of it must not become a flood of Redis PINGs and JetStream
// requests: the dependencies are asked at most once per half second.
func TestReadyzFloodAsksTheDependenciesLittle(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	b := &bundle{nats: testenv.NATS(t), redis: testenv.Redis(t)}
	b.deps = func(d *gateway.Deps) {
		ready := d.Ready
		d.Ready = func(ctx context.Context) error { calls.Add(1); return ready(ctx) }
	}
	b = setupWith(t, b, gateway.Config{})
	start := time.Now()
	for range 100 {
		if r := get(t, b.srv.URL+"/readyz"); r.status != http.StatusOK {
			t.Fatalf("/readyz: %d %s", r.status, r.body)
		}
	}
	if most := int64(time.Since(start)/(500*time.Millisecond)) + 1; calls.Load() > most {
		t.Fatalf("100 /readyz in %s asked the dependencies %d times, want at most %d", time.Since(start), calls.Load(), most)
	}
}
