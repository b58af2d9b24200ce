package queue_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/queue"
)

func TestJobSubjectsOfTenants(t *testing.T) {
	for _, tc := range []struct {
		key     queue.Key
		subject string
	}{
		{queue.Key{Channel: "sms"}, "notify.jobs.sms"},
		{queue.Key{Channel: "sms", High: true}, "notify.jobs.sms.high"},
		{queue.Key{Channel: "push", Tenant: "acme"}, "notify.jobs.push.t.acme"},
		{queue.Key{Channel: "email", Tenant: "acme.eu-1_x", High: true}, "notify.jobs.email.t.acme~eu-1_x.high"},
	} {
		if got := tc.key.Subject(); got != tc.subject {
			t.Errorf("%+v: subject %q, want %q", tc.key, got, tc.subject)
		}
		back, ok := queue.ParseJobSubject(tc.subject)
		if !ok || back != tc.key {
			t.Errorf("ParseJobSubject(%q) = %+v %v, want %+v", tc.subject, back, ok, tc.key)
		}
		if queue.IsHigh(tc.subject) != tc.key.High || queue.TenantOf(tc.subject) != tc.key.Tenant || queue.ChannelOf(tc.subject) != tc.key.Channel {
			t.Errorf("%q: IsHigh/TenantOf/ChannelOf disagree with %+v", tc.subject, tc.key)
		}
	}
	for _, s := range []string{"notify.jobs", "notify.jobs.", "notify.jobs.sms.low", "notify.jobs.sms.t", "notify.jobs.sms.x.acme",
		"notify.jobs.sms.t.acme.low", "notify.jobs.sms.t.a$b", "notify.jobs.sms.t." + strings.Repeat("a", 65), "notify.dead.sms"} {
		if k, ok := queue.ParseJobSubject(s); ok {
			t.Errorf("ParseJobSubject(%q) = %+v, want not a queue subject", s, k)
		}
	}
	for _, tn := range []string{"", "a b", "ü", strings.Repeat("x", 65), "a/b", "a~b"} {
		if queue.ValidTenant(tn) {
			t.Errorf("ValidTenant(%q) = true", tn)
		}
	}
}

func TestDecodeTenant(t *testing.T) {
	base := `{"id":"a","user_id":"u","channel":"sms","to":"+14155550123","body":"b"%s}`
	for _, tc := range []struct {
		subject, extra, wantErr string
	}{
		{"notify.jobs.sms.t.acme", ``, ""},
		{"notify.jobs.sms.t.acme", `,"tenant":"acme"`, ""},
		{"notify.jobs.sms.t.acme~eu.high", `,"tenant":"acme.eu"`, ""},
		{"notify.jobs.sms", ``, ""},
		{"notify.jobs.sms", `,"tenant":"acme"`, ""}, // the tenant in the JSON on the plain subject is honoured
		{"notify.jobs.sms.f.3", `,"tenant":"acme"`, ""},
		{"notify.jobs.sms.t.other", `,"tenant":"acme"`, `tenant: "acme" does not match the subject: it was published on tenant "other"'s subject`},
		{"notify.jobs.sms.t.acme", `,"tenant":"a b"`, `tenant: must be 1 to 64 characters`},
		{"notify.jobs.sms.t.acme", `,"tenant":7`, `tenant`},
	} {
		_, err := queue.Decode(tc.subject, fmt.Appendf(nil, base, tc.extra))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s %s: %v", tc.subject, tc.extra, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s %s: %v, want an error with %q", tc.subject, tc.extra, err, tc.wantErr)
		}
	}
}

