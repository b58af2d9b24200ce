package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
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
	// Redis holds the keys' buckets and the failed-authentication counts
	// (standalone, Sentinel or Cluster).
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
	// limited, and publish failures. Nil: slog.Default().
	Logger *slog.Logger
	// Now is the clock of the log throttle and the hourly rejection
	// counts (nil: time.Now). The limits run on the Redis clock.
	Now func() time.Time
}

// apiKey is a configured key with its hash decoded.
type apiKey struct {
	Key
	hash []byte
	// fullAt is a lower bound of when the key's bucket is full again, in
	// ns on the gateway's monotonic clock (since Gateway.base): the
	// bucket's state only moves later as tokens are taken, so a request
	// this bound already refuses is refused without asking Redis.
	fullAt atomic.Int64

	rejected     atomic.Int64 // 429s not yet added to Redis (Run)
	lastLimitLog atomic.Int64 // ns since Gateway.base of the last "api key limited" line; 0 none
	limitedSince atomic.Int64 // 429s since that line

	limited     encoded // the 429 body of one job over the limit
	policy      string  // RateLimit-Policy
	legacyLimit string  // X-RateLimit-Limit
}

func keyNames(keys []Key) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.Name
	}
	return out
}

// Gateway is the HTTP intake (see the package doc). Handle serves its
// requests (Server is a fasthttp server for it), safe for concurrent use;
// Run flushes its rejection counts to Redis. The zero value is not usable:
// call New.
type Gateway struct {
	cfg      Config
	keys     []apiKey
	buckets  *Buckets
	rdb      redis.Scripter
	prefix   string
	pub      *queue.Publisher
	ready    func(context.Context) error
	log      *slog.Logger
	now      func() time.Time
	metrics  fasthttp.RequestHandler // GET /metrics; nil: not served
	tracer   trace.Tracer            // nil: tracing off
	requests *prometheus.CounterVec
	counters map[string]map[int]prometheus.Counter // the counters of counted, by key label and code (read only)
	rejected *rejections
	nblocked atomic.Int64 // len(blocked), read without the lock

	mu      sync.Mutex
	blocked map[string]time.Time // client IPs over the failed-authentication limit, until
	limited map[string]*limitLog // by key name, or " redis", " publish" (a space: never a key name)

	base time.Time // the origin of apiKey.fullAt, with its monotonic reading
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
		cfg:     cfg,
		buckets: NewBuckets(d.Redis, d.KeyPrefix),
		rdb:     d.Redis,
		prefix:  d.KeyPrefix,
		pub:     d.Publisher,
		ready:   d.Ready,
		log:     d.Logger,
		tracer:  tracerOf(d.Tracer),
		now:     d.Now,
		blocked: map[string]time.Time{},
		limited: map[string]*limitLog{},
		base:    time.Now(),
	}
	if g.log == nil {
		g.log = slog.Default()
	}
	if g.now == nil {
		g.now = time.Now
	}
	g.rejected = &rejections{rdb: d.Redis, prefix: d.KeyPrefix, now: g.now, counts: map[string]int64{}}
	for _, k := range cfg.Keys {
		h, err := hex.DecodeString(strings.ToLower(k.SHA256))
		if err != nil {
			return nil, fmt.Errorf("gateway key %s: sha256: %w", k.Name, err)
		}
		g.keys = append(g.keys, apiKey{Key: k, hash: h})
	}
	for i := range g.keys {
		g.keys[i].fullAt.Store(math.MinInt64)
	}
	g.requests = NewMetrics(nil).Requests
	g.counters = map[string]map[int]prometheus.Counter{}
	for _, label := range append([]string{unauthenticatedLabel}, keyNames(cfg.Keys)...) {
		g.counters[label] = map[int]prometheus.Counter{}
		for _, code := range counted {
			g.counters[label][code] = g.requests.WithLabelValues(label, strconv.Itoa(code))
		}
	}
	for i := range g.keys {
		k := &g.keys[i]
		k.limited = mustJSON(problemOf(http.StatusTooManyRequests, TypeQuotaExceeded, "Quota exceeded",
			fmt.Sprintf("this key allows %g jobs per second, %d at once; retry after the Retry-After seconds", k.Rate, k.Burst)))
		k.policy = fmt.Sprintf("%q;q=%d;w=%d", "key", k.Burst, max(1, int64(math.Ceil(float64(k.Burst)/k.Rate))))
		k.legacyLimit = strconv.Itoa(k.Burst)
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

// Handle answers one request: the routes of the package doc, 404 for any
// other path and 405 (with Allow) for another method.
func (g *Gateway) Handle(c *fasthttp.RequestCtx) {
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

// Server is a fasthttp server for the gateway: requests of at most
// MaxRequestBytes, read as a stream so that an oversized one gets the
// gateway's own 413; headers of at most 16 KiB; the timeouts of a public
// endpoint. logf, when set, gets the server's own errors (a malformed
// request, a timeout).
func (g *Gateway) Server(logf func(format string, args ...any)) *fasthttp.Server {
	s := &fasthttp.Server{
		Handler:                      g.Handle,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		MaxRequestBodySize:           MaxRequestBytes,
		ReadBufferSize:               16 << 10,
		ReadTimeout:                  30 * time.Second,
		WriteTimeout:                 g.cfg.PublishTimeout + 30*time.Second,
		IdleTimeout:                  2 * time.Minute,
		CloseOnShutdown:              true,
	}
	if logf != nil {
		s.Logger = printfLogger(logf)
	}
	return s
}

// printfLogger is a fasthttp.Logger that calls a printf-like function.
type printfLogger func(format string, args ...any)

func (l printfLogger) Printf(format string, args ...any) { l(format, args...) }

// Run adds the rejections counted here to Redis every few seconds (for
// `notifier top --gateway`) until ctx ends, then once more. It returns nil
// once stopped; a failed flush is logged and retried at the next.
func (g *Gateway) Run(ctx context.Context) error {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
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
		case <-t.C:
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

func (g *Gateway) readyz(c *fasthttp.RequestCtx) {
	c.SetContentType("text/plain; charset=utf-8")
	if g.ready != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := g.ready(ctx); err != nil {
			c.SetStatusCode(http.StatusServiceUnavailable)
			c.SetBodyString("not ready: " + err.Error() + "\n")
			return
		}
	}
	c.SetBodyString("ready\n")
}

// authenticate finds the key of the request's bearer token, comparing its
// SHA-256 with every configured key's in constant time (no early exit, so
// the time does not say which key, or how much of one, matched).
func (g *Gateway) authenticate(c *fasthttp.RequestCtx) (*apiKey, bool) {
	auth := c.Request.Header.Peek("Authorization")
	if len(auth) <= len(authorizationBearer) || !bytes.EqualFold(auth[:len(authorizationBearer)], []byte(authorizationBearer)) {
		return nil, false
	}
	sum := sha256.Sum256(bytes.TrimSpace(auth[len(authorizationBearer):]))
	found := -1
	for i := range g.keys {
		if subtle.ConstantTimeCompare(sum[:], g.keys[i].hash) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil, false
	}
	return &g.keys[found], true
}

// clientIP is the address failed authentications are counted against.
func (g *Gateway) clientIP(c *fasthttp.RequestCtx) string {
	if h := g.cfg.ClientIPHeader; h != "" {
		if v := c.Request.Header.PeekAll(h); len(v) > 0 {
			parts := strings.Split(string(v[len(v)-1]), ",")
			if ip := net.ParseIP(strings.TrimSpace(parts[len(parts)-1])); ip != nil {
				return ip.String()
			}
		}
	}
	if ip := c.RemoteIP(); ip != nil && !ip.IsUnspecified() {
		return ip.String()
	}
	return "unknown"
}

// blockedFor is how long the request's client IP stays over the
// failed-authentication limit as this instance last heard it (0: not
// blocked).
func (g *Gateway) blockedFor(c *fasthttp.RequestCtx) time.Duration {
	if g.nblocked.Load() == 0 {
		return 0
	}
	ip := g.clientIP(c)
	g.mu.Lock()
	defer g.mu.Unlock()
	until, ok := g.blocked[ip]
	if !ok {
		return 0
	}
	left := until.Sub(g.now())
	if left <= 0 {
		delete(g.blocked, ip)
		g.nblocked.Store(int64(len(g.blocked)))
		return 0
	}
	return left
}

func (g *Gateway) block(ip string, d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if len(g.blocked) >= 100_000 { // bounded: drop the lapsed ones, then all
		for k, until := range g.blocked {
			if !until.After(now) {
				delete(g.blocked, k)
			}
		}
		if len(g.blocked) >= 100_000 {
			clear(g.blocked)
		}
	}
	g.blocked[ip] = now.Add(d)
	g.nblocked.Store(int64(len(g.blocked)))
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
	Status    string `json:"status"` // accepted | invalid | too_large | unavailable
	Duplicate bool   `json:"duplicate,omitempty"`
	Field     string `json:"field,omitempty"`
	Rule      string `json:"rule,omitempty"`
}

// Problem types (relative URI references, RFC 9457).
const (
	TypeQuotaExceeded  = "quota-exceeded"
	TypeAuthFailures   = "too-many-auth-failures"
	TypeUnauthorized   = "unauthorized"
	TypeInvalidJob     = "invalid-job"
	TypeTooLarge       = "too-large"
	TypeBatchOverBurst = "batch-exceeds-burst"
	TypeUnsupported    = "unsupported-media-type"
	TypeUnavailable    = "unavailable"
)

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
var counted = []int{200, 202, 400, 401, 413, 415, 429, 503}

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

// setKeyHeaders writes the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers for k's bucket as t left it: the
// policy "key" of quota q = burst over the window w = burst/rate seconds
// (the time an empty bucket takes to fill, rounded up), and r, the whole
// tokens left, with t, the seconds until the bucket is full again.
func (g *Gateway) setKeyHeaders(h *fasthttp.ResponseHeader, k *apiKey, t Take) {
	reset := int64(math.Ceil(t.Reset.Seconds()))
	h.Set("RateLimit-Policy", k.policy)
	var buf [48]byte
	b := append(buf[:0], `"key";r=`...)
	b = strconv.AppendInt(b, int64(t.Remaining), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, reset, 10)
	h.SetBytesV("RateLimit", b)
	if g.cfg.LegacyHeaders {
		h.Set("X-RateLimit-Limit", k.legacyLimit)
		h.SetBytesV("X-RateLimit-Remaining", strconv.AppendInt(buf[:0], int64(t.Remaining), 10))
		h.SetBytesV("X-RateLimit-Reset", strconv.AppendInt(buf[:0], reset, 10))
	}
}

func (g *Gateway) setRateHeaders(h *fasthttp.ResponseHeader, policy string, quota int, window int64, remaining int, reset int64) {
	h.Set("RateLimit-Policy", fmt.Sprintf("%q;q=%d;w=%d", policy, quota, window))
	h.Set("RateLimit", fmt.Sprintf("%q;r=%d;t=%d", policy, remaining, reset))
	if g.cfg.LegacyHeaders {
		h.Set("X-RateLimit-Limit", strconv.Itoa(quota))
		h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
	}
}

// peekHeaders sets the key's rate-limit fields for an answer that took no
// token (a 415, a 413, a 400 before the bucket): one read of the bucket.
func (g *Gateway) peekHeaders(ctx context.Context, h *fasthttp.ResponseHeader, k *apiKey) {
	t, err := g.buckets.Take(ctx, k.Key, 0)
	if err != nil {
		return // Redis unreachable: the answer goes without them
	}
	g.setKeyHeaders(h, k, t)
}

// authFailed answers a request without a valid key: 401, or 429 once its
// client IP is over gateway.auth_failures. The body is not read (see
// finishUnread).
func (g *Gateway) authFailed(ctx context.Context, c *fasthttp.RequestCtx, ip string) {
	lim := g.cfg.AuthFailures
	n, left, err := failAuth(ctx, g.rdb, g.prefix, ip, lim.Window)
	if err != nil {
		g.throttledWarn(" redis", "failed authentication not counted: answered 503", "err", err)
		g.write(c, unauthenticatedLabel, answer{status: http.StatusServiceUnavailable, retryAfter: time.Second,
			body: problemOf(http.StatusServiceUnavailable, TypeUnavailable, "Service unavailable", "the limit store cannot be reached; retry later")})
		return
	}
	h := &c.Response.Header
	g.setRateHeaders(h, "auth", lim.Limit, ceilSeconds(lim.Window), max(0, lim.Limit-n), ceilSeconds(left))
	g.rejected.add(unauthenticatedLabel)
	if n > lim.Limit {
		g.block(ip, left)
		g.write(c, unauthenticatedLabel, answer{status: http.StatusTooManyRequests, retryAfter: left,
			body: problemOf(http.StatusTooManyRequests, TypeAuthFailures, "Too many failed authentications",
				fmt.Sprintf("more than %d failed authentications from this address in %s", lim.Limit, lim.Window))})
		return
	}
	h.Set("WWW-Authenticate", `Bearer realm="notifier"`)
	g.write(c, unauthenticatedLabel, answer{status: http.StatusUnauthorized,
		body: problemOf(http.StatusUnauthorized, TypeUnauthorized, "Unauthorized", "send Authorization: Bearer <API key>")})
}

// isJSON reports whether a Content-Type is application/json or a +json type.
func isJSON(ct string) bool {
	if ct == jsonContentType { // the common spelling, without parsing
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == jsonContentType || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// notifications is POST /v1/notifications. The order keeps rejections
// cheap: the key (a hash, no Redis), the client IP's block (memory), the
// content type and size, the jobs counted by a scan, the bucket (one Redis
// round trip); only then is anything decoded or published.
func (g *Gateway) notifications(c *fasthttp.RequestCtx) {
	ctx := context.Background() // not the request's: a shutdown lets requests in flight finish
	bodyRead := false
	defer func() {
		if !bodyRead {
			finishUnread(c)
		}
	}()
	k, ok := g.authenticate(c)
	if !ok {
		g.authFailed(ctx, c, g.clientIP(c))
		return
	}
	if left := g.blockedFor(c); left > 0 {
		g.rejected.add(unauthenticatedLabel)
		g.write(c, k.Name, answer{status: http.StatusTooManyRequests, retryAfter: left,
			body: problemOf(http.StatusTooManyRequests, TypeAuthFailures, "Too many failed authentications",
				"this address is over the limit of failed authentications; retry after the window")})
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
	// A key whose bucket, as this instance last heard of it, cannot give
	// even one token is refused before the body is read: whatever the
	// request holds, it needs at least that one.
	if t, refused := k.localRefusal(time.Since(g.base), 1); refused {
		g.refuseOverLimit(c, k, t, 1)
		return
	}
	if cl := c.Request.Header.ContentLength(); cl > MaxRequestBytes {
		tooLarge(fmt.Sprintf("the body is %d bytes, more than %d", cl, MaxRequestBytes))
		return
	}
	body, err := readBody(c)
	bodyRead = err == nil
	if err != nil {
		if errors.Is(err, errBodyTooLarge) {
			tooLarge(fmt.Sprintf("the body is more than %d bytes", MaxRequestBytes))
			return
		}
		g.write(c, k.Name, answer{status: http.StatusBadRequest,
			body: problemOf(http.StatusBadRequest, TypeInvalidJob, "Unreadable body", "the body could not be read")})
		return
	}
	n, array, err := countJobs(body)
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
	case n > k.Burst:
		g.peekHeaders(ctx, h, k)
		g.write(c, k.Name, answer{status: http.StatusRequestEntityTooLarge,
			body: problemOf(http.StatusRequestEntityTooLarge, TypeBatchOverBurst, "Batch larger than the key's burst",
				fmt.Sprintf("%d jobs in one request, more than this key's burst of %d: they could never be accepted at once; send at most %d per request", n, k.Burst, k.Burst))})
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
	high := false
	switch priority := string(c.QueryArgs().Peek("priority")); priority {
	case "", "normal":
	case "high":
		high = true
	default:
		g.peekHeaders(ctx, h, k)
		g.write(c, k.Name, answer{status: http.StatusBadRequest, body: invalidProblem(&queue.InvalidError{Field: "priority", Rule: "must be high or normal"})})
		return
	}

	t, err := g.take(ctx, k, n)
	if err != nil {
		g.throttledWarn(" redis", "key's bucket not reachable: answered 503", "key", k.Name, "err", err)
		g.write(c, k.Name, answer{status: http.StatusServiceUnavailable, retryAfter: time.Second,
			body: problemOf(http.StatusServiceUnavailable, TypeUnavailable, "Service unavailable", "the limit store cannot be reached; retry later")})
		return
	}
	if !t.Allowed {
		g.refuseOverLimit(c, k, t, n)
		return
	}
	g.setKeyHeaders(h, k, t)
	g.accept(ctx, c, k, body, array, idem, high)
}

// take takes n tokens of k's bucket: refused at once, without Redis, when
// what this instance last heard of the bucket already refuses them (see
// apiKey.fullAt), else by the bucket in Redis. A refusal from the bound
// gives a wait no longer than Redis would (the bucket can only be emptier
// than the bound says), so Retry-After stays honest.
func (g *Gateway) take(ctx context.Context, k *apiKey, n int) (Take, error) {
	start := time.Since(g.base)
	if t, ok := k.localRefusal(start, n); ok {
		return t, nil
	}
	t, err := g.buckets.Take(ctx, k.Key, n)
	if err != nil {
		return t, err
	}
	// start, not now: the bound may only be early (the reply's Redis
	// instant lies between the two).
	at := int64(start + t.Reset)
	for {
		old := k.fullAt.Load()
		if at <= old || k.fullAt.CompareAndSwap(old, at) {
			break
		}
	}
	return t, nil
}

// localRefusal reports whether the bound refuses n tokens at now (since
// Gateway.base), with the Take it implies.
func (k *apiKey) localRefusal(now time.Duration, n int) (Take, bool) {
	untilFull := time.Duration(k.fullAt.Load()) - now
	if k.fullAt.Load() == math.MinInt64 || untilFull <= 0 {
		return Take{}, false
	}
	em := func(x int) time.Duration { return time.Duration(math.Ceil(float64(x)*1e6/k.Rate)) * time.Microsecond }
	wait := untilFull + em(n) - em(k.Burst)
	if wait <= 0 {
		return Take{}, false
	}
	room := em(k.Burst) - untilFull
	left := 0
	if room > 0 {
		left = min(k.Burst, int(math.Floor(room.Seconds()*k.Rate)))
		for left > 0 && em(left) > room {
			left--
		}
	}
	return Take{Remaining: left, Wait: wait, Reset: untilFull}, true
}

// refuseOverLimit answers 429 quota-exceeded to a request of n jobs the
// key's bucket refused (t).
func (g *Gateway) refuseOverLimit(c *fasthttp.RequestCtx, k *apiKey, t Take, n int) {
	g.setKeyHeaders(&c.Response.Header, k, t)
	k.limitedLine(g, t.Wait)
	k.rejected.Add(1)
	var body any = k.limited
	if n > 1 {
		body = problemOf(http.StatusTooManyRequests, TypeQuotaExceeded, "Quota exceeded",
			fmt.Sprintf("%d jobs asked for, %d left: this key allows %g jobs per second, %d at once; a batch is taken whole or not at all", n, t.Remaining, k.Rate, k.Burst))
	}
	g.write(c, k.Name, answer{status: http.StatusTooManyRequests, retryAfter: t.Wait, body: body})
}

// invalidProblem is the 400 of an invalid job, naming the field and rule.
func invalidProblem(ie *queue.InvalidError) *problem {
	p := problemOf(http.StatusBadRequest, TypeInvalidJob, "Invalid job", ie.Error())
	p.Field, p.Rule = ie.Field, ie.Rule
	return p
}

// accept decodes and publishes the jobs of a request that passed the
// bucket, and answers 202 once JetStream holds them.
func (g *Gateway) accept(ctx context.Context, c *fasthttp.RequestCtx, k *apiKey, body []byte, array bool, idem string, high bool) {
	items := [][]byte{body}
	if array {
		raws, err := splitJobs(body)
		if err != nil {
			g.write(c, k.Name, answer{status: http.StatusBadRequest, body: invalidProblem(&queue.InvalidError{Rule: err.Error()})})
			return
		}
		items = items[:0]
		for _, raw := range raws {
			items = append(items, raw)
		}
	}
	header := nats.Header{}
	if g.tracer != nil {
		// A recorded span under the caller's trace; the jobs carry it.
		tctx := propagation.TraceContext{}.Extract(ctx, requestCarrier{&c.Request.Header})
		_, span := g.tracer.Start(tctx, "notifier.gateway.accept", trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("notifier.gateway.key", k.Name), attribute.Int("notifier.gateway.jobs", len(items))))
		defer span.End()
		propagation.TraceContext{}.Inject(trace.ContextWithSpan(tctx, span), propagation.HeaderCarrier(header))
	} else if tp := string(c.Request.Header.Peek("Traceparent")); validTraceparent(tp) {
		header.Set(HeaderTraceparent, tp)
		if ts := string(c.Request.Header.Peek("Tracestate")); ts != "" && len(ts) <= maxTracestate {
			header.Set(HeaderTracestate, ts)
		}
	} else {
		header.Set(HeaderTraceparent, newTraceparent())
	}
	// nats.Header.Set canonicalises the name: store it as the lower-case
	// name SPEC §9 gives, which is what a W3C propagator reads.
	for _, name := range []string{HeaderTraceparent, HeaderTracestate} {
		if v, ok := header[http.CanonicalHeaderKey(name)]; ok {
			delete(header, http.CanonicalHeaderKey(name))
			header[name] = v
		}
	}

	results := make([]itemResult, len(items))
	msgs := make([]queue.OutMsg, 0, len(items))
	at := make([]int, 0, len(items)) // msgs[i] is item at[i]
	for i, item := range items {
		results[i].Index = i
		if len(item) > queue.MaxJobBytes {
			results[i].Status, results[i].Rule = "too_large", fmt.Sprintf("the job is %d bytes, more than %d", len(item), queue.MaxJobBytes)
			continue
		}
		j, err := queue.DecodeFilled("", item, func(j *queue.Job) error {
			if j.Tenant != "" && j.Tenant != k.Tenant {
				return &queue.InvalidError{Field: "tenant", Rule: "is not this API key's tenant: leave it out (the key's tenant is used)"}
			}
			j.Tenant = k.Tenant
			if high && j.Category == queue.Marketing {
				return &queue.InvalidError{Field: "category", Rule: "marketing jobs cannot take the priority lane (priority=high)"}
			}
			switch {
			case idem != "" && array:
				j.ID = idempotencyItemID(idem, i)
			case idem != "":
				j.ID = idem
			case j.ID == "":
				j.ID = newID()
			}
			return nil
		})
		var data []byte
		if err == nil {
			data, err = j.Marshal()
		}
		if err != nil {
			var ie *queue.InvalidError
			if !errors.As(err, &ie) {
				ie = &queue.InvalidError{Rule: "not a valid job"}
			}
			results[i].Status, results[i].Field, results[i].Rule = "invalid", ie.Field, ie.Rule
			continue
		}
		results[i].ID = j.ID
		msgs = append(msgs, queue.OutMsg{Subject: queue.KeyFor(j.Channel, j.Tenant, high, j.Category).Subject(), Data: data, MsgID: j.ID, Header: header})
		at = append(at, i)
	}
	if len(msgs) == 0 {
		g.refuseAll(c, k, array, results)
		return
	}

	pctx, cancel := context.WithTimeout(ctx, g.cfg.PublishTimeout)
	defer cancel()
	pubs := g.pub.PublishMsgs(pctx, msgs)
	failed := 0
	for m, res := range pubs {
		i := at[m]
		if res.Err != nil {
			failed++
			results[i].Status = "unavailable"
			g.throttledWarn(" publish", "job not acknowledged by JetStream: answered 503", "key", k.Name, "err", res.Err)
			continue
		}
		results[i].Status, results[i].Duplicate = "accepted", res.Duplicate
	}
	if failed > 0 {
		p := problemOf(http.StatusServiceUnavailable, TypeUnavailable, "Service unavailable",
			"JetStream did not acknowledge the job in time; retry with the same Idempotency-Key (a job may have been stored, and the key makes the retry one job)")
		if array {
			p.Results = results
		}
		g.write(c, k.Name, answer{status: http.StatusServiceUnavailable, retryAfter: time.Second, body: p})
		return
	}
	if !array {
		g.write(c, k.Name, answer{status: http.StatusAccepted, body: accepted{ID: results[0].ID, Duplicate: results[0].Duplicate}})
		return
	}
	g.write(c, k.Name, answer{status: http.StatusAccepted, body: results})
}

// accepted is the 202 of one job.
type accepted struct {
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate,omitempty"`
}

// refuseAll answers a request none of whose jobs can be published.
func (g *Gateway) refuseAll(c *fasthttp.RequestCtx, k *apiKey, array bool, results []itemResult) {
	if !array {
		res := results[0]
		if res.Status == "too_large" {
			g.write(c, k.Name, answer{status: http.StatusRequestEntityTooLarge,
				body: problemOf(http.StatusRequestEntityTooLarge, TypeTooLarge, "Request too large", res.Rule)})
			return
		}
		g.write(c, k.Name, answer{status: http.StatusBadRequest, body: invalidProblem(&queue.InvalidError{Field: res.Field, Rule: res.Rule})})
		return
	}
	p := problemOf(http.StatusBadRequest, TypeInvalidJob, "Invalid jobs", "no job of the array is valid; each item says why")
	p.Items = results
	g.write(c, k.Name, answer{status: http.StatusBadRequest, body: p})
}

// limitedLine logs that k is being limited: at most one line per key per
// minute (per instance), with the rejections since the previous line.
// Lock-free: it is on the 429 path.
func (k *apiKey) limitedLine(g *Gateway, wait time.Duration) {
	n := k.limitedSince.Add(1)
	now := int64(time.Since(g.base))
	last := k.lastLimitLog.Load()
	if last != 0 && now-last < int64(time.Minute) || !k.lastLimitLog.CompareAndSwap(last, max(now, 1)) {
		return
	}
	k.limitedSince.Add(-n)
	g.log.Info("api key limited", "key", k.Name, "rejected", n, "retry_after", wait.Round(time.Millisecond))
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

// How much of a body left unread the server drops itself to keep the
// connection (fasthttp's own limit), and how much more finishUnread does.
const (
	serverDrains = 256 << 10
	drainBytes   = 2 * MaxRequestBytes
)

// finishUnread is called once an answer was given without reading the
// whole body (a 401, a 429 from the bound, a 413, a 415). Up to
// serverDrains the server drops the rest and keeps the connection. Past
// that, or of unknown length, the connection is closed after the answer,
// and the rest is read and dropped first (up to drainBytes): closed with
// data unread, a socket resets the connection, and the reset can reach
// the client before the answer it should read. A body declared larger
// still is not read at all.
func finishUnread(c *fasthttp.RequestCtx) {
	cl := c.Request.Header.ContentLength()
	if cl >= 0 && cl <= serverDrains {
		return
	}
	c.SetConnectionClose()
	if rd := c.RequestBodyStream(); rd != nil && cl <= drainBytes {
		_, _ = io.CopyN(io.Discard, rd, drainBytes)
	}
}

// errBodyTooLarge is a body over MaxRequestBytes.
var errBodyTooLarge = fmt.Errorf("the body is more than %d bytes", MaxRequestBytes)

// readBody reads the request body, at most MaxRequestBytes (else
// errBodyTooLarge), in one buffer of its Content-Length when given. The
// server streams request bodies (Server), so one over the limit is read
// only up to it.
func readBody(c *fasthttp.RequestCtx) ([]byte, error) {
	rd := c.RequestBodyStream()
	if rd == nil {
		return append([]byte(nil), c.Request.Body()...), nil
	}
	if cl := c.Request.Header.ContentLength(); cl > 0 && cl <= MaxRequestBytes {
		buf := make([]byte, cl)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	b, err := io.ReadAll(io.LimitReader(rd, MaxRequestBytes+1))
	if err == nil && len(b) > MaxRequestBytes {
		return nil, errBodyTooLarge
	}
	return b, err
}

// requestCarrier reads a W3C trace context from a request's headers.
type requestCarrier struct{ h *fasthttp.RequestHeader }

func (rc requestCarrier) Get(key string) string { return string(rc.h.Peek(key)) }
func (rc requestCarrier) Set(string, string)    {} // never written
func (rc requestCarrier) Keys() []string {
	var keys []string
	for k := range rc.h.All() {
		keys = append(keys, string(k))
	}
	return keys
}
