package gateway

import (
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
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/queue"
)

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
}

// Gateway is the HTTP intake (see the package doc). It is an http.Handler,
// safe for concurrent use; Run flushes its rejection counts to Redis. The
// zero value is not usable: call New.
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
	mux      *http.ServeMux
	requests *prometheus.CounterVec
	rejected *rejections

	mu      sync.Mutex
	blocked map[string]time.Time // client IPs over the failed-authentication limit, until
	limited map[string]*limitLog // by key name (or "publish" for publish failures)
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
		now:     d.Now,
		blocked: map[string]time.Time{},
		limited: map[string]*limitLog{},
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
	g.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "notifier_gateway_requests_total",
		Help: "Requests to POST /v1/notifications by API key name (\"unauthenticated\" without a valid key) and HTTP status code.",
	}, []string{"key", "code"})
	if d.Registerer != nil {
		if err := d.Registerer.Register(g.requests); err != nil {
			return nil, fmt.Errorf("register gateway metrics: %w", err)
		}
	}
	g.mux = http.NewServeMux()
	g.mux.HandleFunc("POST /v1/notifications", g.notifications)
	g.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	g.mux.HandleFunc("GET /readyz", g.readyz)
	g.mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(OpenAPI)
	})
	if d.Gatherer != nil {
		g.mux.Handle("GET /metrics", promhttp.HandlerFor(d.Gatherer, promhttp.HandlerOpts{}))
	}
	return g, nil
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.mux.ServeHTTP(w, r) }

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
			if err := g.rejected.flush(fctx); err != nil {
				g.log.Warn("gateway rejections not counted", "err", err)
			}
			return nil
		case <-t.C:
			if err := g.rejected.flush(ctx); err != nil && ctx.Err() == nil {
				g.log.Warn("gateway rejections not counted", "err", err)
			}
		}
	}
}

func (g *Gateway) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if g.ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := g.ready(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "not ready: "+err.Error()+"\n")
			return
		}
	}
	_, _ = io.WriteString(w, "ready\n")
}

