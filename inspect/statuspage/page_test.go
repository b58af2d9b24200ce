package statuspage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.uber.org/goleak"

	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/testenv/browser"
)

func newFakeClock() *testenv.Clock {
	return testenv.NewClock(time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC))
}

// scriptedSource is a status source whose answer a test sets.
type scriptedSource struct {
	mu  sync.Mutex
	st  func(at time.Time) inspect.FleetStatus
	err error
	clk *testenv.Clock
}

func (s *scriptedSource) set(st func(at time.Time) inspect.FleetStatus, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st, s.err = st, err
}

func (s *scriptedSource) read(context.Context) (inspect.FleetStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return inspect.FleetStatus{}, s.err
	}
	return s.st(s.clk.Now()), nil
}

// onePageProvider is a fleet of one provider sending sent/s.
func oneProvider(sent float64) func(time.Time) inspect.FleetStatus {
	return func(at time.Time) inspect.FleetStatus {
		return inspect.FleetStatus{
			At:        at,
			Providers: []inspect.ProviderStatus{{Name: "sms-gw", Channel: "sms", Contract: 100, Unit: "messages", SentPerSec: sent, QueueDepth: 20, QueueDelay: 0.2, MaxDelay: 1, Breakers: []string{"closed"}}},
			Channels:  []inspect.ChannelStatus{{Channel: "sms", Sent: int64(sent * 60)}},
			Instances: []inspect.InstanceStatus{{ID: "host-1-abc", Host: "host", Version: "v1", InFlight: 3, Workers: 16, Limits: "redis", Seen: 0.4, Up: "1m"}},
		}
	}
}

// newTestPage is a page on a fake clock sampling a scripted source.
func newTestPage(every, keep time.Duration) (*Page, *scriptedSource, *testenv.Clock) {
	clk := newFakeClock()
	src := &scriptedSource{clk: clk, st: oneProvider(0)}
	p := New(src.read, every, keep)
	p.now = clk.Now
	return p, src, clk
}

func getStatusJSON(t *testing.T, p *Page) statusJSON {
	t.Helper()
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status.json", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /status.json: %d %s", rec.Code, rec.Body)
	}
	var out statusJSON
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("decode /status.json: %v\n%s", err, rec.Body)
	}
	return out
}

// TestStatusPageRing: the ring keeps the samples of the last keep, oldest
// first, and drops what has aged out even when no sample comes.
func TestStatusPageRing(t *testing.T) {
	t.Parallel()
	p, src, clk := newTestPage(time.Second, 5*time.Second)
	t0 := clk.Now().UnixMilli()
	steps := []struct {
		samples  int           // taken one second apart, sent/s = their index
		advance  time.Duration // then the clock moves without sampling
		wantT    []int64       // seconds after t0
		wantSent []float64
	}{
		{samples: 1, wantT: []int64{0}, wantSent: []float64{0}},
		{samples: 3, wantT: []int64{0, 1, 2, 3}, wantSent: []float64{0, 1, 2, 3}},
		{samples: 2, wantT: []int64{0, 1, 2, 3, 4, 5}, wantSent: []float64{0, 1, 2, 3, 4, 5}},
		{samples: 4, wantT: []int64{4, 5, 6, 7, 8, 9}, wantSent: []float64{4, 5, 6, 7, 8, 9}}, // the ring is full: 6 slots
		{advance: 3 * time.Second, wantT: []int64{7, 8, 9}, wantSent: []float64{7, 8, 9}},     // aged out, nothing new
		{advance: 10 * time.Second, wantT: []int64{}, wantSent: []float64{}},
		{samples: 1, wantT: []int64{23}, wantSent: []float64{23}},
	}
	n := 0
	for i, s := range steps {
		for range s.samples {
			if n > 0 {
				clk.Advance(time.Second)
			}
			src.set(oneProvider(float64((clk.Now().UnixMilli()-t0)/1000)), nil)
			p.sample(t.Context())
			n++
		}
		clk.Advance(s.advance)
		got := getStatusJSON(t, p)
		gotT := make([]int64, len(got.T))
		for k, v := range got.T {
			gotT[k] = (v - t0) / 1000
		}
		var gotSent []float64
		if len(got.Providers) > 0 {
			gotSent = got.Providers[0].Sent
		}
		if !slices.Equal(gotT, s.wantT) || !slices.Equal(append([]float64{}, gotSent...), s.wantSent) {
			t.Fatalf("step %d: t %v sent %v, want t %v sent %v", i, gotT, gotSent, s.wantT, s.wantSent)
		}
		if got.Now != clk.Now().UnixMilli() || got.Every != 1000 || got.Keep != 5000 {
			t.Fatalf("step %d: now %d every %d keep %d", i, got.Now, got.Every, got.Keep)
		}
		if len(s.wantT) == 0 && (len(got.Providers) != 0 || len(got.Table.Providers) != 0) {
			t.Fatalf("step %d: no sample left, yet %+v", i, got)
		}
	}
	if cap(p.ring) != 6 || len(p.ring) != 6 {
		t.Fatalf("ring len %d cap %d, want 6 (5 s of 1 s samples, both ends)", len(p.ring), cap(p.ring))
	}
}

