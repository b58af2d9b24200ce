package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/notifier/notifier/dispatch"
	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/internal/localenv"
	"github.com/notifier/notifier/internal/stats"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/userlimit"
)

// Config is a demo run. Jobs (100 to 1,000,000) and Users (at least 1)
// must be set; the CLI's defaults are 2,000 jobs for 300 users, seed 1.
type Config struct {
	Jobs, Users int
	Seed        uint64 // of the generated burst
	Version     string // the notifier's, sent to the sandbox as User-Agent
	// Progress, when set, is called every 250 ms while the jobs drain.
	Progress func(Progress)
}

// Validate reports a Config Run refuses.
func (c Config) Validate() error {
	if c.Jobs < 100 || c.Jobs > 1_000_000 || c.Users < 1 {
		return fmt.Errorf("--jobs must be from 100 to 1000000 and --users at least 1")
	}
	return nil
}

// Result is what a demo run did, for Print.
type Result struct {
	Elapsed     time.Duration
	Published   int  // jobs published: the burst and the codes that went out
	Interrupted bool // the context ended before every job had its outcome
	burst       []demoMsg
	codes       []demoCode
	reg         prometheus.Gatherer
	sb          *localenv.Sandbox
}

// Progress is the state of a run in progress.
type Progress struct {
	Elapsed time.Duration
	reg     prometheus.Gatherer
	sb      *localenv.Sandbox
}

// Line is the live status line, no wider than width: the most detailed
// of its forms that fits.
func (p Progress) Line(width int) string { return progressLine(width, p.Elapsed, p.reg, p.sb) }

// demoLane is one sandbox provider of the demo.
type demoLane struct {
	name, channel, path string
	rate                float64
	failEvery           int
}

var demoLanes = []demoLane{
	{name: "sms-sandbox", channel: "sms", path: "/sms", rate: 100, failEvery: 53},
	{name: "push-sandbox", channel: "push", path: "/push", rate: 250},
	{name: "email-sandbox", channel: "email", path: "/email", rate: 50},
}

// demoCaps are the per-user caps of the demo: push dropped over 5, sms
// deferred over 3 per 2 s, email dropped over 10.
var demoCaps = map[string]userlimit.Rule{
	"push":  {Limit: 5, Window: time.Hour, Algorithm: userlimit.SlidingLog, OnExceed: userlimit.Drop},
	"sms":   {Limit: 3, Window: 2 * time.Second, Algorithm: userlimit.SlidingLog, OnExceed: userlimit.Defer},
	"email": {Limit: 10, Window: time.Hour, Algorithm: userlimit.SlidingWindow, OnExceed: userlimit.Drop},
}

var demoGlobal = globallimit.Config{Rate: 300, Burst: 100}

// The demo's two tenants: the blast is the burst (every valid job of it);
// the codes are SMS one-time codes, on the normal lane, published from
// demoCodesAfter after the dispatcher starts at demoCodeRate a second. With
// equal weights each tenant with jobs waiting gets half the SMS contract:
// the codes, needing far less, do not wait behind the blast.
const (
	demoBlastTenant = "shop"
	demoCodesTenant = "bank"
	demoCodesAfter  = 500 * time.Millisecond
	demoCodeRate    = 10
)

var demoWeights = map[string]float64{demoBlastTenant: 1, demoCodesTenant: 1}

// demoCodeCount is how many of the demo's jobs are the late tenant's
// codes: one in 50, from 10 to 40 (1 to 4 s at demoCodeRate), so the
// codes arrive while the blast's SMS are still waiting; the burst is the
// rest.
func demoCodeCount(jobs int) int { return min(max(jobs/50, 10), 40) }

// Banner prints what a run of f will do: its limits and its tenants.
func Banner(out io.Writer, f Config) {
	fmt.Fprintf(out, "notifier demo — %d jobs for %d users, through the three limits:\n", f.Jobs, f.Users)
	fmt.Fprintf(out, "  per-user caps   push 5/h (drop) · sms 3 per 2s (defer) · email 10/h (drop)\n")
	fmt.Fprintf(out, "  fleet bucket    %g jobs/s, burst %d\n", demoGlobal.Rate, demoGlobal.Burst)
	fmt.Fprintf(out, "  provider queues ")
	for i, l := range demoLanes {
		if i > 0 {
			fmt.Fprint(out, " · ")
		}
		fmt.Fprintf(out, "%s %g/s", l.channel, l.rate)
	}
	fmt.Fprintf(out, "  (the sandbox answers 429 over a contract; sms fails 1 request in %d with 503)\n", demoLanes[0].failEvery)
	fmt.Fprintf(out, "  tenants         %s: the burst · %s: %d sms one-time codes from %s in, %d/s (weights 1:1)\n\n",
		demoBlastTenant, demoCodesTenant, demoCodeCount(f.Jobs), inspect.FormatDuration(demoCodesAfter), demoCodeRate)
}

