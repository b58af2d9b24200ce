package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/inspect/statuspage"
	"github.com/notifier/notifier/internal/service"
	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/testenv/browser"
)

// TestStatusTableMatchesPrint: the page's table has the numbers `notifier
// status` prints, formatted the same way.
func TestStatusTableMatchesPrint(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	st := inspect.FleetStatus{
		At: at,
		Providers: []inspect.ProviderStatus{
			{Name: "sms-gw", Channel: "sms", Contract: 100, SentPerSec: 98.7, QueueDepth: 12.4, QueueDelay: 0.124, MaxDelay: 1, Breakers: []string{"closed", "closed"},
				Tenants: []inspect.TenantStatus{{Tenant: "default", Queued: 0, Sent10s: 247, Share: 0.25}, {Tenant: "acme", Queued: 4210, Sent10s: 740, Share: 0.75}}},
			{Name: "push-fcm", Channel: "push", Contract: 2.5, SentPerSec: 0, QueueDepth: 0, QueueDelay: 0, MaxDelay: 0.5, PausedFor: 2.25,
				PausedUntil: at.Add(2250 * time.Millisecond).Format(time.RFC3339), Breakers: []string{"open", "closed"}},
		},
		Channels:  []inspect.ChannelStatus{{Channel: "sms", Sent: 5922, Suppressed: 3, Dead: 1}, {Channel: "push", Dead: 7}},
		Instances: []inspect.InstanceStatus{{ID: "worker-1-7f3a", Host: "worker-1", Version: "v1.2.0", InFlight: 14, Workers: 16, Limits: "redis", Seen: 0.35, Up: "3m20s"}},
	}
	var printed bytes.Buffer
	printStatus(&printed, st, false, 200)
	lines := strings.Split(printed.String(), "\n")
	lineOf := func(prefix string) string {
		for _, l := range lines {
			if strings.HasPrefix(strings.TrimSpace(l), prefix+" ") {
				return l
			}
		}
		t.Fatalf("status prints no line for %s:\n%s", prefix, printed.String())
		return ""
	}
	tab := statuspage.NewTable(st)
	if tab.At != "2026-01-02 12:00:00 UTC" || !strings.Contains(printed.String(), tab.At) {
		t.Fatalf("at %q", tab.At)
	}
	for _, r := range tab.Providers {
		l := lineOf(r.Name)
		for _, cell := range []string{r.Contract, r.Sent, r.Queued, r.Delay, r.Pause, r.Breakers} {
			if !strings.Contains(l, cell) {
				t.Fatalf("%s: the page shows %q, status prints %q", r.Name, cell, l)
			}
		}
	}
	want := []statuspage.ProviderRow{
		{Name: "sms-gw", Channel: "sms", Contract: "100/s", Sent: "98.7/s", Queued: "12", Delay: "0.12s", MaxDelay: "1s", Pause: "-", Breakers: "closed"},
		{Name: "push-fcm", Channel: "push", Contract: "2.5/s", Sent: "0.0/s", Queued: "0", Delay: "0.00s", MaxDelay: "0.5s", Pause: "2.2s, until 12:00:02", Breakers: "open on 1 of 2, closed on 1 of 2"},
	}
	if !slices.Equal(tab.Providers, want) {
		t.Fatalf("providers:\n got %+v\nwant %+v", tab.Providers, want)
	}
	wantTenants := []statuspage.TenantRow{
		{Provider: "sms-gw", Tenant: "default", Waiting: "0", Share: "25%", Sent: "24.7/s"},
		{Provider: "sms-gw", Tenant: "acme", Waiting: "4210", Share: "75%", Sent: "74.0/s"},
	}
	if !slices.Equal(tab.Tenants, wantTenants) {
		t.Fatalf("tenants:\n got %+v\nwant %+v", tab.Tenants, wantTenants)
	}
	for i, r := range tab.Tenants {
		// Under their provider's line, in order.
		l := lines[slices.Index(lines, lineOf(r.Provider))+1+i]
		if !strings.HasPrefix(l, "  tenant "+r.Tenant+" ") || !strings.Contains(l, " "+r.Waiting+" jobs waiting, ") || !strings.HasSuffix(l, " "+r.Share+" of sends ("+r.Sent+")") {
			t.Fatalf("tenant %+v: status prints %q", r, l)
		}
	}
	if l := lineOf("push-fcm"); lines[slices.Index(lines, l)+1] != "" {
		t.Fatalf("push-fcm has no tenants, yet status prints %q under it", lines[slices.Index(lines, l)+1])
	}
	for _, c := range tab.Channels {
		l := lineOf(c.Channel)
		if !strings.Contains(l, fmt.Sprintf(" %d ", c.Sent)) || !strings.HasSuffix(l, fmt.Sprintf(" %d", c.Dead)) {
			t.Fatalf("channel %+v vs %q", c, l)
		}
	}
	in := tab.Instances[0]
	l := lineOf(in.ID)
	if in.InFlight != "14/16" || in.Seen != "0.3s ago" && in.Seen != "0.4s ago" {
		t.Fatalf("instance: %+v", in)
	}
	for _, cell := range []string{in.Version, in.InFlight, in.Limits, in.Up, in.Seen} {
		if !strings.Contains(l, cell) {
			t.Fatalf("instance: the page shows %q, status prints %q", cell, l)
		}
	}
}