// TestFairLanesOfTenants: tenants' jobs go to fair lanes, each to one of
// its tenant's pair, with the tenant in the Notifier-Tenant header; Queues
// lists the lanes holding jobs (however many tenants: one entry per
// lane); FetchFrom pulls from one lane without touching the others; a
// lane's consumer is made with its first job, filtered on exactly its
// subject, and kept; Poll wakes on a lane's first job.
func TestFairLanesOfTenants(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	c := b.consumer(t, queue.ConsumerConfig{})
	n := queue.DefaultFairLanes
	tenants := map[string]int{}
	for i := range 300 {
		j := job("sms", fmt.Sprintf("j-%d", i))
		j.Tenant = fmt.Sprintf("t%d", i%100) // 100 tenants, 3 jobs each
		tenants[j.Tenant]++
		b.publish(t, false, j)
	}
	hi := job("sms", "otp-0")
	hi.Tenant = "otp.eu"
	b.publish(t, true, hi)
	b.publish(t, false, job("sms", "plain"))
	qs, err := c.Queues(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if qs[0].Key.Tenant != "" || qs[0].Key.Fair || qs[0].Subject != "notify.jobs.sms" {
		t.Errorf("the default tenant's queue is not listed first: %+v", qs[0])
	}
	var total uint64
	for _, q := range qs[1:] {
		if !q.Key.Fair || q.Key.Index >= n || q.Key.Tenant != "" {
			t.Errorf("queue %s is not a fair lane", q.Key)
		}
		total += q.Stored
	}
	if total != 301 || len(qs) > 1+2*n {
		t.Fatalf("fair lanes hold %d jobs in %d queues, want 301 in at most %d", total, len(qs)-1, 2*n)
	}
	// Pull every lane: each job is on one of its tenant's pair, and says
	// whose it is.
	var wants []queue.Want
	for _, q := range qs[1:] {
		wants = append(wants, queue.Want{Subject: q.Subject, N: int(q.Stored)})
	}
	ds, err := c.FetchFrom(ctx(t), wants)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 301 {
		t.Fatalf("fetched %d jobs from the fair lanes, want 301", len(ds))
	}
	for _, d := range ds {
		k, _ := queue.ParseJobSubject(d.Subject)
		a, b2 := queue.LanePair("sms", d.Tenant, n)
		if !d.Fair || (k.Index != a && k.Index != b2) || d.Header.Get(queue.HeaderTenant) != d.Tenant {
			t.Errorf("job %s of tenant %q on %s (its pair %d, %d), header %q", d.Header.Get(jetstream.MsgIDHeader), d.Tenant, d.Subject, a, b2, d.Header.Get(queue.HeaderTenant))
		}
		if d.Tenant == "otp.eu" && !d.High {
			t.Errorf("otp.eu's priority job came on %s", d.Subject)
		}
		if want := d.Tenant + "/"; !strings.HasPrefix(d.Header.Get(jetstream.MsgIDHeader), want) {
			t.Errorf("job on %s: Nats-Msg-Id %q, want scoped by its tenant", d.Subject, d.Header.Get(jetstream.MsgIDHeader))
		}
		if _, err := queue.DecodeDelivery(d); err != nil {
			t.Errorf("decode %s: %v", d.Subject, err)
		}
	}
	ackAll(t, ds)
	cons, err := b.js.Consumer(ctx(t), "NOTIFY", "notifier-sms-normal-f"+strconv.Itoa(qs[1].Key.Index))
	if err != nil {
		t.Fatal(err)
	}
	if cfg := cons.CachedInfo().Config; cfg.FilterSubject != qs[1].Subject || cfg.InactiveThreshold != 0 {
		t.Errorf("fair lane consumer: filter %q (want %q) inactive threshold %s (want kept)", cfg.FilterSubject, qs[1].Subject, cfg.InactiveThreshold)
	}
	// Poll wakes on the first job of any of its queues.
	late := job("sms", "late")
	late.Tenant = "t7"
	a, b2 := queue.LanePair("sms", "t7", n)
	lanes := []string{queue.Key{Channel: "sms", Fair: true, Index: a}.Subject(), queue.Key{Channel: "sms", Fair: true, Index: b2}.Subject()}
	done := make(chan []*queue.Delivery, 1)
	go func() {
		ds, _ := c.Poll(ctx(t), append([]string{"notify.jobs.push"}, lanes...), 3, 10*time.Second)
		done <- ds
	}()
	time.Sleep(200 * time.Millisecond)
	b.publish(t, false, late)
	select {
	case ds := <-done:
		if len(ds) != 1 || ds[0].Header.Get(jetstream.MsgIDHeader) != "t7/late" || ds[0].Tenant != "t7" {
			t.Fatalf("Poll: %d deliveries", len(ds))
		}
		ackAll(t, ds)
	case <-time.After(5 * time.Second):
		t.Fatal("Poll did not wake on a job of one of its queues")
	}
}

// TestLanesPlacement: a tenant's pair is two distinct lanes, the same for
// every publisher; each job goes to the shallower of the two, counting the
// jobs placed since the view; a tenant whose pair shares a lane with a
// flooded one publishes past it.
func TestLanesPlacement(t *testing.T) {
	const n = queue.DefaultFairLanes
	hit := make([]int, n)
	for i := range 10_000 {
		tenant := fmt.Sprintf("tenant-%d", i)
		a, b := queue.LanePair("sms", tenant, n)
		if a == b || a < 0 || b < 0 || a >= n || b >= n {
			t.Fatalf("pair of %s: %d, %d", tenant, a, b)
		}
		if a2, b2 := queue.LanePair("sms", tenant, n); a2 != a || b2 != b {
			t.Fatalf("pair of %s not stable", tenant)
		}
		hit[a]++
		hit[b]++
	}
	for i, h := range hit {
		if h < 20_000/n*8/10 || h > 20_000/n*12/10 {
			t.Errorf("lane %d is in %d pairs of 10,000 tenants, want about %d", i, h, 20_000/n)
		}
	}
	if a, b := queue.LanePair("sms", "x", 1); a != 0 || b != 0 {
		t.Errorf("one lane: %d, %d", a, b)
	}
	// A flood on one lane of a tenant's pair: every job of the tenant goes
	// to the other until the two are even.
	l := queue.NewLanes(n, nil)
	a, b := queue.LanePair("sms", "small", n)
	flooded := queue.Key{Channel: "sms", Fair: true, Index: a}.Subject()
	l.Observe(map[string]uint64{flooded: 5000})
	k := queue.KeyFor("sms", "small", false, "")
	for i := range 100 {
		if got := l.Place(ctx(t), k); got.Index != b || !got.Fair || got.Tenant != "" {
			t.Fatalf("job %d of a tenant whose lane %d holds 5,000: placed on %s, want its lane %d", i, a, got, b)
		}
	}
	// Without a view, a tenant's jobs alternate between its two lanes.
	l = queue.NewLanes(n, nil)
	count := map[int]int{}
	for range 10 {
		count[l.Place(ctx(t), k).Index]++
	}
	if count[a] != 5 || count[b] != 5 {
		t.Errorf("no view: %v, want 5 on each of %d and %d", count, a, b)
	}
	// The default tenant's key is its own queue.
	if got := l.Place(ctx(t), queue.KeyFor("sms", "", true, "")); got.Fair || got.Subject() != "notify.jobs.sms.high" {
		t.Errorf("default tenant placed on %s", got)
	}
}

// TestLanePairsAreShuffleSharded: every pair of lanes is some tenants'
// pair, about as often as any other, so that a flooded pair is shared by
// few tenants (2/(n(n−1)) of them). TestLanesPlacement's per-lane count
// passed with a pairing as broken as b = (a+1) mod n (found in review):
// here each unordered pair, and each ordered one (which lane is first),
// must appear and hold the mean ±40 %. Each pair gets at least 200
// tenants on average (±40 % is then about 5.7 standard deviations): with
// 10,000 tenants, 64 lanes' 2,016 pairs would hold 5 each.
func TestLanePairsAreShuffleSharded(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 3, 15, queue.MaxFairLanes} {
		pairs := n * (n - 1) / 2
		tenants := max(10_000, 200*pairs)
		unordered, ordered := map[[2]int]int{}, map[[2]int]int{}
		for i := range tenants {
			a, b := queue.LanePair("sms", fmt.Sprintf("tenant-%d", i), n)
			if a == b || a < 0 || b < 0 || a >= n || b >= n {
				t.Fatalf("%d lanes: pair of tenant-%d: %d, %d", n, i, a, b)
			}
			unordered[[2]int{min(a, b), max(a, b)}]++
			ordered[[2]int{a, b}]++
		}
		for _, c := range []struct {
			name   string
			counts map[[2]int]int
			want   int
		}{{"unordered", unordered, pairs}, {"ordered", ordered, 2 * pairs}} {
			mean := float64(tenants) / float64(c.want)
			if len(c.counts) != c.want {
				t.Errorf("%d lanes, %d tenants: %d distinct %s pairs, want all %d", n, tenants, len(c.counts), c.name, c.want)
			}
			for p, k := range c.counts {
				if float64(k) < 0.6*mean || float64(k) > 1.4*mean {
					t.Errorf("%d lanes, %d tenants: %s pair %v is %d tenants', want %.0f ±40 %%", n, tenants, c.name, p, k, mean)
				}
			}
		}
	}
}

