package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/notifier/notifier/gateway"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

var (
	policyRe = regexp.MustCompile(`^"(key|tenant|capacity|auth)";q=([0-9]+);w=([0-9]+)$`)
	limitRe  = regexp.MustCompile(`^"(key|tenant|capacity|auth)";r=([0-9]+);t=([0-9]+)$`)
)

// rateHeaders checks the draft's fields and returns r.
func rateHeaders(t *testing.T, r response, policy string) int {
	t.Helper()
	p := policyRe.FindStringSubmatch(r.header.Get("RateLimit-Policy"))
	l := limitRe.FindStringSubmatch(r.header.Get("RateLimit"))
	if p == nil || l == nil || p[1] != policy || l[1] != policy {
		t.Fatalf("answer %d: RateLimit-Policy %q, RateLimit %q; want policy %q", r.status,
			r.header.Get("RateLimit-Policy"), r.header.Get("RateLimit"), policy)
	}
	n, _ := strconv.Atoi(l[2])
	return n
}

func TestAcceptedJobIsInTheStreamWithTheKeysTenant(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{})
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	r := b.post(t, acmeKey, smsJob(""), "traceparent", tp)
	if r.status != http.StatusAccepted {
		t.Fatalf("POST: %d %s", r.status, r.body)
	}
	var a struct{ ID string }
	r.json(t, &a)
	if a.ID == "" {
		t.Fatal("no id in the 202")
	}
	if left := rateHeaders(t, r, "key"); left != 99 {
		t.Errorf("RateLimit r=%d after one job of a 100 burst, want 99", left)
	}
	msgs := b.stored(t)
	if len(msgs) != 1 {
		t.Fatalf("%d jobs in the stream, want 1", len(msgs))
	}
	m := msgs[0]
	if k, _ := queue.ParseJobSubject(m.Subject); !k.Fair || queueOf(t, m) != queue.JobSubjectFor("sms", "acme", false) {
		t.Errorf("subject %s (%s %s), want a fair lane of acme's", m.Subject, queue.HeaderTenant, m.Header.Get(queue.HeaderTenant))
	}
	j, err := queue.Decode(m.Subject, m.Data)
	if err != nil || j.ID != a.ID || j.Tenant != "acme" {
		t.Fatalf("stored job %+v, %v; want id %s of tenant acme", j, err, a.ID)
	}
	if got := m.Header.Get(jetstream.MsgIDHeader); got != queue.MsgID("acme", a.ID) {
		t.Errorf("Nats-Msg-Id %q, want the job id scoped by its tenant", got)
	}
	if got := m.Header["traceparent"]; len(got) != 1 || got[0] != tp {
		t.Errorf("traceparent header (lower case) %v, want the request's %s; headers %v", got, tp, m.Header)
	}
	if got := requests(t, b, "acme-app", "202"); got != 1 {
		t.Errorf("notifier_gateway_requests_total{key=acme-app,code=202} = %v, want 1", got)
	}
}

// requests is notifier_gateway_requests_total{key,code} of the bundle's gateway.
func requests(t *testing.T, b *bundle, key, code string) float64 {
	t.Helper()
	mfs, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "notifier_gateway_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["key"] == key && labels["code"] == code {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestIdempotencyKeyMakesOneJob(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{})
	for i := range 2 {
		r := b.post(t, acmeKey, smsJob(`,"id":"ignored"`), "Idempotency-Key", "order-42")
		if r.status != http.StatusAccepted {
			t.Fatalf("POST %d: %d %s", i, r.status, r.body)
		}
		var a struct {
			ID        string
			Duplicate bool
		}
		r.json(t, &a)
		if a.ID != "order-42" || a.Duplicate != (i == 1) {
			t.Fatalf("POST %d: %+v, want id order-42, duplicate %v", i, a, i == 1)
		}
	}
	// An array: <key>-<index>, and a retry of it is no new job either.
	arr := "[" + smsJob("") + "," + smsJob("") + "]"
	for range 2 {
		if r := b.post(t, acmeKey, arr, "Idempotency-Key", "batch-7"); r.status != http.StatusAccepted {
			t.Fatalf("POST array: %d %s", r.status, r.body)
		}
	}
	var ids []string
	for _, m := range b.stored(t) {
		ids = append(ids, m.Header.Get(jetstream.MsgIDHeader))
	}
	if strings.Join(ids, " ") != "acme/order-42 acme/batch-7-0 acme/batch-7-1" {
		t.Fatalf("stream holds %v, want acme/order-42 acme/batch-7-0 acme/batch-7-1", ids)
	}
	if r := b.post(t, acmeKey, smsJob(""), "Idempotency-Key", "no spaces"); r.status != http.StatusBadRequest {
		t.Fatalf("a bad Idempotency-Key: %d, want 400", r.status)
	}
}