// Run runs the demo: an embedded NATS JetStream server, the sandbox
// providers, a dispatcher on in-memory limits; the burst published at
// once, the codes from demoCodesAfter on; until every job has its outcome
// or ctx ends.
func Run(ctx context.Context, f Config) (*Result, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	srv, err := localenv.StartNATS()
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	sb, err := localenv.StartSandbox(localenv.SandboxOptions{})
	if err != nil {
		return nil, err
	}
	defer sb.Close()

	var pcfgs []providers.Config
	for _, l := range demoLanes {
		pcfgs = append(pcfgs, providers.Config{
			Name: l.name, Channel: l.channel, Default: true, Kind: "webhook", URL: sb.Lane(l.path, int(l.rate), l.failEvery),
			Rate: l.rate, MaxQueueDelay: 2 * time.Second, Timeout: 2 * time.Second,
		}.WithDefaults())
	}
	qcfg := queue.Config{URL: srv.URL()}.WithDefaults()
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		return nil, fmt.Errorf("connect to embedded NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if err := queue.EnsureStreams(ctx, js, qcfg, 1); err != nil {
		return nil, err
	}
	cons, err := queue.NewConsumer(ctx, js, qcfg, queue.ConsumerConfig{})
	if err != nil {
		return nil, err
	}
	reg, err := providers.NewRegistry(pcfgs, providers.Options{Version: f.Version})
	if err != nil {
		return nil, err
	}
	defer reg.Close()

	burst := demoBurst(f)
	pub := queue.NewPublisher(js)
	batch := pub.NewBatch(512, 0)
	for i := range burst {
		m := &burst[i]
		m.at = time.Now()
		if err := batch.PublishRaw(ctx, m.subject, m.data, m.id); err != nil {
			return nil, err
		}
	}
	if _, err := batch.Wait(ctx); err != nil {
		return nil, err
	}

	promReg := prometheus.NewRegistry()
	metrics := dispatch.NewMetrics(promReg)
	global := demoGlobal
	limits, err := limits.Memory(limits.Config{DedupTTL: time.Hour, Global: &global}, 1)
	if err != nil {
		return nil, err
	}
	d, err := dispatch.New(dispatch.Options{
		Workers:       64,
		Retry:         dispatch.RetryConfig{MaxAttempts: 5, BaseDelay: 200 * time.Millisecond, MaxDelay: 2 * time.Second},
		UserLimits:    demoCaps,
		FetchWait:     200 * time.Millisecond,
		TenantWeights: demoWeights,
		Source:        cons,
		Router:        cons.Router(),
		DeadLetters:   pub,
		Providers:     reg,
		Limits:        limits,
		Metrics:       metrics,
		Logger:        slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, err
	}
	start := time.Now()
	dctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(dctx) }()
	codes := demoCodes(demoCodeCount(f.Jobs))
	codesDone := make(chan struct{})
	var codesErr error
	go func() {
		defer close(codesDone)
		codesErr = publishCodes(dctx, pub, codes)
	}()

	stream, err := js.Stream(ctx, qcfg.Stream)
	if err != nil {
		stop()
		return nil, fmt.Errorf("job stream: %w", err)
	}
	finished := func() bool {
		select {
		case <-codesDone:
		default:
			return false // codes still to come
		}
		info, err := stream.Info(ctx)
		return err == nil && info.State.Msgs == 0 && d.InFlight() == 0
	}
	tick := time.NewTicker(250 * time.Millisecond)
	interrupted := false
loop:
	for {
		select {
		case <-ctx.Done():
			interrupted = true
			break loop
		case <-tick.C:
		}
		if f.Progress != nil {
			f.Progress(Progress{Elapsed: time.Since(start), reg: promReg, sb: sb})
		}
		if finished() {
			break
		}
	}
	tick.Stop()
	elapsed := time.Since(start)
	stop()
	<-codesDone
	if err := <-done; err != nil {
		return nil, err
	}
	if codesErr != nil && !interrupted {
		return nil, codesErr
	}
	published := len(burst)
	for _, c := range codes {
		if !c.at.IsZero() {
			published++
		}
	}
	return &Result{Elapsed: elapsed, Published: published, Interrupted: interrupted, burst: burst, codes: codes, reg: promReg, sb: sb}, nil
}

// demoCode is one of the late tenant's one-time codes; at is when it was
// published (zero: not published).
type demoCode struct {
	job *queue.Job
	at  time.Time
}

