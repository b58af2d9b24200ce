package gateway

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"mime"
	"net/http"
	"net/netip"
	"runtime/debug"
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

// Metrics are the gateway's Prometheus metrics (SPEC §9).
type Metrics struct {
	// Requests counts the answers of POST /v1/notifications by key (a
	// configured key name, or "unauthenticated" without a valid key) and
	// code (the HTTP status). Bounded: the configured keys × the codes.
	Requests *prometheus.CounterVec
}

// NewMetrics makes the metrics and registers them with reg (none when nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "notifier_gateway_requests_total",
		Help: "Requests to POST /v1/notifications by API key name (\"unauthenticated\" without a valid key) and HTTP status code.",
	}, []string{"key", "code"})}
	if reg != nil {
		reg.MustRegister(m.Requests)
	}
	return m
}

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

// limitLog throttles the log lines of a key being limited.
type limitLog struct {
	last    time.Time
	dropped int
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
	for _, t := range sortedTenants(cfg.Tenants) {
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

// readyz is GET /readyz: 503 while NATS is not connected or Redis does
// not answer (Deps.Ready), JetStream does not answer within a second
// (Deps.StreamDepth) or acknowledges the publishes slower than
// shed.max_publish_latency.
func (g *Gateway) readyz(c *fasthttp.RequestCtx) {
	c.SetContentType("text/plain; charset=utf-8")
	why := g.probe()
	if why == "" {
		if l := g.acks.latency(); l > g.cfg.Shed.MaxPublishLatency {
			why = fmt.Sprintf("jetstream: publishes wait %s for their acknowledgement, more than gateway.shed.max_publish_latency %s",
				l.Round(time.Millisecond), g.cfg.Shed.MaxPublishLatency)
		}
	}
	if why != "" {
		c.SetStatusCode(http.StatusServiceUnavailable)
		c.SetBodyString("not ready: " + why + "\n")
		return
	}
	c.SetBodyString("ready\n")
}

// probeEvery is how long a probe of the dependencies answers /readyz: a
// flood of /readyz asks Redis and JetStream at most twice a second.
const probeEvery = 500 * time.Millisecond

// probe asks the dependencies whether they are ready (Deps.Ready, then
// Deps.StreamDepth within a second), at most once per probeEvery: the
// requests meanwhile get the last answer ("" ready, else why not).
func (g *Gateway) probe() string {
	g.probeMu.Lock()
	defer g.probeMu.Unlock()
	if !g.probeAt.IsZero() && time.Since(g.probeAt) < probeEvery {
		return g.probeWhy
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	why := ""
	if g.ready != nil {
		if err := g.ready(ctx); err != nil {
			why = err.Error()
		}
	}
	if why == "" && g.streamDepth != nil {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := g.streamDepth(dctx); err != nil {
			why = "jetstream: " + err.Error()
		}
	}
	g.probeAt, g.probeWhy = time.Now(), why
	return why
}

// answer is what a request gets: status, body (JSON or problem+json).
type answer struct {
	status     int
	body       any
	retryAfter time.Duration // > 0: a Retry-After header, whole seconds ≥ 1
}

// problem is an RFC 9457 problem document.
type problem struct {
	Type    string       `json:"type"`
	Title   string       `json:"title"`
	Status  int          `json:"status"`
	Detail  string       `json:"detail,omitempty"`
	Field   string       `json:"field,omitempty"`
	Rule    string       `json:"rule,omitempty"`
	Items   []itemResult `json:"items,omitempty"`
	Results []itemResult `json:"results,omitempty"`
}

// itemResult is one job of an array: accepted (with its id), or why not.
type itemResult struct {
	Index     int    `json:"index"`
	ID        string `json:"id,omitempty"`
	Status    string `json:"status"` // accepted | invalid | too_large | reused | unavailable
	Duplicate bool   `json:"duplicate,omitempty"`
	Field     string `json:"field,omitempty"`
	Rule      string `json:"rule,omitempty"`
	// unsent: its publish failed before the message left (notSent), so
	// nothing was stored.
	unsent bool
}

// Problem types (relative URI references, RFC 9457).
const (
	TypeQuotaExceeded      = "quota-exceeded"
	TypeOverCapacity       = "over-capacity"
	TypeOverloaded         = "overloaded"
	TypeTooManyConnections = "too-many-connections"
	TypeAuthFailures       = "too-many-auth-failures"
	TypeUnauthorized       = "unauthorized"
	TypePriorityNotAllowed = "priority-not-allowed"
	TypeInvalidJob         = "invalid-job"
	TypeIDReused           = "idempotency-key-reused"
	TypeTooLarge           = "too-large"
	TypeBatchOverBurst     = "batch-exceeds-burst"
	TypeUnsupported        = "unsupported-media-type"
	TypeMalformed          = "malformed-request"
	TypeRequestTimeout     = "request-timeout"
	TypeUnavailable        = "unavailable"
	TypeInternal           = "internal-error"
)

// StatusIDReused is the answer to a job id of the tenant that holds
// another job: 409 Conflict, as the contract (SPEC §9) names it. (The
// idempotency-key draft, draft-ietf-httpapi-idempotency-key-header §2.7,
// suggests 422 for a key reused with another payload and 409 for a request
// still in progress; here a request in progress is simply published again,
// JetStream's duplicate window making the two one job, so 409 has one
// meaning only: this tenant's id names another job.)
const StatusIDReused = http.StatusConflict

func problemOf(status int, typ, title, detail string) *problem {
	return &problem{Type: typ, Title: title, Status: status, Detail: detail}
}

// write sends a and counts it under label.
func (g *Gateway) write(c *fasthttp.RequestCtx, label string, a answer) {
	h := &c.Response.Header
	if a.retryAfter > 0 {
		var buf [20]byte
		h.SetBytesV("Retry-After", strconv.AppendInt(buf[:0], ceilSeconds(a.retryAfter), 10))
	}
	switch body := a.body.(type) {
	case encoded: // pre-encoded problem+json
		h.SetContentType(problemContentType)
		c.SetBody(body)
	case *problem:
		h.SetContentType(problemContentType)
		c.SetBody(mustJSON(body))
	default:
		h.SetContentType(jsonContentType)
		c.SetBody(mustJSON(body))
	}
	h.Set("Cache-Control", "no-store")
	c.SetStatusCode(a.status)
	g.count(label, a.status)
}

// encoded is an answer body already encoded (with its final newline).
type encoded []byte

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil { // cannot happen: plain structs
		b = []byte(`{}`)
	}
	return append(b, '\n')
}

// counted are the status codes whose counters are made up front, per key.
var counted = []int{200, 202, 400, 401, 403, 408, 409, 413, 415, 429, 503}

// count adds one to notifier_gateway_requests_total{key=label,code=status}.
func (g *Gateway) count(label string, status int) {
	if c, ok := g.counters[label][status]; ok {
		c.Inc()
		return
	}
	g.requests.WithLabelValues(label, strconv.Itoa(status)).Inc()
}

// ceilSeconds is d in whole seconds rounded up, at least 1.
func ceilSeconds(d time.Duration) int64 {
	return max(1, int64(math.Ceil(d.Seconds())))
}

// peekHeaders sets the key's rate-limit fields for an answer that took no
// token (a 415, a 413, a 400 before the buckets): one read of its buckets.
func (g *Gateway) peekHeaders(ctx context.Context, h *fasthttp.ResponseHeader, k *apiKey) {
	_, ts, err := g.buckets.Take(ctx, 0, k.buckets...)
	if err != nil {
		return // Redis unreachable: the answer goes without them
	}
	i := tightest(ts)
	g.setBucketHeaders(h, k.chain[i], ts[i])
}

// isJSON reports whether a Content-Type is application/json or a +json type.
func isJSON(ct string) bool {
	if ct == jsonContentType { // the common spelling, without parsing
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == jsonContentType || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// notifications is POST /v1/notifications. The checks go from the
// cheapest to the dearest, so that a refusal costs little and nothing
// reaches Redis that memory can refuse (SPEC §9 lists the order): the
// client IP's block, the key (a hash), for a request without a key the
// requests in flight, the capacity's bound, the platform's slowness, then
// for a request without a key its count in Redis; the priority
// permission, the bounds of the key's buckets, the content type and size,
// the body read, the requests in flight, the jobs counted by a scan, the
// buckets (one Redis round trip); only then is anything decoded, its ids
// claimed and the jobs published.
func (g *Gateway) notifications(c *fasthttp.RequestCtx) {
	ctx := context.Background() // not the request's: a shutdown lets requests in flight finish
	bodyRead := false
	defer func() {
		if !bodyRead {
			if c.Request.Header.ContentLength() > MaxRequestBytes {
				g.declared.Delete(&c.Request.Header) // see headerReceived
			}
			finishUnread(c)
		}
	}()
	ip := g.clientIP(c)
	if left := g.blocked.blockedFor(ip, g.now()); left > 0 {
		g.refuseBlocked(c, left)
		return
	}
	k, ok := g.authenticate(c)
	label := unauthenticatedLabel
	if ok {
		label = k.Name
	}
	if !ok {
		// Without a valid key the body is never read: in flight from here.
		if !g.enterInFlight(c, label, ip) {
			return
		}
		defer g.inflight.leave(ip)
	}
	if g.capacity != nil {
		if t, refused := g.capacity.localRefusal(time.Since(g.base), 1); refused {
			g.refuseByBucket(c, k, label, g.capacity, t, 1)
			return
		}
	}
	if why := g.shedding(); why != "" {
		g.throttledWarn(" shed", "request refused: the platform is slow (503)", "why", why)
		g.write(c, label, answer{status: http.StatusServiceUnavailable, retryAfter: time.Second,
			body: problemOf(http.StatusServiceUnavailable, TypeOverloaded, "Overloaded", why+"; retry after the Retry-After seconds")})
		return
	}
	if !ok {
		g.authFailed(ctx, c, ip)
		return
	}
	high := false
	switch priority := string(c.QueryArgs().Peek("priority")); priority {
	case "", "normal":
	case "high":
		if !k.Priority {
			g.write(c, k.Name, answer{status: http.StatusForbidden,
				body: problemOf(http.StatusForbidden, TypePriorityNotAllowed, "Priority lane not allowed",
					"this key may not use ?priority=high (gateway.keys[].priority); send without it")})
			return
		}
		high = true
	default:
		g.write(c, k.Name, answer{status: http.StatusBadRequest, body: invalidProblem(&queue.InvalidError{Field: "priority", Rule: "must be high or normal"})})
		return
	}
	// A bucket that, as this instance last heard of it, cannot give even
	// one token refuses before the body is read: whatever the request
	// holds, it needs at least that one.
	if i, t := localRefusal(k.chain, time.Since(g.base), 1); i >= 0 {
		g.refuseByBucket(c, k, k.Name, k.chain[i], t, 1)
		return
	}
	h := &c.Response.Header
	if !isJSON(string(c.Request.Header.ContentType())) {
		g.peekHeaders(ctx, h, k)
		g.write(c, k.Name, answer{status: http.StatusUnsupportedMediaType,
			body: problemOf(http.StatusUnsupportedMediaType, TypeUnsupported, "Unsupported media type", "send Content-Type: application/json")})
		return
	}
	tooLarge := func(detail string) {
		g.peekHeaders(ctx, h, k)
		g.write(c, k.Name, answer{status: http.StatusRequestEntityTooLarge,
			body: problemOf(http.StatusRequestEntityTooLarge, TypeTooLarge, "Request too large", detail)})
	}
	if cl := c.Request.Header.ContentLength(); cl > MaxRequestBytes {
		tooLarge(fmt.Sprintf("the body is %d bytes, more than %d", cl, MaxRequestBytes))
		return
	}
	body, err := readBody(c)
	bodyRead = err == nil
	if err != nil {
		var ne interface{ Timeout() bool }
		switch {
		case errors.Is(err, errBodyTooLarge):
			tooLarge(fmt.Sprintf("the body is more than %d bytes", MaxRequestBytes))
		case errors.As(err, &ne) && ne.Timeout():
			c.SetConnectionClose()
			g.write(c, k.Name, answer{status: http.StatusRequestTimeout,
				body: problemOf(http.StatusRequestTimeout, TypeRequestTimeout, "Request timeout",
					fmt.Sprintf("the body did not arrive whole within %s (gateway.read_timeout)", g.cfg.ReadTimeout))})
		default:
			g.write(c, k.Name, answer{status: http.StatusBadRequest,
				body: problemOf(http.StatusBadRequest, TypeInvalidJob, "Unreadable body", "the body could not be read")})
		}
		return
	}
	// A keyed request counts in flight once its body is read: the bound
	// protects what waits on the platform (Redis, JetStream), and a body
	// still arriving waits on the client only (read_timeout and the
	// connection bounds hold it), so slow uploads cannot fill the bound.
	if !g.enterInFlight(c, k.Name, ip) {
		return
	}
	defer g.inflight.leave(ip)
	n, array, err := countJobs(body)
	smallest := k.chain[0]
	for _, b := range k.chain {
		if b.Burst < smallest.Burst {
			smallest = b
		}
	}
	switch {
	case err != nil:
		g.peekHeaders(ctx, h, k)
		g.write(c, k.Name, answer{status: http.StatusBadRequest, body: invalidProblem(&queue.InvalidError{Rule: err.Error()})})
		return
	case !array && len(body) > queue.MaxJobBytes:
		tooLarge(fmt.Sprintf("the job is %d bytes, more than %d", len(body), queue.MaxJobBytes))
		return
	case array && n > MaxBatch:
		tooLarge(fmt.Sprintf("more than %d jobs in one request", MaxBatch))
		return
	case n == 0:
		g.peekHeaders(ctx, h, k)
		g.write(c, k.Name, answer{status: http.StatusBadRequest, body: invalidProblem(&queue.InvalidError{Rule: "an empty array: send at least one job"})})
		return
	case n > smallest.Burst:
		g.peekHeaders(ctx, h, k)
		g.write(c, k.Name, answer{status: http.StatusRequestEntityTooLarge,
			body: problemOf(http.StatusRequestEntityTooLarge, TypeBatchOverBurst, "Batch larger than the burst",
				fmt.Sprintf("%d jobs in one request, more than the burst of %d of this key's %s bucket: they could never be accepted at once; send at most %d per request",
					n, smallest.Burst, smallest.kind, smallest.Burst))})
		return
	}
	var idem string
	if v := c.Request.Header.PeekAll("Idempotency-Key"); len(v) > 0 {
		idem = string(v[0])
		if rule := checkIdempotencyKey(idem, array); rule != "" {
			g.peekHeaders(ctx, h, k)
			g.write(c, k.Name, answer{status: http.StatusBadRequest, body: invalidProblem(&queue.InvalidError{Field: "Idempotency-Key", Rule: rule})})
			return
		}
	}

	taken, b, t, err := g.take(ctx, k, n)
	if err != nil {
		g.throttledWarn(" redis", "key's buckets not reachable: answered 503", "key", k.Name, "err", err)
		g.write(c, k.Name, answer{status: http.StatusServiceUnavailable, retryAfter: time.Second,
			body: problemOf(http.StatusServiceUnavailable, TypeUnavailable, "Service unavailable", "the limit store cannot be reached; retry later")})
		return
	}
	if !taken {
		g.refuseByBucket(c, k, k.Name, b, t, n)
		return
	}
	g.setBucketHeaders(h, b, t)
	g.accept(ctx, c, k, body, array, idem, high)
}

// enterInFlight counts a request of ip in flight (leave must follow), or
// answers it 503 overloaded at max_in_flight or max_in_flight_per_ip and
// reports false.
func (g *Gateway) enterInFlight(c *fasthttp.RequestCtx, label string, ip netip.Addr) bool {
	bound, ok := g.inflight.enter(ip)
	if ok {
		return true
	}
	detail := "the gateway is handling as many requests as it may"
	if bound == "per_ip" {
		detail = "this address has as many requests in flight as it may"
	}
	g.throttledWarn(" inflight", "request refused: too many in flight (503)", "bound", bound)
	g.write(c, label, answer{status: http.StatusServiceUnavailable, retryAfter: time.Second,
		body: problemOf(http.StatusServiceUnavailable, TypeOverloaded, "Overloaded", detail+"; retry after the Retry-After seconds")})
	return false
}

// refuseByBucket answers a request of n jobs that bucket b refused (t):
// 429 quota-exceeded for a key's or a tenant's bucket, 503 over-capacity
// for the capacity's, with Retry-After and b's RateLimit fields. k is nil
// for a request refused before its key was known.
func (g *Gateway) refuseByBucket(c *fasthttp.RequestCtx, k *apiKey, label string, b *bucket, t Take, n int) {
	g.setBucketHeaders(&c.Response.Header, b, t)
	status := http.StatusTooManyRequests
	if b.kind == KindCapacity {
		status = http.StatusServiceUnavailable
	}
	if k != nil {
		k.limitedLine(g, b, t.Wait)
		k.rejected.Add(1)
	} else {
		g.rejected.add(unauthenticatedLabel)
	}
	var body any = b.refused
	if n > 1 {
		body = b.refusal(n, t.Remaining)
	}
	g.write(c, label, answer{status: status, retryAfter: t.Wait, body: body})
}

// invalidProblem is the 400 of an invalid job, naming the field and rule.
func invalidProblem(ie *queue.InvalidError) *problem {
	p := problemOf(http.StatusBadRequest, TypeInvalidJob, "Invalid job", ie.Error())
	p.Field, p.Rule = ie.Field, ie.Rule
	return p
}

// limitedLine logs that k is being limited by b: at most one line per key
// per minute (per instance), with the rejections since the previous line.
// Lock-free: it is on the 429 path.
func (k *apiKey) limitedLine(g *Gateway, b *bucket, wait time.Duration) {
	n := k.limitedSince.Add(1)
	now := int64(time.Since(g.base))
	last := k.lastLimitLog.Load()
	if last != 0 && now-last < int64(time.Minute) || !k.lastLimitLog.CompareAndSwap(last, max(now, 1)) {
		return
	}
	k.limitedSince.Add(-n)
	g.log.Info("api key limited", "key", k.Name, "bucket", b.kind, "rejected", n, "retry_after", wait.Round(time.Millisecond))
}

// throttledWarn logs a warning at most once a second per what.
func (g *Gateway) throttledWarn(what, msg string, args ...any) {
	if n, ok := g.throttle(what, time.Second); ok {
		g.log.Warn(msg, append(args, "occurrences", n)...)
	}
}

// throttle reports whether a line for what may be written now (at most one
// per every), and how many occurrences it stands for.
func (g *Gateway) throttle(what string, every time.Duration) (int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	l := g.limited[what]
	if l == nil {
		l = &limitLog{}
		g.limited[what] = l
	}
	if !l.last.IsZero() && now.Sub(l.last) < every {
		l.dropped++
		return 0, false
	}
	n := l.dropped + 1
	l.last, l.dropped = now, 0
	return n, true
}
