// Package browser drives headless Chromium for tests of the notifier's web
// pages (the /status page): start it, run actions with a timeout, poll a
// condition in the page, collect the console, read the status page's
// charts back from their canvases. A missing Chromium fails the
// test with the command that installs it.
package browser

import (
	"context"
	"math"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// ChromiumPath is where Debian's chromium package puts the browser.
const ChromiumPath = "/usr/bin/chromium"

// New starts headless Chromium for one test and returns a tab's
// context; Chromium stops at the test's end. A missing Chromium fails the
// test with the command that installs it.
func New(t *testing.T, width, height int64) context.Context {
	t.Helper()
	if _, err := os.Stat(ChromiumPath); err != nil {
		t.Fatalf("%s is missing: install Debian's chromium with `apt-get install -y chromium` (`make chromium` does it)", ChromiumPath)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(ChromiumPath),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(int(width), int(height)),
	) // chromedp adds --user-data-dir=<a temp dir it removes>
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	start, cancelStart := context.WithTimeout(ctx, 60*time.Second)
	defer cancelStart()
	if err := chromedp.Do(ctx); err != nil { // the browser lives as long as ctx
		t.Fatalf("start chromium: %v", err)
	}
	if err := chromedp.Do(start, chromedp.EmulateViewport(width, height)); err != nil {
		t.Fatalf("chromium viewport: %v", err)
	}
	return ctx
}

// Do runs one action with a timeout and fails the test on error.
func Do[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// WaitFor polls a JavaScript condition in the page until it is true,
// for up to 20 s.
func WaitFor(t *testing.T, ctx context.Context, what, cond string) {
	t.Helper()
	Do(t, ctx, "wait for "+what, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(20*time.Second), chromedp.WithPollingInterval(50*time.Millisecond)))
}

// Console collects the page's console messages and exceptions.
type Console struct {
	mu   sync.Mutex
	msgs []chromedp.ConsoleMessage
	done chan struct{}
}

// WatchConsole collects the console of the tab ctx until the test ends.
func WatchConsole(t *testing.T, ctx context.Context) *Console {
	c := &Console{done: make(chan struct{})}
	ctx, cancel := context.WithCancel(ctx)
	msgs := chromedp.Console(ctx)
	go func() {
		defer close(c.done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			c.mu.Lock()
			c.msgs = append(c.msgs, m)
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-c.done })
	return c
}

// Problems are the errors, warnings and exceptions seen so far.
func (c *Console) Problems() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, m := range c.msgs {
		if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException() {
			out = append(out, m.String()+" ("+m.Source+" "+m.URL+")")
		}
	}
	return out
}

// chartPixels reads each chart's canvas back and finds its lines by
// colour: the series (blue or green, solid) and the limit (red, dashed),
// with the row most of each line's pixels are on, and the 429 shading.
const chartPixels = `(() => {
  const near = (d, i, c, tol) => Math.abs(d[i] - c[0]) <= tol && Math.abs(d[i+1] - c[1]) <= tol && Math.abs(d[i+2] - c[2]) <= tol;
  const out = [];
  for (const cv of document.querySelectorAll('article.provider canvas')) {
    const kind = cv.classList.contains('sent') ? 'sent' : 'delay';
    const colors = { series: kind === 'sent' ? [37, 99, 235] : [5, 150, 105], limit: [220, 38, 38], pause: [253, 234, 201] };
    const d = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
    const acc = {};
    for (const k in colors) acc[k] = { n: 0, rows: new Map(), minX: cv.width, maxX: -1 };
    for (let y = 0; y < cv.height; y++) {
      for (let x = 0; x < cv.width; x++) {
        const i = (y * cv.width + x) * 4;
        for (const k in colors) {
          if (!near(d, i, colors[k], k === 'pause' ? 4 : 40)) continue;
          const a = acc[k];
          a.n++; a.rows.set(y, (a.rows.get(y) || 0) + 1);
          a.minX = Math.min(a.minX, x); a.maxX = Math.max(a.maxX, x);
        }
      }
    }
    const res = { provider: cv.closest('article').dataset.provider, kind, dpr: cv.width / cv.clientWidth };
    for (const k of ['x0', 'x1', 'y0', 'y1', 'ymax', 'points']) res[k] = Number(cv.dataset[k]);
    for (const k in acc) {
      let row = -1, count = 0;
      for (const [y, n] of acc[k].rows) if (n > count) { row = y; count = n; }
      res[k] = { n: acc[k].n, row, count, minX: acc[k].minX, maxX: acc[k].maxX };
    }
    out.push(res);
  }
  return out;
})()`

// Line is one line of a chart found by its colour: its pixels, the row
// most of them are on (and how many), and its horizontal extent.
type Line struct {
	N     int `json:"n"`
	Row   int `json:"row"`
	Count int `json:"count"`
	MinX  int `json:"minX"`
	MaxX  int `json:"maxX"`
}

// Chart is one chart of the status page read back from its canvas: its
// plot's geometry and scale, and its series, limit and pause lines.
type Chart struct {
	Provider string  `json:"provider"`
	Kind     string  `json:"kind"`
	DPR      float64 `json:"dpr"`
	X0       float64 `json:"x0"`
	X1       float64 `json:"x1"`
	Y0       float64 `json:"y0"`
	Y1       float64 `json:"y1"`
	YMax     float64 `json:"ymax"`
	Points   int     `json:"points"`
	Series   Line    `json:"series"`
	Limit    Line    `json:"limit"`
	Pause    Line    `json:"pause"`
}

// Value is the value the chart's scale gives a pixel row.
func (c Chart) Value(row int) float64 {
	y := (float64(row) + 0.5) / c.DPR
	return c.YMax * (c.Y1 - y) / (c.Y1 - c.Y0)
}

// PxValue is the value of one pixel of height.
func (c Chart) PxValue() float64 { return c.YMax / ((c.Y1 - c.Y0) * c.DPR) }

// ReadCharts reads every chart of the status page open in ctx, by
// "<provider>/<sent|delay>".
func ReadCharts(t *testing.T, ctx context.Context) map[string]Chart {
	t.Helper()
	found := Do(t, ctx, "read the charts' pixels", chromedp.Evaluate[[]Chart](chartPixels))
	out := map[string]Chart{}
	for _, c := range found {
		out[c.Provider+"/"+c.Kind] = c
	}
	return out
}

// CheckLine asserts a chart drew a line at want: most of its pixels on the
// row want maps to (within 2.5 pixels), across at least minSpan of the
// plot's width; a dashed line covers 45-80 % of its own extent.
func CheckLine(t *testing.T, name string, c Chart, l Line, want float64, dashed bool, minSpan float64) {
	t.Helper()
	if l.N == 0 {
		t.Fatalf("%s: no pixel of the line drawn (%+v)", name, c)
	}
	if got := c.Value(l.Row); math.Abs(got-want) > 2.5*c.PxValue() {
		t.Fatalf("%s: drawn at %.3g (row %d), want %.3g (chart %+v)", name, got, l.Row, want, c)
	}
	extent := float64(l.MaxX - l.MinX + 1)
	if dashed {
		if f := float64(l.Count) / extent; f < 0.45 || f > 0.8 {
			t.Fatalf("%s: the dashed line covers %.0f%% of its row, want 45-80%%", name, 100*f)
		}
	}
	if plot := (c.X1 - c.X0) * c.DPR; extent < minSpan*plot {
		t.Fatalf("%s: the line spans %.0f of %.0f px, want at least %.0f%%", name, extent, plot, 100*minSpan)
	}
}