// demoCodes are n one-time codes of the late tenant, each for its own user
// (so no per-user cap holds them).
func demoCodes(n int) []demoCode {
	out := make([]demoCode, n)
	for i := range out {
		out[i].job = &queue.Job{
			ID:      fmt.Sprintf("code-%03d", i),
			UserID:  fmt.Sprintf("bank-user-%d", i),
			Channel: "sms",
			To:      SyntheticRecipient("sms", 1_000_000+i),
			Body:    fmt.Sprintf("Your bank code is %06d", (i*7919+12345)%1_000_000),
			Tenant:  demoCodesTenant,
		}
	}
	return out
}

// publishCodes publishes the codes from demoCodesAfter on, demoCodeRate
// a second, each stamped with its publish time, until done or ctx ends.
func publishCodes(ctx context.Context, pub *queue.Publisher, codes []demoCode) error {
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(demoCodesAfter):
	}
	tick := time.NewTicker(time.Second / demoCodeRate)
	defer tick.Stop()
	for i := range codes {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
		c := &codes[i]
		now := time.Now()
		c.job.CreatedAt = now.UTC()
		c.job.ExpiresAt = now.Add(5 * time.Minute).UTC()
		if _, err := pub.Publish(ctx, c.job, false); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("publish code %d: %w", i, err)
		}
		c.at = now
	}
	return nil
}

// demoTenantReport prints each tenant's jobs sent, and how long the SMS of
// each waited from publish to the provider's acceptance: the late
// tenant's codes against the blast's SMS.
func demoTenantReport(w io.Writer, burst []demoMsg, codes []demoCode, reg prometheus.Gatherer, sb *localenv.Sandbox) {
	sent := gather(reg).by("notifier_tenant_sent_total", "tenant", nil)
	smsPath := demoLanes[0].path
	var blastWaits, codeWaits []time.Duration
	for _, m := range burst {
		if m.channel == "sms" && m.kind == "ok" {
			if at, ok := sb.AcceptedAt(smsPath, m.id); ok {
				blastWaits = append(blastWaits, at.Sub(m.at))
			}
		}
	}
	for _, c := range codes {
		if at, ok := sb.AcceptedAt(smsPath, c.job.MsgID()); ok && !c.at.IsZero() {
			codeWaits = append(codeWaits, at.Sub(c.at))
		}
	}
	slices.Sort(blastWaits)
	slices.Sort(codeWaits)
	waits := func(ds []time.Duration) string {
		if len(ds) == 0 {
			return "-"
		}
		return fmt.Sprintf("%s / %s", fmtSeconds(stats.Percentile(ds, 0.50).Seconds()), fmtSeconds(stats.Percentile(ds, 0.95).Seconds()))
	}
	verdict := ""
	if len(codeWaits) > 0 && len(blastWaits) > 0 && stats.Percentile(codeWaits, 0.95) < stats.Percentile(blastWaits, 0.50) {
		verdict = ": not stuck behind the blast"
	}
	fmt.Fprintf(w, "\ntenants (weights 1:1: while both have sms waiting, each may take half the sms contract)\n")
	fmt.Fprintf(w, "  %-8s %6s   %s\n", "tenant", "sent", "sms: publish → provider p50 / p95")
	fmt.Fprintf(w, "  %-8s %6d   %-17s  the blast, published at the start (%d sms)\n",
		demoBlastTenant, int(sent[demoBlastTenant]), waits(blastWaits), len(blastWaits))
	fmt.Fprintf(w, "  %-8s %6d   %-17s  one-time codes, %d/s from %s in (%d sms)%s\n",
		demoCodesTenant, int(sent[demoCodesTenant]), waits(codeWaits), demoCodeRate, inspect.FormatDuration(demoCodesAfter), len(codeWaits), verdict)
}

// demoMsg is one message of the burst.
type demoMsg struct {
	id, subject string
	data        []byte
	channel     string
	kind        string    // ok | high | invalid | expired | unknown_provider
	at          time.Time // when it was published
}