func TestTheBodyCannotChooseTheTenant(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{})
	r := b.post(t, acmeKey, smsJob(`,"tenant":"bank"`))
	var p problem
	r.json(t, &p)
	if r.status != http.StatusBadRequest || p.Field != "tenant" || p.Type != gateway.TypeInvalidJob {
		t.Fatalf("acme's key with tenant bank: %d %+v, want 400 on tenant", r.status, p)
	}
	// The default tenant's key cannot name one either.
	if r := b.post(t, otherKey, smsJob(`,"tenant":"acme"`)); r.status != http.StatusBadRequest {
		t.Fatalf("the default tenant's key with tenant acme: %d, want 400", r.status)
	}
	// Naming its own tenant is fine.
	if r := b.post(t, acmeKey, smsJob(`,"tenant":"acme"`)); r.status != http.StatusAccepted {
		t.Fatalf("acme's key with tenant acme: %d %s", r.status, r.body)
	}
	if r := b.post(t, otherKey, smsJob("")); r.status != http.StatusAccepted {
		t.Fatalf("the default tenant's key: %d %s", r.status, r.body)
	}
	for _, m := range b.stored(t) {
		if k, _ := queue.ParseJobSubject(m.Subject); k.Tenant == "bank" {
			t.Fatalf("a job was published as tenant bank: %s", m.Subject)
		}
	}
	if n := len(b.stored(t)); n != 2 {
		t.Fatalf("%d jobs stored, want 2", n)
	}
}

func TestBadKeysAndTheFailedAuthenticationLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{AuthFailures: gateway.AuthFailures{Limit: 3, Window: time.Minute}})
	r := b.post(t, "", smsJob(""))
	if r.status != http.StatusUnauthorized || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("no key: %d %q", r.status, r.header.Get("WWW-Authenticate"))
	}
	if left := rateHeaders(t, r, "auth"); left != 2 {
		t.Errorf("auth r=%d after one failure of 3, want 2", left)
	}
	for i := range 2 {
		if r := b.post(t, "guess-"+strconv.Itoa(i), smsJob("")); r.status != http.StatusUnauthorized {
			t.Fatalf("bad key %d: %d", i, r.status)
		}
	}
	r = b.post(t, "guess-3", smsJob(""))
	var p problem
	r.json(t, &p)
	ra, _ := strconv.Atoi(r.header.Get("Retry-After"))
	if r.status != http.StatusTooManyRequests || p.Type != gateway.TypeAuthFailures || ra < 1 || ra > 60 {
		t.Fatalf("the 4th failure: %d %+v Retry-After %q, want 429 too-many-auth-failures", r.status, p, r.header.Get("Retry-After"))
	}
	// Even the right key from that address now waits: a guess that hits
	// is not told so.
	if r := b.post(t, acmeKey, smsJob("")); r.status != http.StatusTooManyRequests {
		t.Fatalf("the right key from a blocked address: %d, want 429", r.status)
	}
	if n := len(b.stored(t)); n != 0 {
		t.Fatalf("%d jobs stored, want none", n)
	}
	if got := requests(t, b, "unauthenticated", "401"); got != 3 {
		t.Errorf("requests{key=unauthenticated,code=401} = %v, want 3", got)
	}
	for _, l := range []string{"guess-", acmeKey} {
		if strings.Contains(b.logs.String(), l) {
			t.Errorf("a key was logged: %s", b.logs.String())
		}
	}
}

