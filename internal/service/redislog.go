package service

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisLogger routes go-redis's own log lines (pool and cluster-state
// notices, written as plain text to stderr by default) into the process's
// structured log at warn, at most one line per kind of message every
// interval, with how many were left out: while Redis is down go-redis
// writes several a second. Safe for concurrent use.
type redisLogger struct {
	log      *slog.Logger
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	last map[string]time.Time // by format: when a line of it was last written
	held map[string]int       // by format: lines left out since
}

// RouteRedisLogs makes log the destination of go-redis's log lines (a
// process-wide setting of go-redis).
func RouteRedisLogs(log *slog.Logger) {
	redis.SetLogger(&redisLogger{log: log, interval: 10 * time.Second, now: time.Now})
}

func (l *redisLogger) Printf(_ context.Context, format string, v ...any) {
	now := l.now()
	l.mu.Lock()
	if l.last == nil {
		l.last, l.held = map[string]time.Time{}, map[string]int{}
	}
	if t, ok := l.last[format]; ok && now.Sub(t) < l.interval {
		l.held[format]++
		l.mu.Unlock()
		return
	}
	held := l.held[format]
	l.last[format], l.held[format] = now, 0
	l.mu.Unlock()
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	if held > 0 {
		l.log.Warn("redis client", "detail", msg, "similar_lines_left_out", held)
		return
	}
	l.log.Warn("redis client", "detail", msg)
}
