package statuspage

import (
	"context"
	"embed"
	"encoding/json"
	"math"
	"net/http"
	"path"
	"strconv"
	"sync"
	"time"

	"github.com/notifier/notifier/inspect"
)

// The status page's assets, embedded so the binary serves them itself: no
// CDN, no framework, nothing loaded from elsewhere at run time.
//
//go:embed assets/index.html assets/app.js assets/style.css assets/favicon.svg
var statusAssets embed.FS

// statusAssetTypes maps each asset to its Content-Type; a name missing
// here is not served.
var statusAssetTypes = map[string]string{
	"index.html":  "text/html; charset=utf-8",
	"app.js":      "text/javascript; charset=utf-8",
	"style.css":   "text/css; charset=utf-8",
	"favicon.svg": "image/svg+xml",
}

// statusCSP lets the page load its own script and style from this server
// and fetch /status.json, and nothing else: no remote script, style, font,
// image or connection, no inline script, no framing.
const statusCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Page is the /status page of the metrics port: it samples the
// fleet's state every second and keeps the last minutes of samples, which
// the page fetches as /status.json and draws.
//
// Routes (all GET or HEAD):
//
//	/status             the page (index.html)
//	/status/app.js      its script
//	/status/style.css   its style
//	/status/favicon.svg its icon
//	/status.json        the samples and the current numbers
//
// The page refers to its assets and the JSON by relative URLs, so it also
// works behind a proxy that mounts the metrics port under a prefix.
//
// A Page is safe for concurrent use: Run writes the ring while any
// number of requests read it. Run owns the only goroutine (its caller's);
// ServeHTTP starts none.
type Page struct {
	source func(context.Context) (inspect.FleetStatus, error)
	every  time.Duration // sampling period
	keep   time.Duration // how far back the samples go
	now    func() time.Time

	mu      sync.RWMutex
	ring    []statusSample      // circular, len == capacity once full
	next    int                 // where the next sample goes once the ring is full
	latest  inspect.FleetStatus // the last good sample in full, instances included
	lastErr error               // the last sample's error; nil after a good one
	errAt   time.Time
}

// statusSample is one sample: the fleet's state at At, without the
// instances (only the latest sample's are shown).
type statusSample struct {
	at time.Time
	st inspect.FleetStatus
}

// New returns a page sampling source every every (1 s in `run`)
// and keeping keep (10 min) of samples. every and keep are clamped to at
// least 10 ms and one period.
func New(source func(context.Context) (inspect.FleetStatus, error), every, keep time.Duration) *Page {
	every = max(every, 10*time.Millisecond)
	keep = max(keep, every)
	n := int(keep/every) + 1
	return &Page{source: source, every: every, keep: keep, now: time.Now, ring: make([]statusSample, 0, n)}
}

// Run samples the source at once and then every period until ctx ends,
// and returns nil then. A failed sample is kept as the page's error (shown
// in a banner) and leaves a gap; Run goes on.
func (p *Page) Run(ctx context.Context) error {
	tick := time.NewTicker(p.every)
	defer tick.Stop()
	for {
		p.sample(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// sample reads the source once, bounded so a hung Redis cannot stall the
// page for longer than a few periods, and records the result.
func (p *Page) sample(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, max(3*p.every, 2*time.Second))
	defer cancel()
	st, err := p.source(sctx)
	if ctx.Err() != nil {
		return // stopping: not the source's fault
	}
	p.record(p.now(), st, err)
}

// record adds a sample taken at at, or records err.
func (p *Page) record(at time.Time, st inspect.FleetStatus, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.lastErr, p.errAt = err, at
		return
	}
	p.lastErr = nil
	p.latest = st
	st.Instances = nil
	s := statusSample{at: at, st: st}
	if len(p.ring) < cap(p.ring) {
		p.ring = append(p.ring, s)
		return
	}
	p.ring[p.next] = s
	p.next = (p.next + 1) % len(p.ring)
}

// samples returns the samples taken within keep of now, oldest first, and
// the latest state. The caller must hold p.mu.
func (p *Page) samples(now time.Time) []statusSample {
	out := make([]statusSample, 0, len(p.ring))
	for i := range p.ring {
		s := p.ring[(p.next+i)%len(p.ring)]
		if now.Sub(s.at) <= p.keep {
			out = append(out, s)
		}
	}
	return out
}

// statusJSON is /status.json. Series are columns: the i-th value of every
// series belongs to the sample taken at T[i]; a provider or channel absent
// from a sample (added or removed by a reload) has null there.
type statusJSON struct {
	Now       int64            `json:"now"`      // the server's clock, unix ms: the right edge of the charts
	Every     int64            `json:"every_ms"` // sampling period
	Keep      int64            `json:"keep_ms"`  // how far back T goes at most
	T         []int64          `json:"t"`        // sample times, unix ms, oldest first
	Providers []providerSeries `json:"providers"`
	Channels  []channelSeries  `json:"channels"`
	Table     Table            `json:"table"`           // the latest sample as `notifier status` prints it
	Error     string           `json:"error,omitempty"` // the last sample failed: why
	ErrorAt   int64            `json:"error_at,omitempty"`
}

type providerSeries struct {
	Name     string `json:"name"`
	Channel  string `json:"channel"`
	Unit     string `json:"unit"`
	Sent     nums   `json:"sent"`      // jobs/s over the last 10 s, the fleet together
	Contract nums   `json:"contract"`  // the contract, per second
	Delay    nums   `json:"delay"`     // leaky queue delay, seconds
	MaxDelay nums   `json:"max_delay"` // max_queue_delay, seconds
	Depth    nums   `json:"depth"`     // units queued
	Paused   nums   `json:"paused"`    // seconds of 429 pause left, 0 when none
}

type channelSeries struct {
	Channel    string `json:"channel"`
	Sent       nums   `json:"sent"` // outcomes over the last minute
	Suppressed nums   `json:"suppressed"`
	Dead       nums   `json:"dead"`
}

// nums is a series of numbers; NaN (no value) encodes as null, the rest
// rounded to three decimals.
type nums []float64

// MarshalJSON writes the series compactly.
func (s nums) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 2+6*len(s))
	b = append(b, '[')
	for i, v := range s {
		if i > 0 {
			b = append(b, ',')
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			b = append(b, "null"...)
			continue
		}
		b = strconv.AppendFloat(b, math.Round(v*1000)/1000, 'f', -1, 64)
	}
	return append(b, ']'), nil
}