// TestRouterMovesTenantSubjects: jobs published on a tenant's own subject
// (raw NATS) are moved to one of the tenant's fair lanes with the same
// bytes, their headers and Notifier-Tenant; moving the same stored job
// again (a crash before its ack) stores nothing new; a subject whose
// tenant token names no tenant, or whose channel is none, is
// dead-lettered as invalid.
func TestRouterMovesTenantSubjects(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	c := b.consumer(t, queue.ConsumerConfig{})
	r := c.Router()
	raw := func(subject, id, extra string) {
		t.Helper()
		m := nats.NewMsg(subject)
		m.Data = fmt.Appendf(nil, `{"id":%q,"user_id":"u","channel":"sms","to":"+14155550123","body":"b"%s}`, id, extra)
		m.Header.Set(jetstream.MsgIDHeader, id)
		m.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		if _, err := b.js.PublishMsg(ctx(t), m); err != nil {
			t.Fatal(err)
		}
	}
	raw("notify.jobs.sms.t.acme", "a-1", "")
	raw("notify.jobs.sms.t.acme~eu.high", "a-2", `,"tenant":"acme.eu"`)
	raw("notify.jobs.sms.t.bad@name", "a-3", "")
	raw("notify.jobs.fax.t.acme", "a-4", "")
	moved, err := r.Round(ctx(t), time.Second)
	if err != nil || moved != 2 {
		t.Fatalf("Round: moved %d, %v; want 2", moved, err)
	}
	qs, err := c.Queues(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var wants []queue.Want
	for _, q := range qs {
		wants = append(wants, queue.Want{Subject: q.Subject, N: 5})
	}
	ds, err := c.FetchFrom(ctx(t), wants)
	if err != nil || len(ds) != 2 {
		t.Fatalf("fetched %d jobs from %d queues (%v), want the 2 moved", len(ds), len(qs), err)
	}
	for _, d := range ds {
		tenant := map[bool]string{false: "acme", true: "acme.eu"}[d.High]
		a, b2 := queue.LanePair("sms", tenant, queue.DefaultFairLanes)
		k, _ := queue.ParseJobSubject(d.Subject)
		if d.Tenant != tenant || !d.Fair || (k.Index != a && k.Index != b2) || d.Header.Get("traceparent") == "" {
			t.Errorf("moved job on %s: tenant %q, header %v", d.Subject, d.Tenant, d.Header)
		}
		if _, err := queue.DecodeDelivery(d); err != nil {
			t.Errorf("decode the moved job: %v", err)
		}
	}
	ackAll(t, ds)
	if n := b.streamMsgs(t, "NOTIFY"); n != 0 {
		t.Errorf("%d jobs left in NOTIFY, want 0 (the originals acknowledged once moved)", n)
	}
	dead := b.deadLetters(t)
	if len(dead) != 2 {
		t.Fatalf("%d dead letters, want 2 (a tenant token that is none, a channel that is none)", len(dead))
	}
	for _, m := range dead {
		if m.Header.Get(queue.HeaderReason) != "invalid" {
			t.Errorf("dead letter %s: reason %q", m.Subject, m.Header.Get(queue.HeaderReason))
		}
	}
}

// TestRouterPlacesByItsConsumersView: the router needs no publisher (the
// one Consumer.Router took was never used to place: found in review); it
// places with its Consumer's view of the fair lanes, so a tenant's job
// goes past a flood on one lane of its pair.
func TestRouterPlacesByItsConsumersView(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	c := b.consumer(t, queue.ConsumerConfig{})
	a, other := queue.LanePair("sms", "acme", queue.DefaultFairLanes)
	c.Lanes().Observe(map[string]uint64{queue.Key{Channel: "sms", Fair: true, Index: a}.Subject(): 5000})
	for i := range 3 {
		if _, err := b.pub.PublishRaw(ctx(t), "notify.jobs.sms.t.acme", fmt.Appendf(nil, `{"id":"a-%d","user_id":"u","channel":"sms","to":"+14155550123","body":"b"}`, i), ""); err != nil {
			t.Fatal(err)
		}
	}
	r := c.Router()
	moved := 0
	for moved < 3 {
		n, err := r.Round(ctx(t), 5*time.Second)
		if err != nil || n == 0 {
			t.Fatalf("Round: %d moved, %v", n, err)
		}
		moved += n
	}
	want := queue.Key{Channel: "sms", Fair: true, Index: other}.Subject()
	s, err := b.js.Stream(ctx(t), "NOTIFY")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx(t), jetstream.WithSubjectFilter("notify.jobs.*.f.>"))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.State.Subjects) != 1 || info.State.Subjects[want] != 3 {
		t.Fatalf("the moved jobs are on %v, want all 3 on %s (lane %d of acme's pair holds 5,000 in the consumer's view)", info.State.Subjects, want, a)
	}
}

