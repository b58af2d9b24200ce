package cli

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/notifier/notifier/testenv"
)

// TestRunLogsReadably: the start line names the metrics address really
// bound (metrics.listen asks for port 0, and the line used to say
// 127.0.0.1:0); durations are written as durations ("backoff":"87ms", not
// raw nanoseconds); a clean stop logs no "nats disconnected" warning.
func TestRunLogsReadably(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 100, "")
	w.fake.FailNext(1, http.StatusServiceUnavailable)
	p := w.run()
	var addr string
	testenv.WaitFor(t, 20*time.Second, "the dispatching line", func() bool {
		for _, line := range strings.Split(p.logs(), "\n") {
			var l struct{ Msg, Metrics string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "dispatching" {
				addr = l.Metrics
				return true
			}
		}
		return false
	})
	if strings.HasSuffix(addr, ":0") || addr == "" {
		t.Fatalf("start line names metrics %q, want the address bound", addr)
	}
	if resp, err := http.Get("http://" + addr + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz on the logged address %s: %v", addr, err)
	} else {
		resp.Body.Close()
	}
	ids := w.publish(3)
	testenv.WaitFor(t, 20*time.Second, "3 jobs sent", func() bool { return len(w.fake.AcceptedIDs()) >= len(ids) })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-p.done
	logs := p.logs()
	var backoff any
	for _, line := range strings.Split(logs, "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == "provider failed; retrying later" {
			backoff = l["backoff"]
		}
	}
	if s, ok := backoff.(string); !ok || !strings.HasSuffix(s, "s") {
		t.Errorf("the retry line's backoff is %#v, want a duration string such as \"87ms\"", backoff)
	}
	if strings.Contains(logs, "nats disconnected") {
		t.Errorf("a clean stop logged a NATS disconnection:\n%s", tail(logs, 2000))
	}
	// No warning about NATS at all: not "disconnected", not err:null.
	for _, line := range strings.Split(logs, "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) != nil || l["level"] != "WARN" {
			continue
		}
		if strings.Contains(strings.ToLower(line), "nats") || strings.Contains(line, `"err":null`) {
			t.Errorf("a clean stop logged a warning: %s", line)
		}
	}
}

// TestLogsWriteDurationsAsDurations: every duration a log line carries,
// at the top, in a group, given as a time.Duration or by a LogValuer, in
// either format, reads "1.5s", never nanoseconds.
func TestLogsWriteDurationsAsDurations(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"json", "text"} {
		var b bytes.Buffer
		log, err := (&logOptions{level: "debug", format: format}).logger(&b)
		if err != nil {
			t.Fatal(err)
		}
		log.Info("line", "backoff", 1500*time.Millisecond, slog.Duration("late", 7*time.Millisecond),
			slog.Group("retry", "in", 2*time.Second), "pause", durationValuer(90*time.Second))
		log.With("held", 250*time.Microsecond).WithGroup("g").Warn("again", "for", time.Minute)
		out := b.String()
		for _, want := range []string{"1.5s", "7ms", "2s", "1m30s", "250µs", "1m0s"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: no %q in\n%s", format, want, out)
			}
		}
		for _, raw := range []string{"1500000000", "7000000", "2000000000", "90000000000", "250000", "60000000000"} {
			if strings.Contains(out, raw) {
				t.Errorf("%s: raw nanoseconds %s in\n%s", format, raw, out)
			}
		}
	}
}

// durationValuer logs as a duration, resolved by the handler.
type durationValuer time.Duration

func (d durationValuer) LogValue() slog.Value { return slog.DurationValue(time.Duration(d)) }