// demoBurst generates the burst: a skewed spread of users (a few heavy
// users exceed their caps), some priority-lane one-time codes, some expired
// jobs, all of the blast's tenant, and a few invalid messages of every kind
// (on the default tenant's subjects).
func demoBurst(f Config) []demoMsg {
	rnd := rand.New(rand.NewPCG(f.Seed, 42))
	now := time.Now().UTC()
	var out []demoMsg
	invalid := []struct{ channel, body string }{
		{"sms", `{"id":"bad-json-1","user_id":"u1",`},
		{"sms", `{"id":"no-user-1","channel":"sms","to":"+447700900123","body":"hi"}`},
		{"sms", `{"id":"bad-phone-1","user_id":"u2","channel":"sms","to":"0770 090","body":"hi"}`},
		{"push", `{"id":"wrong-chan-1","user_id":"u3","channel":"sms","to":"+447700900123","body":"hi"}`},
		{"email", `{"id":"bad-mail-1","user_id":"u4","channel":"email","to":"not-an-address","body":"hi"}`},
		{"email", `{"id":"huge-1","user_id":"u5","channel":"email","to":"a@example.com","body":"` + strings.Repeat("x", 17<<10) + `"}`},
		{"push", `{"id":"bad id with spaces","user_id":"u6","channel":"push","to":"tok_abcdefgh12345678","body":"hi"}`},
		{"sms", `{"id":"no-body-1","user_id":"u7","channel":"sms","to":"+447700900123"}`},
		{"push", `["not","an","object"]`},
		{"sms", "\xff\xfe not utf-8"},
		{"email", `{"id":"late-1","user_id":"u8","channel":"email","to":"a@example.com","body":"hi","expires_at":"yesterday"}`},
		{"push", `{"id":"data-1","user_id":"u9","channel":"push","to":"tok_abcdefgh12345678","body":"hi","data":{"n":1}}`},
	}
	for i, x := range invalid {
		out = append(out, demoMsg{id: fmt.Sprintf("invalid-%d", i), subject: queue.JobSubject(x.channel, false), data: []byte(x.body), channel: x.channel, kind: "invalid"})
	}
	n := f.Jobs - demoCodeCount(f.Jobs) - len(out)
	for i := 0; i < n; i++ {
		r := rnd.Float64()
		u := int(float64(f.Users) * math.Pow(r, 1.5)) // skewed: low user numbers are heavy users
		var channel string
		switch c := rnd.Float64(); {
		case c < 0.40:
			channel = "push"
		case c < 0.75:
			channel = "sms"
		default:
			channel = "email"
		}
		j := &queue.Job{
			ID:        fmt.Sprintf("demo-%05d", i),
			UserID:    fmt.Sprintf("user-%d", u),
			Channel:   channel,
			Body:      fmt.Sprintf("demo message %d", i),
			Tenant:    demoBlastTenant,
			CreatedAt: now,
		}
		j.To = SyntheticRecipient(channel, u)
		if channel != "sms" {
			j.Title = "Demo"
		}
		kind, high := "ok", false
		switch {
		case i%250 == 7:
			j.ExpiresAt = now.Add(-time.Minute)
			kind = "expired"
		case i%400 == 11:
			j.Provider = "carrier-pigeon"
			kind = "unknown_provider"
		case channel == "sms" && i%40 == 3:
			high, kind = true, "high"
			j.Body = fmt.Sprintf("Your code is %06d", rnd.IntN(1_000_000))
			j.ExpiresAt = now.Add(5 * time.Minute)
		}
		data, _ := j.Marshal()
		out = append(out, demoMsg{id: j.MsgID(), subject: queue.JobSubjectFor(channel, j.Tenant, high), data: data, channel: channel, kind: kind})
	}
	rnd.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func burstMix(b []demoMsg) string {
	count := map[string]int{}
	for _, m := range b {
		count[m.channel]++
		if m.kind != "ok" {
			count[m.kind]++
		}
	}
	return fmt.Sprintf("push %d, sms %d, email %d; %d on the priority lane, %d invalid, %d already expired, %d for an unknown provider",
		count["push"], count["sms"], count["email"], count["high"], count["invalid"], count["expired"], count["unknown_provider"])
}

// Print writes the run's report: what happened at each of the three
// limits, at each provider, and how long each tenant's SMS waited.
func Print(w io.Writer, r *Result) {
	fmt.Fprintf(w, "published %d jobs, tenant %s's blast (%s)\n", len(r.burst), demoBlastTenant, burstMix(r.burst))
	if r.Interrupted {
		fmt.Fprintln(w, "interrupted")
	}
	demoReport(w, r.Elapsed, r.Published, r.reg, r.sb)
	demoTenantReport(w, r.burst, r.codes, r.reg, r.sb)
}

// SyntheticRecipient is a made-up recipient of user u, well formed for
// channel (generated loads, the demo, the bench): a +1555 number, a
// device-token-shaped string, an example.com address.
func SyntheticRecipient(channel string, u int) string {
	switch channel {
	case "sms":
		return fmt.Sprintf("+1555%07d", u)
	case "push":
		return fmt.Sprintf("loadtoken%055d", u)
	}
	return fmt.Sprintf("user%d@example.com", u)
}

// LoadJob is job i of a generated load (`notifier publish --count`): ids unique to the run, users
// cycling over users, a recipient of the right shape for the channel.
func LoadJob(run string, i int, channel string, users int, provider string) *queue.Job {
	u := i % users
	j := &queue.Job{
		ID:        fmt.Sprintf("load-%s-%d", run, i),
		UserID:    fmt.Sprintf("user-%d", u),
		Channel:   channel,
		Body:      fmt.Sprintf("load test message %d", i),
		Provider:  provider,
		CreatedAt: time.Now().UTC(),
	}
	j.To = SyntheticRecipient(channel, u)
	if channel != "sms" {
		j.Title = "load test"
	}
	return j
}
