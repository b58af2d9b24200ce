package gateway

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
	"go.opentelemetry.io/otel/trace"

	"github.com/notifier/notifier/queue"
)

// Deps are what a Gateway works with.
type Deps struct {
	// Redis holds the buckets, the failed-authentication counts and the
	// records of client-chosen job ids (standalone, Sentinel or Cluster).
	Redis redis.Scripter
	// KeyPrefix is redis.key_prefix ("notifier:").
	KeyPrefix string
	// Publisher publishes the jobs; its connection should not buffer
	// while disconnected (nats.ReconnectBufSize(-1)), so that a request
	// during an outage is answered 503 at once.
	Publisher *queue.Publisher
	// Ready answers /readyz (nil: always ready): NATS connected, Redis
	// reachable.
	Ready func(ctx context.Context) error
	// StreamDepth, when set, returns how many jobs the job stream holds:
	// Run reads it every second for shed.max_stream_depth, and /readyz
	// asks it (JetStream must answer within a second to be ready).
	StreamDepth func(ctx context.Context) (int64, error)
	// Registerer takes the gateway's metrics; Gatherer, when set, is
	// served at /metrics.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// Tracer, when set (tracing.otlp_endpoint), records a span
	// "notifier.gateway.accept" per accepted request, the child of its
	// traceparent (a new trace without one), and the jobs carry that
	// span's context. Nil: the jobs carry the request's traceparent, or a
	// new one, and nothing is recorded.
	Tracer trace.TracerProvider
	// Logger gets an info line per key per minute while the key is
	// limited, and publish failures, malformed requests, refused
	// connections (each at most once a second). Nil: slog.Default().
	Logger *slog.Logger
	// Now is the clock of the log throttle and the hourly rejection
	// counts (nil: time.Now). The limits run on the Redis clock.
	Now func() time.Time
	// NoFile is the process's limit of open files (nil: RLIMIT_NOFILE):
	// shed.max_conns is lowered to it less FDReserve.
	NoFile func() (int, error)
}

// apiKey is a configured key with its hash decoded.
type apiKey struct {
	Key
	hash []byte
	// chain are the buckets a request of this key takes from: the
	// capacity's, its tenant's, its own, as configured (its own last);
	// buckets are their Redis forms (buckets[i] is chain[i]'s), made once.
	chain   []*bucket
	buckets []Bucket

	rejected     atomic.Int64 // 429s not yet added to Redis (Run)
	lastLimitLog atomic.Int64 // ns since Gateway.base of the last "api key limited" line; 0 none
	limitedSince atomic.Int64 // 429s since that line
}

func keyNames(keys []Key) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.Name
	}
	return out
}

// Gateway is the HTTP intake (see the package doc). Handle serves its
// requests (Server is a fasthttp server for it, Serve serves it within
// the connection bounds), safe for concurrent use; Run flushes its
// rejection counts to Redis and reads the stream's depth. The zero value
// is not usable: call New.
type Gateway struct {
	cfg         Config
	keys        []apiKey
	capacity    *bucket // nil: no gateway.capacity
	buckets     *Buckets
	rdb         redis.Scripter
	prefix      string
	pub         *queue.Publisher
	ready       func(context.Context) error
	streamDepth func(context.Context) (int64, error)
	log         *slog.Logger
	now         func() time.Time
	metrics     fasthttp.RequestHandler // GET /metrics; nil: not served
	tracer      trace.Tracer            // nil: tracing off
	requests    *prometheus.CounterVec
	counters    map[string]map[int]prometheus.Counter // the counters of counted, by key label and code (read only)
	rejected    *rejections
	authPolicy  string // the "auth" RateLimit-Policy

	maxConns int // shed.max_conns, lowered to the descriptors the process may open
	inflight inflight
	acks     *ackMeter
	depth    atomic.Int64 // the job stream's depth as Run last read it
	blocked  blocklist

	connsMu  sync.Mutex
	conns    []*connLimiter // Serve's listeners
	declared sync.Map       // *fasthttp.RequestHeader → its Content-Length over MaxRequestBytes (headerReceived)

	mu      sync.Mutex
	limited map[string]*limitLog // by key name, or " redis", " publish" (a space: never a key name)

	probeMu  sync.Mutex
	probeAt  time.Time // of the last probe of the dependencies (readyz)
	probeWhy string    // its answer: "" ready

	base time.Time // the origin of bucket.fullAt, with its monotonic reading
}