func TestBadBodies(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{Keys: keys(1000, 5)})
	big := smsJob(`,"data":{"x":"` + strings.Repeat("a", queue.MaxJobBytes) + `"}`)
	cases := []struct {
		name, body, ctype string
		status            int
		typ, field        string
	}{
		{"not json", `hello`, "", 400, gateway.TypeInvalidJob, ""},
		{"broken json", `{"user_id":`, "", 400, gateway.TypeInvalidJob, ""},
		{"missing to", `{"user_id":"u1","channel":"sms","body":"x"}`, "", 400, gateway.TypeInvalidJob, "to"},
		{"bad channel", `{"user_id":"u1","channel":"fax","to":"+14155550123","body":"x"}`, "", 400, gateway.TypeInvalidJob, "channel"},
		{"bad phone", `{"user_id":"u1","channel":"sms","to":"12","body":"x"}`, "", 400, gateway.TypeInvalidJob, "to"},
		{"empty array", `[]`, "", 400, gateway.TypeInvalidJob, ""},
		{"oversize job", big, "", 413, gateway.TypeTooLarge, ""},
		{"over the burst", "[" + strings.Repeat(smsJob("")+",", 5) + smsJob("") + "]", "", 413, gateway.TypeBatchOverBurst, ""},
		{"over 1000", "[" + strings.Repeat("{},", 1000) + "{}]", "", 413, gateway.TypeTooLarge, ""},
		{"text/plain", smsJob(""), "text/plain", 415, gateway.TypeUnsupported, ""},
	}
	for _, c := range cases {
		hdr := []string{}
		if c.ctype != "" {
			hdr = []string{"Content-Type", c.ctype}
		}
		r := b.post(t, acmeKey, c.body, hdr...)
		var p problem
		r.json(t, &p)
		if r.status != c.status || p.Type != c.typ || p.Field != c.field || p.Status != c.status {
			t.Errorf("%s: %d %+v, want %d %s field %q", c.name, r.status, p, c.status, c.typ, c.field)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s: Content-Type %q", c.name, ct)
		}
		if c.field != "" && p.Rule == "" {
			t.Errorf("%s: no rule named", c.name)
		}
		if strings.Contains(string(r.body), "+14155550123") {
			t.Errorf("%s: the answer echoes the recipient: %s", c.name, r.body)
		}
		rateHeaders(t, r, "key")
	}
	if n := len(b.stored(t)); n != 0 {
		t.Fatalf("%d jobs stored, want none", n)
	}
}

func TestBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{Keys: keys(0.01, 5)}) // no refill to speak of
	// Valid and invalid items: the valid ones are published, each item says.
	r := b.post(t, acmeKey, "["+smsJob("")+`,{"user_id":"u1","channel":"sms","to":"bad","body":"x"}`+","+smsJob("")+"]")
	var res []map[string]any
	r.json(t, &res)
	if r.status != http.StatusAccepted || len(res) != 3 || res[0]["status"] != "accepted" || res[1]["status"] != "invalid" ||
		res[1]["field"] != "to" || res[2]["status"] != "accepted" {
		t.Fatalf("mixed array: %d %s", r.status, r.body)
	}
	if left := rateHeaders(t, r, "key"); left != 2 {
		t.Fatalf("r=%d after a batch of 3 of a burst of 5, want 2 (the invalid item costs its token)", left)
	}
	// 3 more than the 2 left: all or nothing, so nothing.
	r = b.post(t, acmeKey, "["+smsJob("")+","+smsJob("")+","+smsJob("")+"]")
	var p problem
	r.json(t, &p)
	if r.status != http.StatusTooManyRequests || p.Type != gateway.TypeQuotaExceeded || r.header.Get("Retry-After") == "" {
		t.Fatalf("3 jobs with 2 tokens left: %d %s", r.status, r.body)
	}
	if left := rateHeaders(t, r, "key"); left != 2 {
		t.Fatalf("r=%d after a refused batch, want the 2 still there", left)
	}
	// The 2 left are still there.
	if r := b.post(t, acmeKey, "["+smsJob("")+","+smsJob("")+"]"); r.status != http.StatusAccepted {
		t.Fatalf("2 jobs with 2 tokens left: %d %s", r.status, r.body)
	}
	if n := len(b.stored(t)); n != 4 {
		t.Fatalf("%d jobs stored, want 4", n)
	}
	// An array of invalid items only: 400 naming each.
	b2 := setup(t, gateway.Config{})
	r = b2.post(t, acmeKey, `[{"channel":"sms"},{"user_id":"u"}]`)
	r.json(t, &p)
	if r.status != http.StatusBadRequest || len(p.Items) != 2 || p.Items[0]["field"] != "id" && p.Items[0]["field"] != "user_id" {
		t.Fatalf("all invalid: %d %s", r.status, r.body)
	}
}

