package main

import (
	"encoding/json"
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
}