// TestRouterHandsBackWhatItCannotStore: a copy the stream refuses leaves
// its original in the stream, handed back with the error, and moved in a
// later round; the copy carries the original's headers but not the
// publish's own (Nats-*), with the copy id derived from the original's
// sequence (the router publishes through Publisher.PublishMsgs).
func TestRouterHandsBackWhatItCannotStore(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	c := b.consumer(t, queue.ConsumerConfig{})
	r := c.Router()
	m := nats.NewMsg("notify.jobs.sms.t.acme")
	m.Data = []byte(`{"id":"a-1","user_id":"u","channel":"sms","to":"+14155550123","body":"b"}`)
	m.Header.Set(jetstream.MsgIDHeader, "acme/a-1")
	m.Header.Set(jetstream.ExpectedStreamHeader, "NOTIFY")
	m.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	if _, err := b.js.PublishMsg(ctx(t), m); err != nil {
		t.Fatal(err)
	}
	s, err := b.js.Stream(ctx(t), "NOTIFY")
	if err != nil {
		t.Fatal(err)
	}
	sc := s.CachedInfo().Config
	full := sc
	full.MaxMsgs, full.Discard = 1, jetstream.DiscardNew
	if _, err := b.js.UpdateStream(ctx(t), full); err != nil {
		t.Fatal(err)
	}
	moved, err := r.Round(ctx(t), time.Second)
	if moved != 0 || err == nil || !strings.Contains(err.Error(), "route notify.jobs.sms.t.acme to notify.jobs.sms.f.") {
		t.Fatalf("Round on a full stream: moved %d, %v; want 0 and the refusal", moved, err)
	}
	if n := b.streamMsgs(t, "NOTIFY"); n != 1 {
		t.Fatalf("%d jobs in NOTIFY after a refused move, want the original", n)
	}
	if _, err := b.js.UpdateStream(ctx(t), sc); err != nil {
		t.Fatal(err)
	}
	if moved, err := r.Round(ctx(t), 10*time.Second); moved != 1 || err != nil {
		t.Fatalf("Round once the stream has room: moved %d, %v; want the original handed back and moved", moved, err)
	}
	d := fetchOne(t, c, 5*time.Second)
	if d == nil {
		t.Fatal("the moved job is not on a fair lane")
	}
	ackAll(t, []*queue.Delivery{d})
	if id := d.Header.Get(jetstream.MsgIDHeader); !strings.HasPrefix(id, "route:NOTIFY:1:") || !d.Fair || d.Tenant != "acme" ||
		d.Header.Get(jetstream.ExpectedStreamHeader) != "" || d.Header.Get("traceparent") == "" {
		t.Fatalf("the copy on %s: tenant %q, headers %v", d.Subject, d.Tenant, d.Header)
	}
}