// snapshot builds /status.json as of now.
func (p *Page) snapshot(now time.Time) statusJSON {
	p.mu.RLock()
	defer p.mu.RUnlock()
	ss := p.samples(now)
	out := statusJSON{
		Now: now.UnixMilli(), Every: p.every.Milliseconds(), Keep: p.keep.Milliseconds(),
		T: make([]int64, len(ss)), Providers: []providerSeries{}, Channels: []channelSeries{},
	}
	if p.lastErr != nil {
		out.Error, out.ErrorAt = p.lastErr.Error(), p.errAt.UnixMilli()
	}
	prov := map[string]int{}
	chans := map[string]int{}
	for i, s := range ss {
		out.T[i] = s.at.UnixMilli()
		for _, ps := range s.st.Providers {
			o := seriesOf(prov, &out.Providers, ps.Name, func() providerSeries {
				return providerSeries{
					Name: ps.Name, Sent: nanSeries(len(ss)), Contract: nanSeries(len(ss)), Delay: nanSeries(len(ss)),
					MaxDelay: nanSeries(len(ss)), Depth: nanSeries(len(ss)), Paused: nanSeries(len(ss)),
				}
			})
			o.Channel, o.Unit = ps.Channel, ps.Unit // the latest config names them
			o.Sent[i], o.Contract[i], o.Delay[i] = ps.SentPerSec, ps.Contract, ps.QueueDelay
			o.MaxDelay[i], o.Depth[i], o.Paused[i] = ps.MaxDelay, ps.QueueDepth, ps.PausedFor
		}
		for _, cs := range s.st.Channels {
			o := seriesOf(chans, &out.Channels, cs.Channel, func() channelSeries {
				return channelSeries{Channel: cs.Channel, Sent: nanSeries(len(ss)), Suppressed: nanSeries(len(ss)), Dead: nanSeries(len(ss))}
			})
			o.Sent[i], o.Suppressed[i], o.Dead[i] = float64(cs.Sent), float64(cs.Suppressed), float64(cs.Dead)
		}
	}
	if len(ss) > 0 {
		out.Table = NewTable(p.latest)
	} else {
		out.Table = Table{Providers: []ProviderRow{}, Channels: []ChannelRow{}, Instances: []InstanceRow{}, Tenants: []TenantRow{}, Shaping: []ShapingRow{}}
	}
	return out
}

// seriesOf is name's series in *all, indexed by at: made by mk and
// appended the first time name is seen.
func seriesOf[S any](at map[string]int, all *[]S, name string, mk func() S) *S {
	k, ok := at[name]
	if !ok {
		k = len(*all)
		at[name] = k
		*all = append(*all, mk())
	}
	return &(*all)[k]
}

func nanSeries(n int) nums {
	s := make(nums, n)
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

// ServeHTTP serves the page, its assets and /status.json.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	switch r.URL.Path {
	case "/status":
		p.serveAsset(w, r, "index.html")
	case "/status/":
		http.Redirect(w, r, "../status", http.StatusMovedPermanently)
	case "/status.json":
		b, err := json.Marshal(p.snapshot(p.now()))
		if err != nil {
			http.Error(w, "encode status: "+err.Error(), http.StatusInternalServerError)
			return
		}
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Length", strconv.Itoa(len(b)))
		if r.Method == http.MethodGet {
			_, _ = w.Write(b)
		}
	default:
		dir, name := path.Split(r.URL.Path)
		if dir != "/status/" || name == "index.html" {
			http.NotFound(w, r)
			return
		}
		p.serveAsset(w, r, name)
	}
}

// serveAsset writes one embedded asset with its type and the CSP.
func (p *Page) serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	ctype, ok := statusAssetTypes[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	b, err := statusAssets.ReadFile("assets/" + name)
	if err != nil {
		http.Error(w, "read asset: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Content-Security-Policy", statusCSP)
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	if r.Method == http.MethodGet {
		_, _ = w.Write(b)
	}
}