// New checks cfg (with defaults applied) and returns the gateway.
func New(cfg Config, d Deps) (*Gateway, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gateway configuration: %w", err)
	}
	if d.Redis == nil || d.Publisher == nil {
		return nil, errors.New("gateway: Redis and Publisher are required")
	}
	g := &Gateway{
		cfg:         cfg,
		buckets:     NewBuckets(d.Redis),
		rdb:         d.Redis,
		prefix:      d.KeyPrefix,
		pub:         d.Publisher,
		ready:       d.Ready,
		streamDepth: d.StreamDepth,
		log:         d.Logger,
		tracer:      tracerOf(d.Tracer),
		now:         d.Now,
		limited:     map[string]*limitLog{},
		base:        time.Now(),
	}
	if g.log == nil {
		g.log = slog.Default()
	}
	if g.now == nil {
		g.now = time.Now
	}
	g.acks = newAckMeter(g.base)
	g.inflight = inflight{max: cfg.Shed.MaxInFlight, perIP: cfg.Shed.MaxInFlightPerIP, byIP: map[netip.Addr]int{}}
	g.authPolicy = fmt.Sprintf(`"auth";q=%d;w=%d`, cfg.AuthFailures.Limit, ceilSeconds(cfg.AuthFailures.Window))
	g.maxConns = cfg.Shed.MaxConns
	nofile := d.NoFile
	if nofile == nil {
		nofile = openFileLimit
	}
	if n, err := nofile(); err == nil && n-FDReserve < g.maxConns {
		g.maxConns = max(1, n-FDReserve)
		g.log.Info("gateway.shed.max_conns lowered to what the process may open", "max_conns", g.maxConns,
			"configured", cfg.Shed.MaxConns, "open_files_limit", n, "reserved", FDReserve)
	}
	g.rejected = &rejections{rdb: d.Redis, prefix: d.KeyPrefix, now: g.now, counts: map[string]int64{}}
	if cfg.Capacity != (Limit{}) {
		g.capacity = newBucket(d.KeyPrefix, KindCapacity, "", cfg.Capacity)
	}
	tenants := map[string]*bucket{}
	for _, t := range slices.Sorted(maps.Keys(cfg.Tenants)) {
		tenants[t] = newBucket(d.KeyPrefix, KindTenant, t, cfg.Tenants[t])
	}
	g.keys = make([]apiKey, len(cfg.Keys))
	for i, k := range cfg.Keys {
		h, err := hex.DecodeString(strings.ToLower(k.SHA256))
		if err != nil {
			return nil, fmt.Errorf("gateway key %s: sha256: %w", k.Name, err)
		}
		ak := &g.keys[i]
		ak.Key, ak.hash = k, h
		if g.capacity != nil {
			ak.chain = append(ak.chain, g.capacity)
		}
		if tb, ok := tenants[k.Tenant]; ok && k.Tenant != "" {
			ak.chain = append(ak.chain, tb)
		}
		ak.chain = append(ak.chain, newBucket(d.KeyPrefix, KindKey, k.Name, Limit{Rate: k.Rate, Burst: k.Burst}))
		for _, b := range ak.chain {
			ak.buckets = append(ak.buckets, b.Bucket)
		}
	}
	g.requests = NewMetrics(nil).Requests
	g.counters = map[string]map[int]prometheus.Counter{}
	for _, label := range append([]string{unauthenticatedLabel}, keyNames(cfg.Keys)...) {
		g.counters[label] = map[int]prometheus.Counter{}
		for _, code := range counted {
			g.counters[label][code] = g.requests.WithLabelValues(label, strconv.Itoa(code))
		}
	}
	if d.Registerer != nil {
		if err := d.Registerer.Register(g.requests); err != nil {
			return nil, fmt.Errorf("register gateway metrics: %w", err)
		}
	}
	if d.Gatherer != nil {
		g.metrics = fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(d.Gatherer, promhttp.HandlerOpts{}))
	}
	return g, nil
}