// TestStatusPageSourceError: a failed sample shows as the page's error and
// a gap; the samples before it stay; the next good sample clears it.
func TestStatusPageSourceError(t *testing.T) {
	t.Parallel()
	p, src, clk := newTestPage(time.Second, time.Minute)
	src.set(oneProvider(40), nil)
	p.sample(t.Context())
	clk.Advance(time.Second)
	src.set(nil, errors.New("read fleet: dial tcp: connection refused"))
	p.sample(t.Context())
	got := getStatusJSON(t, p)
	if got.Error != "read fleet: dial tcp: connection refused" || got.ErrorAt != clk.Now().UnixMilli() {
		t.Fatalf("error %q at %d", got.Error, got.ErrorAt)
	}
	if len(got.T) != 1 || got.Table.Providers[0].Sent != "40.0/s" {
		t.Fatalf("the good sample before the error must stay: %+v", got)
	}
	clk.Advance(time.Second)
	src.set(oneProvider(41), nil)
	p.sample(t.Context())
	got = getStatusJSON(t, p)
	if got.Error != "" || got.ErrorAt != 0 || len(got.T) != 2 || got.T[1]-got.T[0] != 2000 {
		t.Fatalf("after a good sample: error %q, t %v (want a 2 s gap)", got.Error, got.T)
	}
	if got.Table.Providers[0].Sent != "41.0/s" {
		t.Fatalf("table: %+v", got.Table.Providers[0])
	}
}

// TestStatusPageProvidersChange: a provider added by a reload has null
// before it appeared; one removed keeps its history with nulls after.
func TestStatusPageProvidersChange(t *testing.T) {
	t.Parallel()
	p, src, clk := newTestPage(time.Second, time.Minute)
	both := func(at time.Time) inspect.FleetStatus {
		st := oneProvider(10)(at)
		st.Providers = append(st.Providers, inspect.ProviderStatus{Name: "push-fcm", Channel: "push", Contract: 500, SentPerSec: 250.04, QueueDelay: 1.2345, MaxDelay: 2, Breakers: []string{}})
		return st
	}
	only := func(at time.Time) inspect.FleetStatus {
		st := both(at)
		st.Providers = st.Providers[1:]
		return st
	}
	for _, f := range []func(time.Time) inspect.FleetStatus{oneProvider(10), both, both, only} {
		src.set(f, nil)
		p.sample(t.Context())
		clk.Advance(time.Second)
	}
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status.json", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`"name":"sms-gw","channel":"sms","unit":"messages","sent":[10,10,10,null],"contract":[100,100,100,null]`,
		`"name":"push-fcm","channel":"push","unit":"","sent":[null,250.04,250.04,250.04],"contract":[null,500,500,500],"delay":[null,1.235,1.235,1.235]`,
	} {
		if !strings.Contains(body, want) {
			t.Fatalf("/status.json lacks %s:\n%s", want, body)
		}
	}
	got := getStatusJSON(t, p)
	if len(got.Table.Providers) != 1 || got.Table.Providers[0].Name != "push-fcm" {
		t.Fatalf("the table shows the latest sample only: %+v", got.Table.Providers)
	}
}

