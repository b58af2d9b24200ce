package gateway

import (
	"time"
)

// limitLog throttles the log lines of a key being limited.
type limitLog struct {
	last    time.Time
	dropped int
}

// limitedLine logs that k is being limited by b: at most one line per key
// per minute (per instance), with the rejections since the previous line.
// Lock-free: it is on the 429 path.
func (k *apiKey) limitedLine(g *Gateway, b *bucket, wait time.Duration) {
	n := k.limitedSince.Add(1)
	now := int64(time.Since(g.base))
	last := k.lastLimitLog.Load()
	if last != 0 && now-last < int64(time.Minute) || !k.lastLimitLog.CompareAndSwap(last, max(now, 1)) {
		return
	}
	k.limitedSince.Add(-n)
	g.log.Info("api key limited", "key", k.Name, "bucket", b.kind, "rejected", n, "retry_after", wait.Round(time.Millisecond))
}

// throttledWarn logs a warning at most once a second per what.
func (g *Gateway) throttledWarn(what, msg string, args ...any) {
	if n, ok := g.throttle(what, time.Second); ok {
		g.log.Warn(msg, append(args, "occurrences", n)...)
	}
}

// throttle reports whether a line for what may be written now (at most one
// per every), and how many occurrences it stands for.
func (g *Gateway) throttle(what string, every time.Duration) (int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	l := g.limited[what]
	if l == nil {
		l = &limitLog{}
		g.limited[what] = l
	}
	if !l.last.IsZero() && now.Sub(l.last) < every {
		l.dropped++
		return 0, false
	}
	n := l.dropped + 1
	l.last, l.dropped = now, 0
	return n, true
}