// TestNewConsumerRefusesAStreamWithoutRoom: a stream whose consumer limit
// cannot hold every consumer the configuration may make fails the start,
// saying how many are needed and what to change (never a job stranded
// later, when a lane's consumer is refused).
func TestNewConsumerRefusesAStreamWithoutRoom(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	s, err := b.js.Stream(ctx(t), "NOTIFY")
	if err != nil {
		t.Fatal(err)
	}
	sc := s.CachedInfo().Config
	sc.MaxConsumers = 20
	if _, err := b.js.CreateStream(ctx(t), sc); err == nil {
		t.Fatal("the server changed a stream's max_consumers in place")
	}
	if err := b.js.DeleteStream(ctx(t), "NOTIFY"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.js.CreateStream(ctx(t), sc); err != nil {
		t.Fatal(err)
	}
	_, err = queue.NewConsumer(ctx(t), b.js, b.cfg, queue.ConsumerConfig{})
	if err == nil || !strings.Contains(err.Error(), "193 consumers") || !strings.Contains(err.Error(), "tenants.lanes") ||
		!errors.Is(err, jetstream.ErrMaximumConsumersLimit) {
		t.Fatalf("NewConsumer on a stream allowing 20 consumers: %v", err)
	}
	// With one fair lane the fleet needs 3 × 4 × 2 + 1 = 25: still refused;
	// the limit the server enforces is reached on purpose below.
	if _, err := queue.NewConsumer(ctx(t), b.js, b.cfg, queue.ConsumerConfig{FairLanes: 1}); err == nil {
		t.Fatal("NewConsumer with 1 fair lane on a stream allowing 20 consumers: no error")
	}
	for i := range 20 {
		if _, err := b.js.CreateOrUpdateConsumer(ctx(t), "NOTIFY", jetstream.ConsumerConfig{Durable: fmt.Sprintf("other-%d", i),
			FilterSubject: fmt.Sprintf("notify.jobs.x%d", i), AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
			t.Fatalf("consumer %d of 20: %v", i, err)
		}
	}
	_, err = b.js.CreateOrUpdateConsumer(ctx(t), "NOTIFY", jetstream.ConsumerConfig{Durable: "other-21", FilterSubject: "notify.jobs.x21", AckPolicy: jetstream.AckExplicitPolicy})
	if !errors.Is(err, jetstream.ErrMaximumConsumersLimit) {
		t.Fatalf("the 21st consumer: %v, want the server's limit", err)
	}
}

// TestNewConsumerReplacesTheLaneConsumers: the two lane consumers of
// earlier versions overlap the queues and are deleted; their jobs stay and
// are taken from the new queues.
func TestNewConsumerReplacesTheLaneConsumers(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	for _, lc := range []jetstream.ConsumerConfig{
		{Durable: "notifier-high", FilterSubject: "notify.jobs.*.high", AckPolicy: jetstream.AckExplicitPolicy},
		{Durable: "notifier-normal", FilterSubject: "notify.jobs.*", AckPolicy: jetstream.AckExplicitPolicy},
	} {
		if _, err := b.js.CreateOrUpdateConsumer(ctx(t), "NOTIFY", lc); err != nil {
			t.Fatal(err)
		}
	}
	b.publish(t, false, job("sms", "old-1"))
	b.publish(t, true, job("push", "old-2"))
	c := b.consumer(t, queue.ConsumerConfig{})
	for _, name := range []string{"notifier-high", "notifier-normal"} {
		if _, err := b.js.Consumer(ctx(t), "NOTIFY", name); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Errorf("consumer %s after NewConsumer: %v, want deleted", name, err)
		}
	}
	ds, err := c.Fetch(ctx(t), 5, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ids := ackAll(t, ds); !slices.Equal(ids, []string{"old-2", "old-1"}) {
		t.Fatalf("jobs published before the upgrade: %v, want old-2 (priority) then old-1", ids)
	}
}
