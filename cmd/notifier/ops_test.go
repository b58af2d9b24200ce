package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/testenv"
)

// TestStatusReadsTheFleet: `status` shows what two running processes wrote
// to Redis: both instances, the fleet's sent rate, the queue and outcomes.
func TestStatusReadsTheFleet(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 50, "")
	w.publish(300)
	w.run()
	w.run()
	testenv.WaitFor(t, 30*time.Second, "100 jobs sent", func() bool { return len(w.fake.AcceptedIDs()) >= 100 })
	var st fleetStatus
	testenv.WaitFor(t, 10*time.Second, "two instances reporting sends", func() bool {
		out, _, code := runCLI(t, nil, "", "status", "--config", w.config, "--json")
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
			return false
		}
		return len(st.Instances) == 2 && len(st.Providers) == 1 && st.Providers[0].SentPerSec > 10
	})
	p := st.Providers[0]
	if p.Name != "sms-gw" || p.Contract != 50 || p.SentPerSec > 50.5 || len(p.Breakers) != 2 {
		t.Fatalf("provider status: %+v", p)
	}
	if p.QueueDepth <= 0 || p.QueueDelay <= 0 || p.QueueDelay > p.MaxDelay+0.1 {
		t.Fatalf("a backlog should show in the queue: depth %.1f delay %.2fs (max %.1fs)", p.QueueDepth, p.QueueDelay, p.MaxDelay)
	}
	var sms channelStatus
	for _, c := range st.Channels {
		if c.Channel == "sms" {
			sms = c
		}
	}
	if sms.Sent < 100 {
		t.Fatalf("sms sent over the last minute: %d, want at least 100", sms.Sent)
	}
	for _, in := range st.Instances {
		if in.Limits != "redis" || in.Workers != 16 || in.Version == "" {
			t.Fatalf("instance: %+v", in)
		}
	}
	out, _, code := runCLI(t, nil, "", "status", "--config", w.config, "--once")
	if code != 0 || !strings.Contains(out, "sms-gw") || !strings.Contains(out, "2 live instances") {
		t.Fatalf("status --once:\n%s", out)
	}
}

// TestTopFindsTheUsersHittingTheirCaps: a run with a per-user cap counts
// each denial in Redis; `top` ranks the users.
func TestTopFindsTheUsersHittingTheirCaps(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 200, "user_limits:\n  sms: {limit: 2, window: 1h, on_exceed: drop}\n")
	// publish --count cycles users: 60 jobs over 4 users = 15 each, 13 denied each.
	_, _, code := runCLI(t, nil, "", "publish", "--config", w.config, "--count", "60", "--users", "4", "--channel", "sms", "--quiet")
	if code != 0 {
		t.Fatal("publish failed")
	}
	w.run()
	testenv.WaitFor(t, 30*time.Second, "all 60 handled", func() bool { return w.remaining() == 0 })
	var rows []struct {
		User    string `json:"user"`
		Denials int64  `json:"denials"`
	}
	out, stderr, code := runCLI(t, nil, "", "top", "--config", w.config, "--channel", "sms", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil {
		t.Fatalf("top: exit %d %s %s", code, out, stderr)
	}
	if len(rows) != 4 {
		t.Fatalf("top rows: %+v, want the 4 users", rows)
	}
	for _, r := range rows {
		if r.Denials != 13 || !strings.HasPrefix(r.User, "user-") {
			t.Fatalf("row %+v: want 13 denials each (15 jobs, cap 2)", r)
		}
	}
	out, _, _ = runCLI(t, nil, "", "top", "--config", w.config, "--channel", "sms", "--limit", "2")
	if !strings.Contains(out, "cap (2 per 1h)") || strings.Count(out, "user-") != 2 {
		t.Fatalf("top --limit 2:\n%s", out)
	}
}