func TestRetryAfterIsHonest(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{Keys: keys(0.5, 1)}) // one job per 2 s
	if r := b.post(t, acmeKey, smsJob("")); r.status != http.StatusAccepted {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	r := b.post(t, acmeKey, smsJob(""))
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("second at once: %d, want 429", r.status)
	}
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 2 {
		t.Fatalf("Retry-After %q, want whole seconds from 1 to 2", r.header.Get("Retry-After"))
	}
	time.Sleep(time.Duration(ra) * time.Second) // what a client told to wait does
	if r := b.post(t, acmeKey, smsJob("")); r.status != http.StatusAccepted {
		t.Fatalf("after waiting Retry-After %ds: %d %s", ra, r.status, r.body)
	}
	if !strings.Contains(b.logs.String(), `"msg":"api key limited"`) {
		t.Errorf("no log line for the limited key: %s", b.logs.String())
	}
}

func TestTheLimitHoldsAcrossTwoInstances(t *testing.T) {
	t.Parallel()
	const rate, burst = 20.0, 10
	b := setup(t, gateway.Config{Keys: keys(rate, burst)})
	gw2, _ := b.newGateway(t)
	srv2 := serve(t, gw2, b.recording).URL
	counts, elapsed := hammerPosts(t, 1500*time.Millisecond, 6, func(w int) response {
		base := b.srv.URL
		if w%2 == 1 {
			base = srv2
		}
		return post(t, base, acmeKey, smsJob(""))
	}, map[int]func(int, response) bool{http.StatusAccepted: nil, http.StatusTooManyRequests: nil})
	accepted := counts[http.StatusAccepted]
	checkAccepted(t, accepted, rate, burst, elapsed)
	if counts[http.StatusTooManyRequests] == 0 {
		t.Fatal("nothing was limited")
	}
	if n := int64(len(b.stored(t))); n != accepted {
		t.Fatalf("%d jobs stored, %d accepted", n, accepted)
	}
}

func TestNATSDownGives503AndNo202IsLost(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{PublishTimeout: 500 * time.Millisecond})
	var mu sync.Mutex
	var ids []string
	var unavailable atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := b.post(t, acmeKey, smsJob(""))
				switch r.status {
				case http.StatusAccepted:
					var a struct{ ID string }
					r.json(t, &a)
					mu.Lock()
					ids = append(ids, a.ID)
					mu.Unlock()
				case http.StatusServiceUnavailable:
					if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 {
						t.Errorf("503 Retry-After %q", r.header.Get("Retry-After"))
					}
					unavailable.Add(1)
				case http.StatusTooManyRequests:
					time.Sleep(10 * time.Millisecond)
				default:
					t.Errorf("answer %d %s", r.status, r.body)
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	b.nats.Stop()
	testenv.WaitFor(t, 10*time.Second, "503s while NATS is down", func() bool { return unavailable.Load() >= 3 })
	if r := get(t, b.srv.URL+"/readyz"); r.status != http.StatusServiceUnavailable {
		t.Errorf("/readyz with NATS down: %d", r.status)
	}
	b.nats.Start()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	testenv.WaitFor(t, 10*time.Second, "the stream to be readable", func() bool {
		_, err := b.js.Stream(ctx(t), "NOTIFY")
		return err == nil
	})
	in := map[string]bool{}
	for _, m := range b.stored(t) {
		in[m.Header.Get(jetstream.MsgIDHeader)] = true
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if !in[queue.MsgID("acme", id)] {
			t.Errorf("job %s was answered 202 and is not in the stream", id)
		}
	}
	if len(ids) == 0 {
		t.Fatal("nothing was accepted")
	}
	t.Logf("%d accepted, %d answered 503", len(ids), unavailable.Load())
}

