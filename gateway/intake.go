package gateway

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/notifier/notifier/queue"
)

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
			g.peekHeaders(ctx, &c.Response.Header, k)
			g.write(c, k.Name, answer{status: http.StatusForbidden,
				body: problemOf(http.StatusForbidden, TypePriorityNotAllowed, "Priority lane not allowed",
					"this key may not use ?priority=high (gateway.keys[].priority); send without it")})
			return
		}
		high = true
	default:
		g.peekHeaders(ctx, &c.Response.Header, k)
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
			g.peekHeaders(ctx, h, k)
			g.write(c, k.Name, answer{status: http.StatusRequestTimeout,
				body: problemOf(http.StatusRequestTimeout, TypeRequestTimeout, "Request timeout",
					fmt.Sprintf("the body did not arrive whole within %s (gateway.read_timeout)", g.cfg.ReadTimeout))})
		default:
			// The body is streamed, so a malformed chunk or a body that
			// ends early shows here, not in the server's ErrorHandler: the
			// same answer as there (SPEC §9: 400 malformed-request), and the
			// connection closed, as the rest of it cannot be read.
			status, typ, reason := classify(err)
			c.SetConnectionClose()
			g.write(c, k.Name, answer{status: status, body: problemOf(status, typ, http.StatusText(status), reason)})
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