// MaxConns is shed.max_conns as Serve enforces it: lowered to what the
// process may open (RLIMIT_NOFILE less FDReserve) when that is less.
func (g *Gateway) MaxConns() int { return g.maxConns }

// Handle answers one request: the routes of the package doc, 404 for any
// other path and 405 (with Allow) for another method. A panic while
// answering is answered 500 and logged (never with the request's
// content): no request ends the process.
func (g *Gateway) Handle(c *fasthttp.RequestCtx) {
	defer g.recoverPanic(c)
	defer func() {
		// On every route: the server reuses the request's headers (and their
		// address, the key of g.declared) for the next request it reads.
		if c.Request.Header.ContentLength() > MaxRequestBytes {
			g.declared.Delete(&c.Request.Header) // see headerReceived
		}
	}()
	var allow string
	switch string(c.Path()) {
	case "/v1/notifications":
		if allow = fasthttp.MethodPost; c.IsPost() {
			g.notifications(c)
			return
		}
	case "/healthz":
		if allow = "GET, HEAD"; c.IsGet() || c.IsHead() {
			c.SetContentType("text/plain; charset=utf-8")
			c.SetBodyString("ok\n")
			return
		}
	case "/readyz":
		if allow = "GET, HEAD"; c.IsGet() || c.IsHead() {
			g.readyz(c)
			return
		}
	case "/openapi.json":
		if allow = "GET, HEAD"; c.IsGet() || c.IsHead() {
			c.SetContentType(jsonContentType)
			c.SetBody(OpenAPI)
			return
		}
	case "/metrics":
		if g.metrics == nil {
			break
		}
		if allow = "GET, HEAD"; c.IsGet() || c.IsHead() {
			g.metrics(c)
			return
		}
	}
	c.SetContentType("text/plain; charset=utf-8")
	if allow == "" {
		c.SetStatusCode(http.StatusNotFound)
		c.SetBodyString("404 page not found\n")
		return
	}
	c.Response.Header.Set("Allow", allow)
	c.SetStatusCode(http.StatusMethodNotAllowed)
	c.SetBodyString("method not allowed\n")
}

// recoverPanic answers 500 to a request whose handling panicked.
func (g *Gateway) recoverPanic(c *fasthttp.RequestCtx) {
	v := recover()
	if v == nil {
		return
	}
	g.throttledWarn(" panic", "request handling panicked: answered 500", "method", knownMethod(c.Method()), "path", route(c.Path()),
		"panic", fmt.Sprintf("%T", v), "stack", string(debug.Stack()))
	c.Response.Reset()
	c.SetConnectionClose()
	c.Response.Header.SetContentType(problemContentType)
	c.Response.Header.Set("Cache-Control", "no-store")
	c.SetStatusCode(http.StatusInternalServerError)
	c.SetBody(mustJSON(problemOf(http.StatusInternalServerError, TypeInternal, "Internal error", "the gateway failed to answer; retry later")))
}

// Run, until ctx ends, adds the rejections counted here to Redis every
// few seconds (for `notifier top --gateway`), then once more, and reads
// the job stream's depth every second (Deps.StreamDepth). It returns nil
// once stopped; a failed flush or read is logged and retried at the next.
func (g *Gateway) Run(ctx context.Context) error {
	flush := time.NewTicker(5 * time.Second)
	defer flush.Stop()
	depth := time.NewTicker(depthEvery)
	defer depth.Stop()
	g.readDepth(ctx)
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			g.gatherRejections()
			if err := g.rejected.flush(fctx); err != nil {
				g.log.Warn("gateway rejections not counted", "err", err)
			}
			return nil
		case <-depth.C:
			g.readDepth(ctx)
		case <-flush.C:
			g.gatherRejections()
			if err := g.rejected.flush(ctx); err != nil && ctx.Err() == nil {
				g.log.Warn("gateway rejections not counted", "err", err)
			}
		}
	}
}

// gatherRejections moves the keys' 429 counts into the counts to flush.
func (g *Gateway) gatherRejections() {
	for i := range g.keys {
		if n := g.keys[i].rejected.Swap(0); n > 0 {
			g.rejected.addN(g.keys[i].Name, n)
		}
	}
}