// TestNumsJSON: series are compact, rounded to 1/1000, null where no value.
func TestNumsJSON(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(nums{0, 1, 98.7, 0.12345, 1e6, math.NaN(), math.Inf(1), -2.5})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `[0,1,98.7,0.123,1000000,null,null,-2.5]`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if b, _ := json.Marshal(nums{}); string(b) != "[]" {
		t.Fatalf("empty: %s", b)
	}
}

// TestStatusPageServe: the routes, their content types, the CSP and the
// methods allowed.
func TestStatusPageServe(t *testing.T) {
	t.Parallel()
	p, _, _ := newTestPage(time.Second, time.Minute)
	p.sample(t.Context())
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	cases := []struct {
		method, path string
		code         int
		ctype        string
		csp          bool
		body         string
	}{
		{"GET", "/status", 200, "text/html; charset=utf-8", true, `<script src="status/app.js"`},
		{"HEAD", "/status", 200, "text/html; charset=utf-8", true, ""},
		{"GET", "/status/app.js", 200, "text/javascript; charset=utf-8", true, "fetch('status.json'"},
		{"GET", "/status/style.css", 200, "text/css; charset=utf-8", true, ":root"},
		{"GET", "/status/favicon.svg", 200, "image/svg+xml", true, "<svg"},
		{"GET", "/status.json", 200, "application/json", false, `"providers":[{"name":"sms-gw"`},
		{"GET", "/status/index.html", 404, "", false, ""},
		{"GET", "/status/nope.js", 404, "", false, ""},
		{"GET", "/status/../go.mod", 404, "", false, ""},
		{"GET", "/statusx", 404, "", false, ""},
		{"POST", "/status.json", 405, "", false, ""},
		{"DELETE", "/status", 405, "", false, ""},
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range cases {
		req, err := http.NewRequestWithContext(t.Context(), c.method, srv.URL+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body bytes.Buffer
		_, _ = body.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Fatalf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.code)
		}
		if c.code != 200 {
			if c.code == 405 && resp.Header.Get("Allow") != "GET, HEAD" {
				t.Fatalf("%s %s: Allow %q", c.method, c.path, resp.Header.Get("Allow"))
			}
			continue
		}
		if got := resp.Header.Get("Content-Type"); got != c.ctype {
			t.Fatalf("%s %s: Content-Type %q, want %q", c.method, c.path, got, c.ctype)
		}
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Fatalf("%s %s: X-Content-Type-Options %q", c.method, c.path, got)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); c.csp && csp != statusCSP {
			t.Fatalf("%s %s: CSP %q", c.method, c.path, csp)
		}
		if c.method == "HEAD" && body.Len() != 0 || c.method == "GET" && !strings.Contains(body.String(), c.body) {
			t.Fatalf("%s %s: body %.200q lacks %q", c.method, c.path, body.String(), c.body)
		}
	}
	resp, err := client.Get(srv.URL + "/status/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/status" {
		t.Fatalf("/status/: %d to %q, want a redirect to /status", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, directive := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(statusCSP, directive+";") && !strings.HasSuffix(statusCSP, directive) {
			t.Fatalf("the CSP lacks %s: %s", directive, statusCSP)
		}
	}
}

// TestStatusAssetsSelfContained: the embedded assets load nothing from
// elsewhere and have no inline script or style for the CSP to block.
func TestStatusAssetsSelfContained(t *testing.T) {
	t.Parallel()
	remote := regexp.MustCompile(`(?i)(https?:|wss?:|ftp:)?//[a-z0-9.-]+\.[a-z]{2,}|@import|url\(`)
	names := map[string]bool{}
	err := fs.WalkDir(statusAssets, "assets", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		names[filepath.Base(path)] = true
		b, err := statusAssets.ReadFile(path)
		if err != nil {
			return err
		}
		b = bytes.ReplaceAll(b, []byte(`xmlns="http://www.w3.org/2000/svg"`), nil) // a name, not a load
		if m := remote.Find(b); m != nil {
			t.Errorf("%s refers to something remote: %q", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range statusAssetTypes {
		if !names[name] {
			t.Errorf("%s is not embedded", name)
		}
	}
	html, _ := statusAssets.ReadFile("assets/index.html")
	if regexp.MustCompile(`<script[^>]*>\s*[^<\s]|<style|\son[a-z]+=|style=`).Match(html) {
		t.Fatal("index.html has an inline script, style or handler, which the CSP blocks")
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllSubmatch(html, -1)
	var got []string
	for _, r := range refs {
		got = append(got, string(r[1]))
	}
	if want := []string{"status/favicon.svg", "status/style.css", "status/app.js", "status.json"}; !slices.Equal(got, want) {
		t.Fatalf("index.html refers to %v, want only %v (relative, so a proxy prefix works)", got, want)
	}
}

// TestStatusPageRun: Run samples at once and then every period, and
// returns nil soon after ctx ends, leaving no goroutine behind.
func TestStatusPageRun(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	p := New(func(context.Context) (inspect.FleetStatus, error) {
		calls.Add(1)
		return oneProvider(5)(time.Now()), nil
	}, 20*time.Millisecond, time.Second)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	testenv.WaitFor(t, 5*time.Second, "the first sample at once", func() bool { return calls.Load() >= 1 })
	testenv.WaitFor(t, 5*time.Second, "10 samples", func() bool { return calls.Load() >= 10 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v, want nil on cancel", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	after := calls.Load()
	got := getStatusJSON(t, p)
	if len(got.T) < 10 || len(got.T) > 51 {
		t.Fatalf("%d samples kept; 20 ms samples over at most 1 s", len(got.T))
	}
	for i := 1; i < len(got.T); i++ {
		if got.T[i] < got.T[i-1] {
			t.Fatalf("samples out of order: %v", got.T)
		}
	}
	time.Sleep(60 * time.Millisecond) // three periods: a sampler left running would call again
	if calls.Load() != after {
		t.Fatalf("the source was read after Run returned")
	}
	// Run starts no goroutine of its own (other tests' pages run in
	// parallel, so look for goroutines Run or sample created).
	buf := make([]byte, 1<<20)
	if stacks := string(buf[:runtime.Stack(buf, true)]); strings.Contains(stacks, "created by github.com/notifier/notifier/statuspage.(*Page)") {
		t.Fatalf("the status page started a goroutine:\n%s", stacks)
	}
}

// TestStatusPageConcurrent: requests read while Run writes (run with
// -race).
func TestStatusPageConcurrent(t *testing.T) {
	t.Parallel()
	p := New(func(context.Context) (inspect.FleetStatus, error) { return oneProvider(5)(time.Now()), nil }, 10*time.Millisecond, 200*time.Millisecond)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				rec := httptest.NewRecorder()
				p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status.json", nil))
				if rec.Code != 200 || !json.Valid(rec.Body.Bytes()) {
					t.Errorf("GET /status.json: %d %.100s", rec.Code, rec.Body)
					return
				}
			}
		})
	}
	wg.Wait()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// BenchmarkStatusJSON: one GET /status.json with the ring full (10 min of
// 1 s samples) of a fleet of three providers and three channels.
func BenchmarkStatusJSON(b *testing.B) {
	p, src, clk := newTestPage(time.Second, 10*time.Minute)
	src.set(func(at time.Time) inspect.FleetStatus {
		st := oneProvider(98.7)(at)
		st.Providers = append(st.Providers,
			inspect.ProviderStatus{Name: "push-fcm", Channel: "push", Contract: 500, SentPerSec: 250.3, QueueDepth: 600, QueueDelay: 1.2, MaxDelay: 2},
			inspect.ProviderStatus{Name: "email-smtp", Channel: "email", Contract: 20, SentPerSec: 19.9, QueueDepth: 3, QueueDelay: 0.15, MaxDelay: 5})
		st.Channels = append(st.Channels, inspect.ChannelStatus{Channel: "push", Sent: 15000}, inspect.ChannelStatus{Channel: "email", Sent: 1194})
		return st
	}, nil)
	for range 601 {
		p.sample(context.Background())
		clk.Advance(time.Second)
	}
	req := httptest.NewRequest(http.MethodGet, "/status.json", nil)
	var size int
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, req)
		size = rec.Body.Len()
	}
	b.ReportMetric(float64(size), "bytes/response")
}

// ExampleNew shows /status.json after two samples: one column per
// series, one value per sample, the table as `notifier status` prints it.
func ExampleNew() {
	at := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	sent := 49.0
	p := New(func(context.Context) (inspect.FleetStatus, error) {
		sent += 49.7
		return inspect.FleetStatus{
			At: at,
			Providers: []inspect.ProviderStatus{{Name: "sms-gw", Channel: "sms", Contract: 100, Unit: "messages", SentPerSec: sent, QueueDepth: 12, QueueDelay: 0.12, MaxDelay: 1, Breakers: []string{"closed"},
				Tenants: []inspect.TenantStatus{{Tenant: "acme", Queued: 310, Sent10s: 1484, Share: 1}}}},
			Channels:  []inspect.ChannelStatus{{Channel: "sms", Sent: 5922}},
			Instances: []inspect.InstanceStatus{{ID: "worker-1-7f3a", Host: "worker-1", Version: "v1.2.0", InFlight: 14, Workers: 16, Limits: "redis", Seen: 0.4, Up: "3m20s"}},
		}, nil
	}, time.Second, 10*time.Minute)
	p.now = func() time.Time { return at }
	p.sample(context.Background())
	at = at.Add(time.Second)
	p.sample(context.Background())

	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status.json", nil))
	var top map[string]json.RawMessage
	_ = json.Unmarshal(rec.Body.Bytes(), &top)
	for _, k := range []string{"now", "every_ms", "keep_ms", "t", "providers", "channels", "table"} {
		fmt.Printf("%s: %s\n", k, top[k])
	}
	// Output:
	// now: 1767355201000
	// every_ms: 1000
	// keep_ms: 600000
	// t: [1767355200000,1767355201000]
	// providers: [{"name":"sms-gw","channel":"sms","unit":"messages","sent":[98.7,148.4],"contract":[100,100],"delay":[0.12,0.12],"max_delay":[1,1],"depth":[12,12],"paused":[0,0]}]
	// channels: [{"channel":"sms","sent":[5922,5922],"suppressed":[0,0],"dead":[0,0]}]
	// table: {"at":"2026-01-02 12:00:01 UTC","providers":[{"name":"sms-gw","channel":"sms","contract":"100/s","sent":"148.4/s","queued":"12","delay":"0.12s","max_delay":"1s","pause":"-","breakers":"closed"}],"channels":[{"channel":"sms","sent":5922,"suppressed":0,"dead":0}],"instances":[{"id":"worker-1-7f3a","host":"worker-1","version":"v1.2.0","in_flight":"14/16","limits":"redis","up":"3m20s","seen":"0.4s ago"}],"tenants":[{"provider":"sms-gw","tenant":"acme","waiting":"310","share":"100%","sent":"148.4/s"}],"shaping":[]}
}

// TestStatusPageInChromium loads /status in headless Chromium against a
// scripted fleet: the page loads with no error under its CSP, draws each
// provider's sent rate and contract, queue delay and max_queue_delay where
// the numbers put them, shades a 429 pause, shows the source's numbers in
// its tables, refreshes every second, shows a failed sample, and loads
// nothing from elsewhere.
func TestStatusPageInChromium(t *testing.T) {
	t.Parallel()
	p, src, clk := newTestPage(time.Second, 10*time.Minute)
	start := clk.Now()
	fleet := func(smsSent float64) func(time.Time) inspect.FleetStatus {
		return func(at time.Time) inspect.FleetStatus {
			paused := at.Sub(start) >= 100*time.Second // the last 20 samples of 120
			st := inspect.FleetStatus{
				At: at,
				Providers: []inspect.ProviderStatus{
					{Name: "sms-gw", Channel: "sms", Contract: 100, Unit: "messages", SentPerSec: smsSent, QueueDepth: 25, QueueDelay: 0.25, MaxDelay: 1, Breakers: []string{"closed", "closed"},
						Tenants: []inspect.TenantStatus{{Tenant: "other", Queued: 3, Sent10s: 240, Share: 0.25}, {Tenant: "acme", Queued: 4210, Sent10s: 720, Share: 0.75}}},
					{Name: "push-fcm", Channel: "push", Contract: 500, Unit: "messages", SentPerSec: 250, QueueDepth: 600, QueueDelay: 1.2, MaxDelay: 2, Breakers: []string{"closed", "open"}},
				},
				Channels: []inspect.ChannelStatus{{Channel: "sms", Sent: 5922, Suppressed: 3, Dead: 1}, {Channel: "push", Sent: 15000}, {Channel: "email"}},
				Instances: []inspect.InstanceStatus{
					{ID: "worker-a-1", Host: "worker-a", Version: "v1.2.0", InFlight: 14, Workers: 16, Limits: "redis", Seen: 0.4, Up: "2m"},
					{ID: "worker-b-2", Host: "worker-b", Version: "v1.2.0", InFlight: 9, Workers: 16, Limits: "redis", Seen: 0.9, Up: "2m"},
				},
			}
			if paused {
				st.Providers[1].PausedFor = 2.5
				st.Providers[1].PausedUntil = at.Add(2500 * time.Millisecond).Format(time.RFC3339)
			}
			return st
		}
	}
	src.set(fleet(98.7), nil)
	for i := range 120 {
		if i > 0 {
			clk.Advance(time.Second)
		}
		p.sample(t.Context())
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)

	ctx := browser.New(t, 1280, 800)
	console := browser.WatchConsole(t, ctx)
	browser.Do(t, ctx, "open /status", chromedp.Navigate(srv.URL+"/status"))
	browser.WaitFor(t, ctx, "the first render", `document.body.dataset.samples === "120"`)

	title := browser.Do(t, ctx, "title", chromedp.Title())
	if title != "notifier status" {
		t.Fatalf("title %q", title)
	}
	providers := browser.Do(t, ctx, "providers table", chromedp.Text(chromedp.CSS("#providers tbody")))
	for _, want := range []string{"sms-gw", "sms", "100/s", "98.7/s", "25", "0.25s", "1s", "push-fcm", "500/s", "250.0/s", "600", "1.20s", "2s",
		"2.5s, until 12:02:01", "open on 1 of 2, closed on 1 of 2"} {
		if !strings.Contains(providers, want) {
			t.Fatalf("the providers table lacks %q:\n%s", want, providers)
		}
	}
	tenants := browser.Do(t, ctx, "tenants table", chromedp.Text(chromedp.CSS("#tenants tbody")))
	if want := "sms-gw\tother\t3\t25%\t24.0/s\nsms-gw\tacme\t4210\t75%\t72.0/s"; strings.TrimSpace(tenants) != want {
		t.Fatalf("tenants table:\n%q\nwant\n%q", tenants, want)
	}
	if hidden := browser.Do(t, ctx, "tenants section", chromedp.Evaluate[bool](`document.getElementById('tenants-section').hidden`)); hidden {
		t.Fatalf("the tenants section is hidden with two tenants to show")
	}
	channels := browser.Do(t, ctx, "channels table", chromedp.Text(chromedp.CSS("#channels tbody")))
	if !regexp.MustCompile(`sms\s+5922\s+3\s+1\s+push\s+15000\s+0\s+0\s+email\s+0\s+0\s+0`).MatchString(channels) {
		t.Fatalf("channels table:\n%s", channels)
	}
	instances := browser.Do(t, ctx, "instances", chromedp.Text(chromedp.CSS("#instances tbody")))
	heading := browser.Do(t, ctx, "instances heading", chromedp.Text(chromedp.ID("instances-title")))
	if heading != "2 live instances" || !strings.Contains(instances, "worker-a-1") || !strings.Contains(instances, "14/16") || !strings.Contains(instances, "0.9s ago") {
		t.Fatalf("instances %q:\n%s", heading, instances)
	}
	at := browser.Do(t, ctx, "as of", chromedp.Text(chromedp.ID("at")))
	if at != "as of 2026-01-02 12:01:59 UTC" {
		t.Fatalf("header: %q", at)
	}
	card := browser.Do(t, ctx, "sms-gw card", chromedp.Text(chromedp.ID("p-sms-gw")))
	if !strings.Contains(card, "sent 98.7/s of 100/s, delay 0.25s of 1s") {
		t.Fatalf("sms-gw card title: %q", card)
	}

	charts := browser.ReadCharts(t, ctx)
	if len(charts) != 4 {
		t.Fatalf("want 4 charts (2 providers × sent, delay), got %v", charts)
	}
	for _, c := range []struct {
		chart           string
		series, limit   float64
		paused          bool
		minYMax, maxYMx float64
	}{
		{"sms-gw/sent", 98.7, 100, false, 125, 250},
		{"sms-gw/delay", 0.25, 1, false, 1.25, 2.5},
		{"push-fcm/sent", 250, 500, true, 625, 1000},
		{"push-fcm/delay", 1.2, 2, true, 2.5, 5},
	} {
		ch, ok := charts[c.chart]
		if !ok {
			t.Fatalf("no chart %s", c.chart)
		}
		if ch.YMax < c.minYMax || ch.YMax > c.maxYMx || ch.Points != 120 {
			t.Fatalf("%s: y up to %g with %d points; want the limit with room (%g..%g) and 120 points", c.chart, ch.YMax, ch.Points, c.minYMax, c.maxYMx)
		}
		browser.CheckLine(t, c.chart+" series", ch, ch.Series, c.series, false, 0.95)
		browser.CheckLine(t, c.chart+" limit", ch, ch.Limit, c.limit, true, 0.95)
		// The pause covers the last 20 of 120 samples spread over the plot.
		if plot := (ch.X1 - ch.X0) * ch.DPR; c.paused != (ch.Pause.N > 0) ||
			c.paused && (float64(ch.Pause.MaxX-ch.Pause.MinX) < 0.12*plot || float64(ch.Pause.MaxX-ch.Pause.MinX) > 0.22*plot) {
			t.Fatalf("%s: 429 shading %+v, want it over the last sixth of %.0f px: %v", c.chart, ch.Pause, plot, c.paused)
		}
	}
	if probs := console.Problems(); len(probs) > 0 {
		t.Fatalf("the page logged problems: %v", probs)
	}

	// It refreshes every second: a new number shows without a reload.
	src.set(fleet(120.5), nil)
	clk.Advance(time.Second)
	p.sample(t.Context())
	browser.WaitFor(t, ctx, "the refreshed rate", `document.querySelector('#providers tbody').textContent.includes('120.5/s')`)
	if charts := browser.ReadCharts(t, ctx); charts["sms-gw/sent"].Points != 121 {
		t.Fatalf("the chart was not redrawn with the new sample: %+v", charts["sms-gw/sent"])
	}

	// A failed sample shows in a banner; the charts stay.
	src.set(nil, errors.New("read fleet: dial tcp 127.0.0.1:1: connect: connection refused"))
	clk.Advance(time.Second)
	p.sample(t.Context())
	browser.WaitFor(t, ctx, "the error banner", `!document.getElementById('error').hidden && document.getElementById('error').textContent.includes('connection refused')`)

	// The CSP blocks any load from elsewhere: another origin (a server that
	// counts its requests) and inline script.
	var hits atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	t.Cleanup(other.Close)
	probe := fmt.Sprintf(`new Promise((resolve) => {
	  const seen = [];
	  document.addEventListener('securitypolicyviolation', (e) => { seen.push(e.effectiveDirective); if (seen.length === 4) resolve(seen); });
	  const s = document.createElement('script'); s.src = %[1]q + '/x.js'; document.head.append(s);
	  const i = document.createElement('img'); i.src = %[1]q + '/x.png'; document.body.append(i);
	  const inline = document.createElement('script'); inline.textContent = 'window.inlineRan = true'; document.head.append(inline);
	  fetch(%[1]q + '/x.json').catch(() => {});
	  setTimeout(() => resolve(seen), 10000);
	})`, other.URL)
	blocked := browser.Do(t, ctx, "the CSP probe", chromedp.Evaluate[[]string](probe, chromedp.EvalAwaitPromise))
	slices.Sort(blocked)
	if want := []string{"connect-src", "img-src", "script-src-elem", "script-src-elem"}; !slices.Equal(blocked, want) {
		t.Fatalf("CSP violations %v, want %v", blocked, want)
	}
	if ran := browser.Do(t, ctx, "inline script", chromedp.Evaluate[bool](`window.inlineRan === true`)); ran || hits.Load() != 0 {
		t.Fatalf("the CSP let through: inline script %v, %d requests to another origin", ran, hits.Load())
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
