package service

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestRedisLoggerIsStructuredAndRateLimited: go-redis's lines come out as
// JSON log records (not plain text in the JSON log), at most one per kind
// every interval, with the number left out.
func TestRedisLoggerIsStructuredAndRateLimited(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	now := time.Unix(1_000_000, 0)
	l := &redisLogger{log: slog.New(slog.NewJSONHandler(&buf, nil)), interval: 10 * time.Second, now: func() time.Time { return now }}
	ctx := context.Background()
	for range 50 { // several a second while Redis is down
		l.Printf(ctx, "redis: %s:%d: connection pool: failed to dial after %d attempts: %v", "pool.go", 770, 5, "connection refused")
		now = now.Add(100 * time.Millisecond)
	}
	l.Printf(ctx, "redis: cluster state reloaded")
	// 5 s of one kind of line: one record; and one of the other kind.
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var got []map[string]any
	for _, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON record: %q", line)
		}
		got = append(got, m)
	}
	if len(got) != 2 || got[0]["msg"] != "redis client" || !strings.Contains(got[0]["detail"].(string), "failed to dial") || got[1]["detail"] != "redis: cluster state reloaded" {
		t.Fatalf("records: %v; want one per kind within 10 s", got)
	}
	now = now.Add(10 * time.Second)
	l.Printf(ctx, "redis: %s:%d: connection pool: failed to dial after %d attempts: %v", "pool.go", 770, 5, "connection refused")
	var last map[string]any
	all := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if err := json.Unmarshal([]byte(all[len(all)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if last["similar_lines_left_out"] != float64(49) {
		t.Fatalf("after the interval: %v, want the 49 lines left out counted", last)
	}
}
