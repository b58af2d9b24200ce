package demo

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/notifier/notifier/internal/localenv"
	"github.com/notifier/notifier/internal/text"
)

// metricsView reads the notifier's own metrics back from a registry, for
// the demo's progress line and report.
type metricsView struct {
	fams map[string]*dto.MetricFamily
}

func gather(reg prometheus.Gatherer) metricsView {
	v := metricsView{fams: map[string]*dto.MetricFamily{}}
	fams, _ := reg.Gather()
	for _, f := range fams {
		v.fams[f.GetName()] = f
	}
	return v
}

// matches reports whether m has every label of want.
func matches(m *dto.Metric, want map[string]string) bool {
	for k, val := range want {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == val {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// sum adds the counters (or gauges) of name whose labels include want.
func (v metricsView) sum(name string, want map[string]string) float64 {
	var total float64
	f := v.fams[name]
	if f == nil {
		return 0
	}
	for _, m := range f.GetMetric() {
		if !matches(m, want) {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		}
	}
	return total
}

// by sums name grouped by the value of label.
func (v metricsView) by(name, label string, want map[string]string) map[string]float64 {
	out := map[string]float64{}
	f := v.fams[name]
	if f == nil {
		return out
	}
	for _, m := range f.GetMetric() {
		if !matches(m, want) {
			continue
		}
		key := ""
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				key = lp.GetValue()
			}
		}
		out[key] += m.GetCounter().GetValue()
	}
	return out
}

// quantile estimates the q-quantile of histogram name (labels want) by
// linear interpolation inside its bucket, as PromQL's histogram_quantile.
func (v metricsView) quantile(name string, want map[string]string, q float64) (float64, bool) {
	f := v.fams[name]
	if f == nil {
		return 0, false
	}
	var h *dto.Histogram
	for _, m := range f.GetMetric() {
		if matches(m, want) {
			h = m.GetHistogram()
			break
		}
	}
	if h == nil || h.GetSampleCount() == 0 {
		return 0, false
	}
	rank := q * float64(h.GetSampleCount())
	lower, prevCount := 0.0, 0.0
	for _, b := range h.GetBucket() {
		count := float64(b.GetCumulativeCount())
		if count >= rank {
			upper := b.GetUpperBound()
			if math.IsInf(upper, 1) {
				return lower, true
			}
			if count == prevCount {
				return upper, true
			}
			return lower + (upper-lower)*(rank-prevCount)/(count-prevCount), true
		}
		lower, prevCount = b.GetUpperBound(), count
	}
	return lower, true
}

// progressLine is the demo's one-line live status, no wider than width:
// the most detailed of its forms that fits.
func progressLine(width int, elapsed time.Duration, reg prometheus.Gatherer, sb *localenv.Sandbox) string {
	v := gather(reg)
	jobs := func(o string) int { return int(v.sum("notifier_jobs_total", map[string]string{"outcome": o})) }
	sent, sup, dead, inFlight := jobs("sent"), jobs("suppressed"), jobs("dead"), int(v.sum("notifier_jobs_in_flight", nil))
	var full, mid, short, shorter strings.Builder
	fmt.Fprintf(&full, "%5.1fs  sent %d  suppressed %d  dead %d  in flight %d  |", elapsed.Seconds(), sent, sup, dead, inFlight)
	fmt.Fprintf(&mid, "%.1fs  sent %d  suppressed %d  dead %d  in flight %d  |", elapsed.Seconds(), sent, sup, dead, inFlight)
	fmt.Fprintf(&short, "%.1fs sent %d supp %d dead %d |", elapsed.Seconds(), sent, sup, dead)
	fmt.Fprintf(&shorter, "%.1fs sent %d |", elapsed.Seconds(), sent)
	for _, l := range demoLanes {
		rate := sb.Rate(l.path, time.Second)
		depth := v.sum("notifier_leaky_queue_depth", map[string]string{"provider": l.name})
		fmt.Fprintf(&full, "  %s %3.0f/s (of %g) q %2.0f", l.channel, rate, l.rate, depth)
		fmt.Fprintf(&mid, "  %s %.0f/s q %.0f", l.channel, rate, depth)
		fmt.Fprintf(&short, " %s %.0f/s q%.0f", l.channel, rate, depth)
		fmt.Fprintf(&shorter, " %s %.0f/s q%.0f", l.channel, rate, depth)
	}
	least := fmt.Sprintf("%.1fs  sent %d  suppressed %d  dead %d", elapsed.Seconds(), sent, sup, dead)
	return text.FirstFitting(width, full.String(), mid.String(), short.String(), shorter.String(), least)
}

// demoReport prints what happened, layer by layer.
func demoReport(w io.Writer, elapsed time.Duration, published int, reg prometheus.Gatherer, sb *localenv.Sandbox) {
	v := gather(reg)
	jobs := func(o string) int { return int(v.sum("notifier_jobs_total", map[string]string{"outcome": o})) }
	sent, sup, dead, dup := jobs("sent"), jobs("suppressed"), jobs("dead"), jobs("duplicate")
	fmt.Fprintf(w, "\ndone in %.1fs: %d jobs, each with exactly one outcome (%d accounted for)\n\n", elapsed.Seconds(), published, sent+sup+dead+dup)

	fmt.Fprintln(w, "outcomes")
	perChannel := func(o string) string {
		m := v.by("notifier_jobs_total", "channel", map[string]string{"outcome": o})
		var parts []string
		for _, ch := range []string{"sms", "push", "email", "invalid"} {
			if m[ch] > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", ch, int(m[ch])))
			}
		}
		return strings.Join(parts, ", ")
	}
	fmt.Fprintf(w, "  sent        %5d   %s\n", sent, perChannel("sent"))
	fmt.Fprintf(w, "  suppressed  %5d   over a per-user cap with on_exceed: drop, or expired before sending (see notify.suppressed.*)\n", sup)
	fmt.Fprintf(w, "  dead        %5d   invalid messages and unknown providers, with the reason in Notifier-Reason (see notify.dead.*)\n", dead)
	if dup > 0 {
		fmt.Fprintf(w, "  duplicate   %5d\n", dup)
	}

	fmt.Fprintln(w, "\nwaits on the way (transient: a job waits, it is not lost)")
	deferrals := v.by("notifier_deferrals_total", "reason", nil)
	layerOf := map[string]string{
		"defer":        "per-user cap, on_exceed: defer — sent once the user's window allowed",
		"empty":        "fleet bucket empty — the worker waited for a token",
		"full":         "provider queue full — the worker held the job, heart-beating it",
		"late":         "woke after its send slot — took a new slot rather than bunch sends",
		"retry":        "provider answered 5xx — retried with backoff and jitter",
		"rate_limited": "provider answered 429 — paused for the whole fleet",
		"paused":       "provider paused when the job's slot came — took a new slot",
		"circuit_open": "provider failing every call — the breaker held jobs back",
		"busy":         "another worker was sending the same job — waited for it",
		"unavailable":  "limit backend unreachable — held the job",
	}
	var reasons []string
	for r := range deferrals {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	if len(reasons) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, r := range reasons {
		desc := layerOf[r]
		if desc == "" {
			desc = r
		}
		fmt.Fprintf(w, "  %6d  %s\n", int(deferrals[r]), desc)
	}

	fmt.Fprintln(w, "\nproviders (the sandbox enforces each contract over any 1 s window and answers 429 beyond it)")
	fmt.Fprintf(w, "  %-14s %9s %13s %11s %5s %5s  %s\n", "provider", "contract", "busiest 5s", "most in 1s", "429s", "503s", "queue latency p50 / p99")
	for _, l := range demoLanes {
		st := sb.Stats(l.path)
		p50, ok50 := v.quantile("notifier_queue_latency_seconds", map[string]string{"provider": l.name}, 0.50)
		p99, _ := v.quantile("notifier_queue_latency_seconds", map[string]string{"provider": l.name}, 0.99)
		lat := "-"
		if ok50 {
			lat = fmt.Sprintf("%s / %s", fmtSeconds(p50), fmtSeconds(p99))
		}
		fmt.Fprintf(w, "  %-14s %7g/s %9.1f/s %11d %5d %5d  %s\n",
			l.name, l.rate, st.Busiest(), st.MostInOneSecond, st.Answered429, st.Answered503, lat)
	}
	fmt.Fprintf(w, "  %-14s %7g/s %9.1f/s %11d   (all providers together: the fleet bucket, burst %d)\n",
		"fleet bucket", demoGlobal.Rate, float64(localenv.MostInWindow(sb.All(), 5*time.Second))/5, localenv.MostInWindow(sb.All(), time.Second), demoGlobal.Burst)
	fmt.Fprintln(w, "\n  busiest 5s = accepted sends per second while the queue had a backlog; each queue paces 1.5 % under")
	fmt.Fprintln(w, "  its contract so that timer jitter never puts a send over it. Queue latency: how long a job waited for its slot.")
}

func fmtSeconds(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.0fms", s*1000)
	}
	return fmt.Sprintf("%.2fs", s)
}
