package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/notifier/notifier/gateway"
	"github.com/notifier/notifier/internal/localenv"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// TestMain checks goroutine leaks and, after every test, that each answer
// any test's gateway gave is documented in openapi.json.
func TestMain(m *testing.M) {
	if role := os.Getenv(childRoleEnv); role != "" {
		os.Exit(runChild(role)) // a gateway or a connection holder of TestIdleConnectionsCannotStopTheGateway
	}
	code := m.Run()
	if code == 0 {
		if bad := undocumentedAnswers(allSeen); len(bad) > 0 {
			fmt.Fprintf(os.Stderr, "answers given in the tests but not documented in openapi.json: %v\n", bad)
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(testenv.FastHTTP...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// The keys the tests use, and their configured form.
const (
	acmeKey  = "acme-secret-key-0001"
	otherKey = "other-secret-key-0002"
)

// bundle is one test's private NATS and Redis and a gateway on them.
type bundle struct {
	nats    *testenv.NATSServer
	redis   *testenv.RedisServer
	rdb     *redis.Client
	js      jetstream.JetStream
	cfg     gateway.Config
	deps    func(*gateway.Deps) // newGateway's changes to the Deps, when set
	natsURL string              // newGateway's NATS (a proxy), when not the server's
	prefix  string
	reg     *prometheus.Registry
	gw      *gateway.Gateway
	srv     *server
	logs    *localenv.Buffer
	seen    *statusLog
	tracer  trace.TracerProvider // newGateway's (nil: tracing off)
}

// statusLog records every (method path, status) a test's servers answered,
// for the OpenAPI test.
type statusLog struct {
	mu   sync.Mutex
	seen map[string]map[int]http.Header
}

func (s *statusLog) record(op string, status int, h http.Header) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[op] == nil {
		s.seen[op] = map[int]http.Header{}
	}
	s.seen[op][status] = h.Clone()
}

func keys(rate float64, burst int) []gateway.Key {
	return []gateway.Key{
		{Name: "acme-app", Tenant: "acme", SHA256: gateway.HashKey(acmeKey), Rate: rate, Burst: burst, Priority: true},
		{Name: "default-app", SHA256: gateway.HashKey(otherKey), Rate: rate, Burst: burst},
	}
}

// setup starts NATS (with the streams) and Redis and a gateway configured
// by cfg (its keys: keys(100, 100) when none).
func setup(t *testing.T, cfg gateway.Config) *bundle {
	t.Helper()
	return setupWith(t, &bundle{nats: testenv.NATS(t), redis: testenv.Redis(t)}, cfg)
}

// setupWith is setup on b's servers (and b.natsURL, b.deps when set).
func setupWith(t *testing.T, b *bundle, cfg gateway.Config) *bundle {
	t.Helper()
	b.prefix, b.logs = "gwtest:", &localenv.Buffer{}
	b.seen = &statusLog{seen: map[string]map[int]http.Header{}}
	b.rdb = b.redis.Client()
	js, err := jetstream.New(b.nats.Conn())
	if err != nil {
		t.Fatal(err)
	}
	b.js = js
	qcfg := queue.Config{URL: b.nats.URL()}.WithDefaults()
	if err := queue.EnsureStreams(ctx(t), js, qcfg, 1); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Keys) == 0 {
		cfg.Keys = keys(100, 100)
	}
	b.cfg = cfg
	b.gw, b.reg = b.newGateway(t)
	b.srv = serve(t, b.gw, b.recording)
	return b
}

// setupB is setup for a benchmark: the gateway alone.
func setupB(tb *testing.B, cfg gateway.Config) *gateway.Gateway {
	n := testenv.NATS(tb)
	rs := testenv.Redis(tb)
	js, err := jetstream.New(n.Conn())
	if err != nil {
		tb.Fatal(err)
	}
	if err := queue.EnsureStreams(tb.Context(), js, queue.Config{URL: n.URL()}.WithDefaults(), 1); err != nil {
		tb.Fatal(err)
	}
	gw, err := gateway.New(cfg, gateway.Deps{Redis: rs.Client(), KeyPrefix: "gwbench:", Publisher: queue.NewPublisher(js),
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatal(err)
	}
	return gw
}

// newGateway is one more gateway instance on the bundle's NATS and Redis
// (its own connections), as another process would be.
func (b *bundle) newGateway(t *testing.T) (*gateway.Gateway, *prometheus.Registry) {
	t.Helper()
	nc := b.nats.Conn(nats.ReconnectBufSize(-1))
	if b.natsURL != "" {
		var err error
		if nc, err = nats.Connect(b.natsURL, append(b.nats.ConnOptions(), nats.ReconnectBufSize(-1))...); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	rdb := b.redis.Client()
	reg := prometheus.NewRegistry()
	deps := gateway.Deps{
		Redis: rdb, KeyPrefix: b.prefix, Publisher: queue.NewPublisher(js),
		Ready: func(ctx context.Context) error {
			if !nc.IsConnected() {
				return fmt.Errorf("nats: %s", nc.Status())
			}
			return rdb.Ping(ctx).Err()
		},
		StreamDepth: func(ctx context.Context) (int64, error) {
			s, err := js.Stream(ctx, "NOTIFY")
			if err != nil {
				return 0, err
			}
			return int64(s.CachedInfo().State.Msgs), nil
		},
		Registerer: reg, Gatherer: reg,
		Tracer: b.tracer,
		Logger: slog.New(slog.NewJSONHandler(b.logs, nil)),
	}
	if b.deps != nil {
		b.deps(&deps)
	}
	gw, err := gateway.New(b.cfg, deps)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	return gw, reg
}

// recording records each answer of h in b.seen and allSeen.
func (b *bundle) recording(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(c *fasthttp.RequestCtx) {
		h(c)
		hdr := http.Header{}
		for k, v := range c.Response.Header.All() {
			hdr.Add(string(k), string(v))
		}
		op := string(c.Method()) + " " + string(c.Path())
		b.seen.record(op, c.Response.StatusCode(), hdr)
		allSeen.record(op, c.Response.StatusCode(), hdr)
	}
}

// server is a gateway served on a loopback port, the way `notifier
// gateway` serves it (Gateway.Server).
type server struct {
	URL string // http://127.0.0.1:<port>
}

// serve serves gw (its handler wrapped by wrap, when set) until the test
// ends.
func serve(t *testing.T, gw *gateway.Gateway, wrap func(fasthttp.RequestHandler) fasthttp.RequestHandler) *server {
	t.Helper()
	srv := gw.Server()
	if wrap != nil {
		srv.Handler = wrap(srv.Handler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- gw.Serve(srv, ln) }()
	t.Cleanup(func() {
		if err := srv.Shutdown(); err != nil {
			t.Errorf("gateway server shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("gateway server: %v", err)
		}
	})
	return &server{URL: "http://" + ln.Addr().String()}
}

// allSeen gathers every answer of every test's gateway, for the OpenAPI
// test, which runs last.
var allSeen = &statusLog{seen: map[string]map[int]http.Header{}}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// response is an answer, its body read.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("answer %d body %q: %v", r.status, r.body, err)
	}
}

// problem is a decoded problem+json.
type problem struct {
	Type    string           `json:"type"`
	Status  int              `json:"status"`
	Detail  string           `json:"detail"`
	Field   string           `json:"field"`
	Rule    string           `json:"rule"`
	Items   []map[string]any `json:"items"`
	Results []map[string]any `json:"results"`
}

// post sends body to POST /v1/notifications with key (none when "") and
// extra headers (name, value pairs).
func (b *bundle) post(t *testing.T, key, body string, hdr ...string) response {
	t.Helper()
	return post(t, b.srv.URL, key, body, hdr...)
}

func post(t *testing.T, base, key, body string, hdr ...string) response {
	t.Helper()
	return postURL(t, base+"/v1/notifications", key, body, hdr...)
}

// postURL is post to a URL of POST /v1/notifications (with a query).
func postURL(t *testing.T, url, key, body string, hdr ...string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

// smsJob is a valid job as JSON, with extra members appended.
func smsJob(extra string) string {
	return `{"user_id":"u1","channel":"sms","to":"+14155550123","body":"your code is 123456"` + extra + `}`
}

// stored fetches every job of the NOTIFY stream (without consuming them).
func (b *bundle) stored(t *testing.T) []*jetstream.RawStreamMsg {
	t.Helper()
	s, err := b.js.Stream(ctx(t), "NOTIFY")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx(t), seq)
		if err != nil {
			continue // deleted
		}
		out = append(out, m)
	}
	return out
}

// queueOf is the queue a stored job is in, as the subject of its tenant's
// own queue: a tenant's job is published on a fair lane (SPEC §2) naming
// its tenant in the Notifier-Tenant header, mapped back here so that a test
// can name the tenant's queue.
func queueOf(t *testing.T, m *jetstream.RawStreamMsg) string {
	t.Helper()
	k, ok := queue.ParseJobSubject(m.Subject)
	if !ok || !k.Fair {
		return m.Subject
	}
	tenant := m.Header.Get(queue.HeaderTenant)
	if tenant == "" {
		t.Errorf("a job on fair lane %s names no tenant in %s", m.Subject, queue.HeaderTenant)
	}
	return queue.KeyFor(k.Channel, tenant, k.High, k.Category).Subject()
}

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return c, cancel
}

func get(t *testing.T, url string) response {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

// hammer runs workers goroutines, each calling do(w) again and again for
// d (or until do returns false), and returns how long it took.
func hammer(d time.Duration, workers int, do func(w int) bool) time.Duration {
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for time.Now().Before(deadline) && do(w) {
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// hammerPosts runs hammer with workers posting do(w) for d and counts the
// answers by status. An answer of a status want does not name fails the
// test and stops its worker; one it names goes to its function when not
// nil, whose false stops the worker.
func hammerPosts(t *testing.T, d time.Duration, workers int, do func(w int) response, want map[int]func(w int, r response) bool) (map[int]int64, time.Duration) {
	t.Helper()
	counts := map[int]*atomic.Int64{}
	for status := range want {
		counts[status] = &atomic.Int64{}
	}
	elapsed := hammer(d, workers, func(w int) bool {
		r := do(w)
		check, ok := want[r.status]
		if !ok {
			t.Errorf("answer %d %s", r.status, r.body)
			return false
		}
		counts[r.status].Add(1)
		return check == nil || check(w, r)
	})
	out := map[int]int64{}
	for status, n := range counts {
		out[status] = n.Load()
	}
	return out, elapsed
}

// checkAccepted fails the test unless accepted is within what a bucket of
// rate and burst gives in elapsed: from burst to burst + rate·elapsed.
func checkAccepted(t *testing.T, accepted int64, rate float64, burst int64, elapsed time.Duration) {
	t.Helper()
	if bound := burst + int64(rate*elapsed.Seconds()) + 1; accepted > bound || accepted < burst {
		t.Fatalf("%d accepted in %s, want from %d to burst + rate·t = %d", accepted, elapsed, burst, bound)
	}
}