func TestRateLimitHeadersAndLegacy(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{Keys: keys(10, 50), LegacyHeaders: true})
	r := b.post(t, acmeKey, smsJob(""))
	if got := r.header.Get("RateLimit-Policy"); got != `"key";q=50;w=5` {
		t.Errorf(`RateLimit-Policy %q, want "key";q=50;w=5`, got)
	}
	if got := r.header.Get("RateLimit"); got != `"key";r=49;t=1` {
		t.Errorf(`RateLimit %q, want "key";r=49;t=1`, got)
	}
	if r.header.Get("X-RateLimit-Limit") != "50" || r.header.Get("X-RateLimit-Remaining") != "49" || r.header.Get("X-RateLimit-Reset") != "1" {
		t.Errorf("legacy headers %v", r.header)
	}
}

func TestTraceparentIsKeptOrStarted(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{})
	for _, tp := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		if r := b.post(t, acmeKey, smsJob(""), "traceparent", tp); r.status != http.StatusAccepted {
			t.Fatalf("traceparent %q: %d", tp, r.status)
		}
	}
	valid := regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`)
	seen := map[string]bool{}
	for _, m := range b.stored(t) {
		tp := m.Header.Get("traceparent")
		if !valid.MatchString(tp) || strings.HasPrefix(tp, "00-0000000000000000") || seen[tp] {
			t.Errorf("started traceparent %q: not a new valid one", tp)
		}
		seen[tp] = true
	}
}

// TestTracingRecordsTheAcceptAndPassesItOn: with a tracer (tracing on),
// an accepted request records a span "notifier.gateway.accept" under the
// caller's traceparent, and the job's NATS message carries that span's
// context for the dispatcher to continue.
func TestTracingRecordsTheAcceptAndPassesItOn(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{})
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b.tracer = tp
	gw, _ := b.newGateway(t)
	b.srv = serve(t, gw, b.recording)
	const traceID, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	if r := b.post(t, acmeKey, smsJob(""), "traceparent", "00-"+traceID+"-"+parent+"-01"); r.status != http.StatusAccepted {
		t.Fatalf("post: %d", r.status)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != "notifier.gateway.accept" || spans[0].Parent.SpanID().String() != parent ||
		spans[0].SpanContext.TraceID().String() != traceID {
		t.Fatalf("spans %+v, want one notifier.gateway.accept under %s in trace %s", spans, parent, traceID)
	}
	want := "00-" + traceID + "-" + spans[0].SpanContext.SpanID().String() + "-01"
	if msgs := b.stored(t); len(msgs) != 1 || msgs[0].Header.Get("traceparent") != want {
		t.Fatalf("job traceparent %v, want the gateway span's %q", msgs, want)
	}
}

// TestTracestateIsBounded: a job carries the request's tracestate only up
// to 512 bytes (SPEC §9), with tracing on as off. With tracing on the
// gateway's span took the request's whole tracestate (W3C lets it hold 32
// members of 512 bytes) and every job carried it, to the stream and on to
// the provider's request: a client's 8 KB on each of its jobs (found in
// review).
func TestTracestateIsBounded(t *testing.T) {
	t.Parallel()
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	members := make([]string, 30)
	for i := range members {
		members[i] = fmt.Sprintf("v%d=%s", i, strings.Repeat("a", 250))
	}
	long, short := strings.Join(members, ","), "acme=t61rcWkgMzE"
	for _, tracing := range []bool{false, true} {
		b := setup(t, gateway.Config{})
		if tracing {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			b.tracer = tp
			gw, _ := b.newGateway(t)
			b.srv = serve(t, gw, b.recording)
		}
		for _, ts := range []string{long, short} {
			if r := b.post(t, acmeKey, smsJob(""), "traceparent", traceparent, "tracestate", ts); r.status != http.StatusAccepted {
				t.Fatalf("tracing %v: post: %d %s", tracing, r.status, r.body)
			}
		}
		msgs := b.stored(t)
		if len(msgs) != 2 {
			t.Fatalf("tracing %v: %d jobs stored, want 2", tracing, len(msgs))
		}
		if got := msgs[0].Header.Get("tracestate"); len(got) > 512 {
			t.Errorf("tracing %v: a job carries a tracestate of %d bytes, want at most 512", tracing, len(got))
		}
		if got := msgs[1].Header.Get("tracestate"); got != short {
			t.Errorf("tracing %v: tracestate %q, want the request's %q", tracing, got, short)
		}
	}
}

func TestTopCountsRejectionsPerKey(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{Keys: keys(0.01, 1)})
	for range 4 {
		b.post(t, acmeKey, smsJob(""))
	}
	b.post(t, "wrong", smsJob(""))
	c, cancel := contextWithCancel(t)
	done := make(chan error, 1)
	go func() { done <- b.gw.Run(c) }()
	cancel() // Run flushes once more when stopped
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rows, err := gateway.TopRejected(ctx(t), b.rdb, b.prefix, time.Now(), time.Hour, 10)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rows) != "[{acme-app 3} {unauthenticated 1}]" {
		t.Fatalf("top %v, want acme-app 3, unauthenticated 1", rows)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{})
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.json"} {
		if r := get(t, b.srv.URL+path); r.status != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, r.status, r.body)
		}
	}
}

func TestAKeyOverItsLimitIsRefusedWithoutRedis(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{Keys: keys(0.01, 1)})
	if r := b.post(t, acmeKey, smsJob("")); r.status != http.StatusAccepted {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	b.redis.Stop()
	// The bucket as the first answer left it refuses the next job: no
	// Redis needed for the 429 (a job it would grant would get a 503).
	r := b.post(t, acmeKey, smsJob(""))
	ra, _ := strconv.Atoi(r.header.Get("Retry-After"))
	if r.status != http.StatusTooManyRequests || ra < 99 || ra > 100 {
		t.Fatalf("with Redis stopped: %d Retry-After %q, want 429 after about 100 s", r.status, r.header.Get("Retry-After"))
	}
	if left := rateHeaders(t, r, "key"); left != 0 {
		t.Errorf("r=%d, want 0", left)
	}
	// The other key's bucket is not known: Redis is needed, and down.
	if r := b.post(t, otherKey, smsJob("")); r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("another key with Redis stopped: %d, want 503 with Retry-After", r.status)
	}
}

// TestCategoryPicksTheLane: a job naming its category is published on that
// category's lane of the key's tenant; a marketing job asking for the
// priority lane is a 400 on category, and nothing is published for it.
func TestCategoryPicksTheLane(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{})
	if r := b.post(t, acmeKey, smsJob(`,"category":"marketing"`)); r.status != http.StatusAccepted {
		t.Fatalf("a marketing job: %d %s", r.status, r.body)
	}
	if r := post(t, b.srv.URL, acmeKey, smsJob(`,"category":"transactional"`)); r.status != http.StatusAccepted {
		t.Fatalf("a transactional job: %d %s", r.status, r.body)
	}
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+"/v1/notifications?priority=high", strings.NewReader(smsJob(`,"category":"marketing"`)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+acmeKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"field":"category"`) {
		t.Fatalf("a marketing job on the priority lane: %d %s, want 400 on category", resp.StatusCode, body)
	}
	var subjects []string
	for _, m := range b.stored(t) {
		subjects = append(subjects, queueOf(t, m))
	}
	slices.Sort(subjects)
	if want := []string{"notify.jobs.sms.t.acme.marketing", "notify.jobs.sms.t.acme.transactional"}; !slices.Equal(subjects, want) {
		t.Fatalf("stored on %v, want %v", subjects, want)
	}
}

