package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/notifier/notifier/queue"
)

// accept decodes the jobs of a request that passed the buckets, claims
// the ids its client chose (a job whose id another job of the tenant holds
// is not published: 409), publishes the others and answers 202 once
// JetStream holds them; a retry of a job (its id held by the same job) is
// published again, one job with the first by the stream's duplicate
// window or the dispatcher's ledger, and answered duplicate.
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
	header, endSpan := g.traceHeader(ctx, c, k, len(items))
	defer endSpan()

	results := make([]itemResult, len(items))
	msgs := make([]queue.OutMsg, 0, len(items))
	at := make([]int, 0, len(items)) // msgs[i] is item at[i]
	var idKeys, idHashes []string    // of the msgs with a client-chosen id: a record and its claim each, a hash each
	var idAt []int                   // idHashes[j] and idKeys[2j:2j+2] are msgs[idAt[j]]'s
	for i, item := range items {
		results[i].Index = i
		if len(item) > queue.MaxJobBytes {
			results[i].Status, results[i].Rule = "too_large", fmt.Sprintf("the job is %d bytes, more than %d", len(item), queue.MaxJobBytes)
			continue
		}
		chosen := true
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
				j.ID, chosen = newID(), false
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
		if chosen {
			idKeys = append(idKeys, IDKey(g.prefix, j.Tenant, j.ID), idClaimKey(g.prefix, j.Tenant, j.ID))
			idHashes = append(idHashes, contentHash(high, data))
			idAt = append(idAt, len(msgs))
		}
		// A tenant's job goes on the fair lane the publisher places it on,
		// naming its tenant in the Notifier-Tenant header (SPEC §2).
		subject, th := g.pub.Place(ctx, queue.KeyFor(j.Channel, j.Tenant, high, j.Category))
		h := header
		if th != nil {
			h = th
			for name, v := range header {
				h[name] = v
			}
		}
		msgs = append(msgs, queue.OutMsg{Subject: subject, Data: data, MsgID: j.MsgID(), Header: h})
		at = append(at, i)
	}
	if len(msgs) == 0 {
		g.refuseAll(c, k, array, results)
		return
	}

	// The ids the client chose: a record per (tenant, id) says whether
	// another job holds it (409), the same one (a retry), or none.
	claims := make([]idClaim, len(msgs))
	for i := range claims {
		claims[i] = idNoRecord
	}
	var token string // this request's claim on the ids it writes
	if len(idKeys) > 0 {
		token = newClaimToken()
		got, err := claimIDs(ctx, g.rdb, idKeys, idHashes, token, g.cfg.IdempotencyTTL, g.cfg.PublishTimeout+claimSlack)
		if err != nil {
			g.throttledWarn(" redis", "job ids not claimed: answered 503", "key", k.Name, "err", err)
			g.write(c, k.Name, answer{status: http.StatusServiceUnavailable, retryAfter: time.Second,
				body: problemOf(http.StatusServiceUnavailable, TypeUnavailable, "Service unavailable",
					"the store of job ids cannot be reached; nothing was published; retry later")})
			return
		}
		for j, m := range idAt {
			claims[m] = got[j]
		}
	}
	toPublish := make([]queue.OutMsg, 0, len(msgs))
	pubAt := make([]int, 0, len(msgs)) // toPublish[p] is msgs[pubAt[p]]
	reused := 0
	for m, msg := range msgs {
		i := at[m]
		if claims[m] == idOther {
			reused++
			results[i].Status, results[i].Field = "reused", "id"
			results[i].Rule = fmt.Sprintf("the id is this tenant's id of another job within %s (gateway.idempotency_ttl): choose a new Idempotency-Key or id", fmtDur(g.cfg.IdempotencyTTL))
			continue
		}
		toPublish = append(toPublish, msg)
		pubAt = append(pubAt, m)
	}
	if reused > 0 && !array {
		p := problemOf(StatusIDReused, TypeIDReused, "Idempotency key reused", results[0].Rule)
		p.Field = "id"
		g.write(c, k.Name, answer{status: StatusIDReused, body: p})
		return
	}
	if len(toPublish) == 0 {
		p := problemOf(StatusIDReused, TypeIDReused, "Idempotency key reused", "every job's id is this tenant's id of another job; each item says")
		p.Items = results
		g.write(c, k.Name, answer{status: StatusIDReused, body: p})
		return
	}

	failed, maybeStored := g.publish(ctx, k, toPublish, pubAt, at, results)
	for _, m := range pubAt {
		if i := at[m]; claims[m] == idSame && results[i].Status == "accepted" {
			results[i].Duplicate = true // a retry: one job with the first
		}
	}
	if failed > 0 {
		g.unclaimUnsent(ctx, k, claims, at, results, idKeys, idHashes, idAt, token)
		var detail string
		switch {
		case maybeStored:
			detail = "JetStream did not acknowledge the job in time; retry with the same Idempotency-Key (a job may have been stored, and the key makes the retry one job)"
		case failed < len(toPublish):
			detail = "NATS could not be reached for some jobs, which were not published (results say which are in the stream); retry those"
		default:
			detail = "NATS cannot be reached: nothing was published; retry later"
		}
		p := problemOf(http.StatusServiceUnavailable, TypeUnavailable, "Service unavailable", detail)
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

// publish publishes msgs (msgs[p] is the request's message pubAt[p],
// item at[pubAt[p]]) and waits for JetStream's acknowledgements, at most
// publish_timeout, setting each item's result. It returns how many failed,
// and whether any of those may have been stored (false: NATS refused each
// before sending it).
func (g *Gateway) publish(ctx context.Context, k *apiKey, msgs []queue.OutMsg, pubAt, at []int, results []itemResult) (failed int, maybeStored bool) {
	if len(msgs) == 0 {
		return 0, false
	}
	pctx, cancel := context.WithTimeout(ctx, g.cfg.PublishTimeout)
	defer cancel()
	e := g.acks.start()
	pubs := g.pub.PublishMsgs(pctx, msgs)
	acked, timedOut := false, false
	for p, res := range pubs {
		i := at[pubAt[p]]
		if res.Err != nil {
			failed++
			results[i].Status = "unavailable"
			if results[i].unsent = notSent(res.Err); !results[i].unsent {
				maybeStored = true
			}
			timedOut = timedOut || errors.Is(res.Err, context.DeadlineExceeded)
			g.throttledWarn(" publish", "job not acknowledged by JetStream: answered 503", "key", k.Name, "err", res.Err)
			continue
		}
		acked = true
		results[i].Status, results[i].Duplicate = "accepted", res.Duplicate
	}
	timeout := time.Duration(0)
	if timedOut {
		timeout = g.cfg.PublishTimeout
	}
	g.acks.done(e, acked || timedOut, timeout)
	return failed, maybeStored
}

// unclaimUnsent releases the ids this request claimed (idNew) for jobs
// that were never sent (results[i].unsent): nothing was stored, so the id
// names no job, and a retry, with the same body or a corrected one, must
// be a new job rather than a duplicate or a 409 for idempotency_ttl. The
// ids it found held by the same job (idSame) are kept: the first request
// may have stored it, and so are those a retry of the same job found
// meanwhile (unclaim.lua: the retry deleted this request's claim). claims[m]
// and at[m] are msgs[m]'s; idKeys[2j:2j+2] and idHashes[j] are
// msgs[idAt[j]]'s record and claim. A failure is logged: the answer
// is a 503 anyway.
func (g *Gateway) unclaimUnsent(ctx context.Context, k *apiKey, claims []idClaim, at []int, results []itemResult, idKeys, idHashes []string, idAt []int, token string) {
	var keys, hashes []string
	for j, m := range idAt {
		if claims[m] == idNew && results[at[m]].unsent {
			keys, hashes = append(keys, idKeys[2*j], idKeys[2*j+1]), append(hashes, idHashes[j])
		}
	}
	if len(keys) == 0 {
		return
	}
	if _, err := unclaimIDs(ctx, g.rdb, keys, hashes, token); err != nil {
		g.throttledWarn(" redis", "job ids of unsent jobs not released: a retry within idempotency_ttl is answered as a duplicate (same body) or 409", "key", k.Name, "err", err)
	}
}

// notSent reports whether a publish failed before its message left (NATS
// closed, reconnecting with no room to buffer it) or found no stream: then
// nothing was stored. Not nats.ErrDisconnected: nats.go fails every publish
// still awaiting its acknowledgement with it when the connection comes
// back, those it had sent, which may be stored, and those it buffered
// while away and sends on reconnecting, which will be.
func notSent(err error) bool {
	for _, e := range []error{queue.ErrNotSent, nats.ErrConnectionClosed, nats.ErrConnectionReconnecting, nats.ErrReconnectBufExceeded,
		nats.ErrNoResponders, jetstream.ErrNoStreamResponse, nats.ErrConnectionDraining} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// traceHeader is the NATS header carrying the request's trace context: a
// recorded span's under the caller's trace with a tracer (end ends it),
// else the request's valid traceparent (and tracestate), else a new one.
func (g *Gateway) traceHeader(ctx context.Context, c *fasthttp.RequestCtx, k *apiKey, jobs int) (nats.Header, func()) {
	header := nats.Header{}
	end := func() {}
	if g.tracer != nil {
		// A recorded span under the caller's trace; the jobs carry it.
		tctx := propagation.TraceContext{}.Extract(ctx, requestCarrier{&c.Request.Header})
		_, span := g.tracer.Start(tctx, "notifier.gateway.accept", trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("notifier.gateway.key", k.Name), attribute.Int("notifier.gateway.jobs", jobs)))
		end = func() { span.End() }
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
	return header, end
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

// errBodyTooLarge is a body over MaxRequestBytes.
var errBodyTooLarge = fmt.Errorf("the body is more than %d bytes", MaxRequestBytes)

// bodyChunk is the most readBody allocates ahead of the bytes that
// arrived: a declared Content-Length is a promise, not memory to hold
// before the body comes (1,024 requests declaring 4 MiB would hold 4 GiB).
const bodyChunk = 64 << 10

// readBody reads the request body, at most MaxRequestBytes (else
// errBodyTooLarge), into a buffer of at most its Content-Length when
// given: bodyChunk at first, doubled as the bytes arrive. The server
// streams request bodies (Server), so one over the limit is read only up
// to it.
func readBody(c *fasthttp.RequestCtx) ([]byte, error) {
	rd := c.RequestBodyStream()
	if rd == nil {
		return append([]byte(nil), c.Request.Body()...), nil
	}
	if cl := c.Request.Header.ContentLength(); cl > 0 && cl <= MaxRequestBytes {
		buf := make([]byte, 0, min(cl, bodyChunk))
		for len(buf) < cl {
			if len(buf) == cap(buf) {
				buf = slices.Grow(buf, min(cap(buf), cl-len(buf)))
			}
			n, err := rd.Read(buf[len(buf):min(cap(buf), cl)])
			buf = buf[:len(buf)+n]
			switch {
			case err == io.EOF && len(buf) < cl:
				return nil, io.ErrUnexpectedEOF
			case err != nil && err != io.EOF:
				return nil, err
			}
		}
		return buf, nil
	}
	b, err := io.ReadAll(io.LimitReader(rd, MaxRequestBytes+1))
	if err == nil && len(b) > MaxRequestBytes {
		return nil, errBodyTooLarge
	}
	return b, err
}

// requestCarrier reads a W3C trace context from a request's headers. A
// tracestate over maxTracestate reads as none, as without a tracer: the
// span would carry it whole (W3C allows 32 members of 512 bytes), and so
// every job of the request, on to its provider.
type requestCarrier struct{ h *fasthttp.RequestHeader }

func (rc requestCarrier) Get(key string) string {
	v := string(rc.h.Peek(key))
	if strings.EqualFold(key, HeaderTracestate) && len(v) > maxTracestate {
		return ""
	}
	return v
}

func (rc requestCarrier) Set(string, string) {} // never written

func (rc requestCarrier) Keys() []string {
	var keys []string
	for k := range rc.h.All() {
		keys = append(keys, string(k))
	}
	return keys
}