// TestStatusScreenshot serves the page from a paced run: two `notifier
// run` processes at a contract of 100/s with a backlog, sampled from Redis
// with service.ReadStatus as `notifier run` does. After about 20 s the page must
// show what the fleet does: two instances, the contract, a sent rate near
// it, a queue delay within max_queue_delay; its table must be the last
// sample's numbers exactly; and its chart must draw the rate under the
// contract line.
//
// NOTIFIER_SCREENSHOT=docs/status.png writes the screenshot (1280×800) to
// that path (relative to the module's root); without it, nothing is
// written.
func TestStatusScreenshot(t *testing.T) {
	measures(t)
	t.Parallel()
	// Writing the picture waits for the charts to fill most of their
	// minute; the check alone needs 20 s of sending.
	out, seconds, jobs := os.Getenv("NOTIFIER_SCREENSHOT"), 20, 4000
	if out != "" {
		seconds, jobs = 50, 7000
	}
	w := newWorld(t, 100, "")
	w.publish(jobs)
	cfg, err := config.Load(w.config, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	rdb, err := config.ConnectRedis(t.Context(), cfg.Redis, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	p := statuspage.New(func(ctx context.Context) (inspect.FleetStatus, error) { return service.ReadStatus(ctx, rdb, cfg) }, time.Second, 10*time.Minute)
	runCtx, stop := context.WithCancel(t.Context())
	sampler := make(chan error, 1)
	go func() { sampler <- p.Run(runCtx) }()
	stopSampler := sync.OnceValue(func() error { stop(); return <-sampler })
	t.Cleanup(func() { _ = stopSampler() })
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)

	// One process after the other: two starting at once race inside the
	// embedded nats-server (a stream update against a consumer create, in
	// its file store), which -race reports.
	w.run()
	testenv.WaitFor(t, 30*time.Second, "the first instance's heartbeat", func() bool {
		return len(pageState(t, srv.URL).Table.Instances) == 1
	})
	w.run()
	sending := func(want int) func() bool {
		return func() bool {
			st := pageState(t, srv.URL)
			n := 0
			if len(st.Providers) == 1 {
				for _, v := range st.Providers[0].Sent {
					if v != nil && *v > 0 {
						n++
					}
				}
			}
			return n >= want && len(st.Table.Instances) == 2
		}
	}
	if out != "" {
		// For the picture, a provider outage: 429s with Retry-After: 3 for
		// a second pause the fleet, then it catches up.
		testenv.WaitFor(t, 120*time.Second, "20 samples of two instances sending", sending(20))
		w.fake.RateLimitFor(time.Second, "3")
	}
	testenv.WaitFor(t, 120*time.Second, fmt.Sprintf("%d samples of two instances sending", seconds), sending(seconds))

	ctx := browser.New(t, 1280, 800)
	console := browser.WatchConsole(t, ctx)
	browser.Do(t, ctx, "open /status", chromedp.Navigate(srv.URL+"/status#1m"))
	browser.WaitFor(t, ctx, "the first render", fmt.Sprintf(`Number(document.body.dataset.samples) >= %d`, seconds))
	shot := browser.Do(t, ctx, "screenshot", chromedp.CaptureScreenshot())
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 800 {
		t.Fatalf("screenshot %v, want 1280×800", b)
	}
	if out != "" {
		if !filepath.IsAbs(out) {
			out = filepath.Join("..", out) // the test runs in cli
		}
		if err := os.WriteFile(out, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", out)
	}

	// Freeze the samples and compare the page with the last one.
	if err := stopSampler(); err != nil {
		t.Fatal(err)
	}
	last := pageState(t, srv.URL)
	browser.WaitFor(t, ctx, "the last sample", fmt.Sprintf(`document.body.dataset.samples === "%d"`, len(last.T)))
	tab := last.Table
	if len(tab.Providers) != 1 || len(tab.Instances) != 2 {
		t.Fatalf("the live run: %+v", tab)
	}
	row := tab.Providers[0]
	var sent, delay float64
	if _, err := fmt.Sscanf(row.Sent, "%g/s", &sent); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscanf(row.Delay, "%gs", &delay); err != nil {
		t.Fatal(err)
	}
	t.Logf("the live run: sent %s of %s, queued %s, delay %s of %s, breakers %s; the provider answered %d×200, %d×429, most in 1 s %d",
		row.Sent, row.Contract, row.Queued, row.Delay, row.MaxDelay, row.Breakers, w.fake.Count(http.StatusOK), w.fake.Count(http.StatusTooManyRequests), w.fake.MaxInWindow(time.Second))
	if row.Name != "sms-gw" || row.Contract != "100/s" || sent < 30 || sent > 101 || delay <= 0 || delay > 1.1 || row.MaxDelay != "1s" || row.Breakers != "closed" {
		t.Fatalf("the live run's numbers: %+v", row)
	}
	text := browser.Do(t, ctx, "providers table", chromedp.Text(chromedp.CSS("#providers tbody")))
	if want := strings.Join([]string{row.Name, row.Channel, row.Contract, row.Sent, row.Queued, row.Delay, row.MaxDelay, row.Pause, row.Breakers}, "\t"); strings.TrimSpace(text) != want {
		t.Fatalf("the page shows\n%q\nthe last sample is\n%q", text, want)
	}
	instances := browser.Do(t, ctx, "instances", chromedp.Text(chromedp.CSS("#instances tbody")))
	for _, in := range tab.Instances {
		if !strings.Contains(instances, in.ID) || !strings.Contains(instances, in.InFlight) {
			t.Fatalf("instance %+v not shown:\n%s", in, instances)
		}
	}
	if h := browser.Do(t, ctx, "instances heading", chromedp.Text(chromedp.ID("instances-title"))); h != "2 live instances" {
		t.Fatalf("heading %q", h)
	}
	// The contract line runs over the samples, the sent rate under it.
	ch := browser.ReadCharts(t, ctx)["sms-gw/sent"]
	browser.CheckLine(t, "contract", ch, ch.Limit, 100, true, 0.2)
	if ch.Series.N == 0 || ch.Value(ch.Series.Row) > 101+2.5*ch.PxValue() || ch.Value(ch.Series.Row) < 30 {
		t.Fatalf("the sent rate is drawn at %.1f/s (row %d): %+v", ch.Value(ch.Series.Row), ch.Series.Row, ch)
	}
	if d := ch.Series.MinX - ch.Limit.MinX; d < -4 || d > 4 || ch.Series.MaxX < ch.Limit.MaxX-4 {
		t.Fatalf("the sent rate (x %d..%d) and the contract (x %d..%d) cover different samples", ch.Series.MinX, ch.Series.MaxX, ch.Limit.MinX, ch.Limit.MaxX)
	}
	if probs := console.Problems(); len(probs) > 0 {
		t.Fatalf("the page logged problems: %v", probs)
	}
}

// statusState is what the tests read of /status.json: the sample times,
// each provider's sent series (null where a sample lacks it) and the table.
type statusState struct {
	T         []int64 `json:"t"`
	Providers []struct {
		Sent []*float64 `json:"sent"`
	} `json:"providers"`
	Table statuspage.Table `json:"table"`
}

// pageState reads the status page's /status.json at base.
func pageState(t *testing.T, base string) statusState {
	t.Helper()
	resp, err := http.Get(base + "/status.json")
	if err != nil {
		t.Fatalf("GET /status.json: %v", err)
	}
	defer resp.Body.Close()
	var st statusState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("decode /status.json: %v", err)
	}
	return st
}