// TestServerBodiesAndRoutes: what the gateway's own server (Server) does
// with what net/http used to handle: a body over MaxRequestBytes, declared
// or chunked, is the gateway's 413 problem and the connection is closed; a
// small chunked body is read whole, and so is one sent after "Expect:
// 100-continue"; an empty Idempotency-Key is a 400;
// headers over 16 KiB are a 431; another path is 404 and another method
// 405 with Allow.
func TestServerBodiesAndRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{})
	plain := serve(t, b.gw, nil).URL // not recorded: these answers are not the API's
	huge := `{"user_id":"u1","channel":"sms","to":"+14155550123","body":"` + strings.Repeat("a", gateway.MaxRequestBytes) + `"}`
	for _, chunked := range []bool{false, true} {
		req, err := http.NewRequest(http.MethodPost, plain+"/v1/notifications", io.NopCloser(strings.NewReader(huge)))
		if err != nil {
			t.Fatal(err)
		}
		if !chunked {
			req.ContentLength = int64(len(huge))
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+acmeKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("chunked %v: %v", chunked, err)
		}
		var p problem
		err = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge || p.Type != gateway.TypeTooLarge || !resp.Close {
			t.Errorf("chunked %v: %d %+v (%v), closed %v; want 413 %s and the connection closed", chunked, resp.StatusCode, p, err, resp.Close, gateway.TypeTooLarge)
		}
	}
	req, err := http.NewRequest(http.MethodPost, plain+"/v1/notifications", io.NopCloser(strings.NewReader(smsJob(""))))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+acmeKey)
	resp, err := http.DefaultClient.Do(req) // no ContentLength: chunked
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Errorf("a small chunked body: %d, want 202", resp.StatusCode)
	}
	// curl sends a body over 1 KiB after "Expect: 100-continue".
	batch := "[" + strings.Repeat(smsJob("")+",", 9) + smsJob("") + "]"
	req, err = http.NewRequest(http.MethodPost, plain+"/v1/notifications", strings.NewReader(batch))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+acmeKey)
	req.Header.Set("Expect", "100-continue")
	expecting := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 5 * time.Second}}
	defer expecting.CloseIdleConnections()
	if resp, err = expecting.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Errorf("a batch of %d bytes after Expect: 100-continue: %d, want 202", len(batch), resp.StatusCode)
	}
	if r := post(t, plain, acmeKey, smsJob(""), "Idempotency-Key", ""); r.status != http.StatusBadRequest {
		t.Errorf("an empty Idempotency-Key: %d %s, want 400", r.status, r.body)
	}
	if r := post(t, plain, acmeKey, smsJob(""), "X-Padding", strings.Repeat("p", 20<<10)); r.status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("20 KiB of headers: %d, want 431", r.status)
	}
	if r := get(t, plain+"/v2/nothing"); r.status != http.StatusNotFound {
		t.Errorf("another path: %d, want 404", r.status)
	}
	if r := get(t, plain+"/v1/notifications"); r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") != http.MethodPost {
		t.Errorf("GET /v1/notifications: %d Allow %q, want 405 and POST", r.status, r.header.Get("Allow"))
	}
	if n := len(b.stored(t)); n != 11 {
		t.Errorf("%d jobs stored, want the chunked one and the batch of 10", n)
	}
}