// authenticate finds the key of the request's bearer token, comparing its
// SHA-256 with every configured key's in constant time (no early exit, so
// the time does not say which key, or how much of one, matched).
func (g *Gateway) authenticate(r *http.Request) (*apiKey, bool) {
	auth := r.Header.Get("Authorization")
	if len(auth) <= len(authorizationBearer) || !strings.EqualFold(auth[:len(authorizationBearer)], authorizationBearer) {
		return nil, false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(auth[len(authorizationBearer):])))
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
func (g *Gateway) clientIP(r *http.Request) string {
	if h := g.cfg.ClientIPHeader; h != "" {
		if v := r.Header.Values(h); len(v) > 0 {
			parts := strings.Split(v[len(v)-1], ",")
			if ip := net.ParseIP(strings.TrimSpace(parts[len(parts)-1])); ip != nil {
				return ip.String()
			}
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.String()
	}
	return "unknown"
}

// blockedFor is how long ip stays over the failed-authentication limit as
// this instance last heard it (0: not blocked).
func (g *Gateway) blockedFor(ip string) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	until, ok := g.blocked[ip]
	if !ok {
		return 0
	}
	left := until.Sub(g.now())
	if left <= 0 {
		delete(g.blocked, ip)
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
func (g *Gateway) write(w http.ResponseWriter, label string, a answer) {
	h := w.Header()
	if a.retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(ceilSeconds(a.retryAfter), 10))
	}
	ct := jsonContentType
	if _, ok := a.body.(*problem); ok {
		ct = problemContentType
	}
	h.Set("Content-Type", ct)
	h.Set("Cache-Control", "no-store")
	b, err := json.Marshal(a.body)
	if err != nil { // cannot happen: plain structs
		b = []byte(`{}`)
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(append(b, '\n'))
	g.requests.WithLabelValues(label, strconv.Itoa(a.status)).Inc()
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
func (g *Gateway) setKeyHeaders(h http.Header, k *apiKey, t Take) {
	w := max(1, int64(math.Ceil(float64(k.Burst)/k.Rate)))
	reset := int64(math.Ceil(t.Reset.Seconds()))
	g.setRateHeaders(h, "key", k.Burst, w, t.Remaining, reset)
}

func (g *Gateway) setRateHeaders(h http.Header, policy string, quota int, window int64, remaining int, reset int64) {
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
func (g *Gateway) peekHeaders(ctx context.Context, h http.Header, k *apiKey) {
	t, err := g.buckets.Take(ctx, k.Key, 0)
	if err != nil {
		return // Redis unreachable: the answer goes without them
	}
	g.setKeyHeaders(h, k, t)
}

// authFailed answers a request without a valid key: 401, or 429 once its
// client IP is over gateway.auth_failures. Nothing of the body is read.
func (g *Gateway) authFailed(w http.ResponseWriter, r *http.Request, ip string) {
	lim := g.cfg.AuthFailures
	n, left, err := failAuth(r.Context(), g.rdb, g.prefix, ip, lim.Window)
	if err != nil {
		g.throttledWarn("redis", "failed authentication not counted: answered 503", "err", err)
		g.write(w, unauthenticatedLabel, answer{status: http.StatusServiceUnavailable, retryAfter: time.Second,
			body: problemOf(http.StatusServiceUnavailable, TypeUnavailable, "Service unavailable", "the limit store cannot be reached; retry later")})
		return
	}
	h := w.Header()
	g.setRateHeaders(h, "auth", lim.Limit, ceilSeconds(lim.Window), max(0, lim.Limit-n), ceilSeconds(left))
	g.rejected.add(unauthenticatedLabel)
	if n > lim.Limit {
		g.block(ip, left)
		g.write(w, unauthenticatedLabel, answer{status: http.StatusTooManyRequests, retryAfter: left,
			body: problemOf(http.StatusTooManyRequests, TypeAuthFailures, "Too many failed authentications",
				fmt.Sprintf("more than %d failed authentications from this address in %s", lim.Limit, lim.Window))})
		return
	}
	h.Set("WWW-Authenticate", `Bearer realm="notifier"`)
	g.write(w, unauthenticatedLabel, answer{status: http.StatusUnauthorized,
		body: problemOf(http.StatusUnauthorized, TypeUnauthorized, "Unauthorized", "send Authorization: Bearer <API key>")})
}

// isJSON reports whether a Content-Type is application/json or a +json type.
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == jsonContentType || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// notifications is POST /v1/notifications. The order keeps rejections
// cheap: the key (a hash, no Redis), the client IP's block (memory), the
// content type and size, the jobs counted by a scan, the bucket (one Redis
// round trip); only then is anything decoded or published.
func (g *Gateway) notifications(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ip := g.clientIP(r)
	k, ok := g.authenticate(r)
	if !ok {
		g.authFailed(w, r, ip)
		return
	}
	if left := g.blockedFor(ip); left > 0 {
		g.rejected.add(unauthenticatedLabel)
		g.write(w, k.Name, answer{status: http.StatusTooManyRequests, retryAfter: left,
			body: problemOf(http.StatusTooManyRequests, TypeAuthFailures, "Too many failed authentications",
				"this address is over the limit of failed authentications; retry after the window")})
		return
	}
	h := w.Header()
	if !isJSON(r.Header.Get("Content-Type")) {
		g.peekHeaders(ctx, h, k)
		g.write(w, k.Name, answer{status: http.StatusUnsupportedMediaType,
			body: problemOf(http.StatusUnsupportedMediaType, TypeUnsupported, "Unsupported media type", "send Content-Type: application/json")})
		return
	}
	tooLarge := func(detail string) {
		g.peekHeaders(ctx, h, k)
		g.write(w, k.Name, answer{status: http.StatusRequestEntityTooLarge,
			body: problemOf(http.StatusRequestEntityTooLarge, TypeTooLarge, "Request too large", detail)})
	}
	if r.ContentLength > MaxRequestBytes {
		tooLarge(fmt.Sprintf("the body is %d bytes, more than %d", r.ContentLength, MaxRequestBytes))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			tooLarge(fmt.Sprintf("the body is more than %d bytes", MaxRequestBytes))
			return
		}
		g.write(w, k.Name, answer{status: http.StatusBadRequest,
			body: problemOf(http.StatusBadRequest, TypeInvalidJob, "Unreadable body", "the body could not be read")})
		return
	}
	n, array, err := countJobs(body)
	switch {
	case err != nil:
		g.peekHeaders(ctx, h, k)
		g.write(w, k.Name, answer{status: http.StatusBadRequest, body: invalidProblem(&queue.InvalidError{Rule: err.Error()})})
		return
	case !array && len(body) > queue.MaxJobBytes:
		tooLarge(fmt.Sprintf("the job is %d bytes, more than %d", len(body), queue.MaxJobBytes))
		return
	case array && n > MaxBatch:
		tooLarge(fmt.Sprintf("more than %d jobs in one request", MaxBatch))
		return
	case n == 0:
		g.peekHeaders(ctx, h, k)
		g.write(w, k.Name, answer{status: http.StatusBadRequest, body: invalidProblem(&queue.InvalidError{Rule: "an empty array: send at least one job"})})
		return
	case n > k.Burst:
		g.peekHeaders(ctx, h, k)
		g.write(w, k.Name, answer{status: http.StatusRequestEntityTooLarge,
			body: problemOf(http.StatusRequestEntityTooLarge, TypeBatchOverBurst, "Batch larger than the key's burst",
				fmt.Sprintf("%d jobs in one request, more than this key's burst of %d: they could never be accepted at once; send at most %d per request", n, k.Burst, k.Burst))})
		return
	}
	idem := r.Header.Get("Idempotency-Key")
	if _, set := r.Header["Idempotency-Key"]; set {
		if rule := checkIdempotencyKey(idem, array); rule != "" {
			g.peekHeaders(ctx, h, k)
			g.write(w, k.Name, answer{status: http.StatusBadRequest, body: invalidProblem(&queue.InvalidError{Field: "Idempotency-Key", Rule: rule})})
			return
		}
	}
	high := false
	switch r.URL.Query().Get("priority") {
	case "", "normal":
	case "high":
		high = true
	default:
		g.peekHeaders(ctx, h, k)
		g.write(w, k.Name, answer{status: http.StatusBadRequest, body: invalidProblem(&queue.InvalidError{Field: "priority", Rule: "must be high or normal"})})
		return
	}

	t, err := g.buckets.Take(ctx, k.Key, n)
	if err != nil {
		g.throttledWarn("redis", "key's bucket not reachable: answered 503", "key", k.Name, "err", err)
		g.write(w, k.Name, answer{status: http.StatusServiceUnavailable, retryAfter: time.Second,
			body: problemOf(http.StatusServiceUnavailable, TypeUnavailable, "Service unavailable", "the limit store cannot be reached; retry later")})
		return
	}
	g.setKeyHeaders(h, k, t)
	if !t.Allowed {
		g.limitedLine(k.Name, t.Wait)
		g.rejected.add(k.Name)
		detail := fmt.Sprintf("this key allows %g jobs per second, %d at once; retry after the Retry-After seconds", k.Rate, k.Burst)
		if n > 1 {
			detail = fmt.Sprintf("%d jobs asked for, %d left: this key allows %g jobs per second, %d at once; a batch is taken whole or not at all", n, t.Remaining, k.Rate, k.Burst)
		}
		g.write(w, k.Name, answer{status: http.StatusTooManyRequests, retryAfter: t.Wait,
			body: problemOf(http.StatusTooManyRequests, TypeQuotaExceeded, "Quota exceeded", detail)})
		return
	}
	g.accept(w, r, k, body, array, idem, high)
}

// invalidProblem is the 400 of an invalid job, naming the field and rule.
func invalidProblem(ie *queue.InvalidError) *problem {
	p := problemOf(http.StatusBadRequest, TypeInvalidJob, "Invalid job", ie.Error())
	p.Field, p.Rule = ie.Field, ie.Rule
	return p
}

// accept decodes and publishes the jobs of a request that passed the
// bucket, and answers 202 once JetStream holds them.
func (g *Gateway) accept(w http.ResponseWriter, r *http.Request, k *apiKey, body []byte, array bool, idem string, high bool) {
	items := [][]byte{body}
	if array {
		raws, err := splitJobs(body)
		if err != nil {
			g.write(w, k.Name, answer{status: http.StatusBadRequest, body: invalidProblem(&queue.InvalidError{Rule: err.Error()})})
			return
		}
		items = items[:0]
		for _, raw := range raws {
			items = append(items, raw)
		}
	}
	header := nats.Header{}
	if tp := r.Header.Get("Traceparent"); validTraceparent(tp) {
		header.Set(HeaderTraceparent, tp)
		if ts := r.Header.Get("Tracestate"); ts != "" && len(ts) <= maxTracestate {
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
		msgs = append(msgs, queue.OutMsg{Subject: queue.JobSubjectFor(j.Channel, j.Tenant, high), Data: data, MsgID: j.ID, Header: header})
		at = append(at, i)
	}
	if len(msgs) == 0 {
		g.refuseAll(w, k, array, results)
		return
	}

	ctx, cancel := context.WithTimeout(r.Context(), g.cfg.PublishTimeout)
	defer cancel()
	pubs := g.pub.PublishMsgs(ctx, msgs)
	failed := 0
	for m, res := range pubs {
		i := at[m]
		if res.Err != nil {
			failed++
			results[i].Status = "unavailable"
			g.throttledWarn("publish", "job not acknowledged by JetStream: answered 503", "key", k.Name, "err", res.Err)
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
		g.write(w, k.Name, answer{status: http.StatusServiceUnavailable, retryAfter: time.Second, body: p})
		return
	}
	if !array {
		g.write(w, k.Name, answer{status: http.StatusAccepted, body: accepted{ID: results[0].ID, Duplicate: results[0].Duplicate}})
		return
	}
	g.write(w, k.Name, answer{status: http.StatusAccepted, body: results})
}

// accepted is the 202 of one job.
type accepted struct {
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate,omitempty"`
}

// refuseAll answers a request none of whose jobs can be published.
func (g *Gateway) refuseAll(w http.ResponseWriter, k *apiKey, array bool, results []itemResult) {
	if !array {
		res := results[0]
		if res.Status == "too_large" {
			g.write(w, k.Name, answer{status: http.StatusRequestEntityTooLarge,
				body: problemOf(http.StatusRequestEntityTooLarge, TypeTooLarge, "Request too large", res.Rule)})
			return
		}
		g.write(w, k.Name, answer{status: http.StatusBadRequest, body: invalidProblem(&queue.InvalidError{Field: res.Field, Rule: res.Rule})})
		return
	}
	p := problemOf(http.StatusBadRequest, TypeInvalidJob, "Invalid jobs", "no job of the array is valid; each item says why")
	p.Items = results
	g.write(w, k.Name, answer{status: http.StatusBadRequest, body: p})
}

// limitedLine logs that key is being limited: at most one line per key per
// minute, with the rejections since the previous line.
func (g *Gateway) limitedLine(key string, wait time.Duration) {
	if n, ok := g.throttle("limited:"+key, time.Minute); ok {
		g.log.Info("api key limited", "key", key, "rejected", n, "retry_after", wait.Round(time.Millisecond))
	}
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