// TestRefusalsOfLargeBodiesReachTheClient: an answer given without reading
// a large body (a 429 from the bound of a key over its limit, a 401) still
// reaches the client, declared or chunked: the gateway drops what the
// client sends before closing, so the close cannot reset the connection
// under the answer. Several rounds, since a reset is a race.
func TestRefusalsOfLargeBodiesReachTheClient(t *testing.T) {
	t.Parallel()
	b := setup(t, gateway.Config{Keys: keys(0.01, 1)})
	plain := serve(t, b.gw, nil).URL // not recorded: the 401s of this test are not the API's
	b.post(t, acmeKey, smsJob(""))   // the one token
	if r := b.post(t, acmeKey, smsJob("")); r.status != http.StatusTooManyRequests {
		t.Fatalf("second job: %d, want 429", r.status)
	}
	big := "[" + strings.Repeat(smsJob("")+",", 6000) + smsJob("") + "]" // about 600 KiB
	for round := range 5 {
		for _, c := range []struct {
			key     string
			chunked bool
			want    int
		}{{acmeKey, false, 429}, {acmeKey, true, 429}, {"wrong-key", false, 401}} {
			req, err := http.NewRequest(http.MethodPost, plain+"/v1/notifications", io.NopCloser(strings.NewReader(big)))
			if err != nil {
				t.Fatal(err)
			}
			if !c.chunked {
				req.ContentLength = int64(len(big))
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+c.key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("round %d, %d expected, chunked %v: %v", round, c.want, c.chunked, err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Fatalf("round %d, chunked %v: %d, want %d", round, c.chunked, resp.StatusCode, c.want)
			}
		}
	}
}
