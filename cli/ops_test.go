package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/limits"
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
	var st inspect.FleetStatus
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
	var sms inspect.ChannelStatus
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

// TestStatusShowsTenants: `status` shows, under the provider, the tenants
// with jobs waiting and their shares of its sends, labelled as metrics
// label them (named in tenants.weights, default, other); a reload that
// names one more tenant applies without a restart (its own line appears).
func TestStatusShowsTenants(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 50, "tenants:\n  weights: {acme: 3}\n")
	for _, args := range [][]string{{"--tenant", "acme"}, {"--tenant", "Bank.eu"}, nil} {
		a := append([]string{"publish", "--config", w.config, "--quiet", "--count", "300", "--users", "100", "--channel", "sms"}, args...)
		if stdout, stderr, code := runCLI(t, nil, "", a...); code != 0 {
			t.Fatalf("publish %v: exit %d\n%s%s", args, code, stdout, stderr)
		}
	}
	p := w.run()
	status := func() (inspect.FleetStatus, map[string]inspect.TenantStatus) {
		var st inspect.FleetStatus
		out, _, code := runCLI(t, nil, "", "status", "--config", w.config, "--json")
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st.Providers) != 1 {
			return st, nil
		}
		m := map[string]inspect.TenantStatus{}
		for _, ts := range st.Providers[0].Tenants {
			m[ts.Tenant] = ts
		}
		return st, m
	}
	// acme (named) and Bank.eu (other) sent together, their jobs waiting
	// on the fair lanes (counted as other's: the lanes are shared, so the
	// stream does not count a tenant's jobs there); the default tenant's
	// jobs queued or sent in the last 10 s.
	var tenants map[string]inspect.TenantStatus
	testenv.WaitFor(t, 40*time.Second, "acme and other sent, the fair lanes waiting, default seen", func() bool {
		_, tenants = status()
		if tenants["acme"].Sent10s == 0 || tenants["other"].Sent10s == 0 || tenants["other"].Queued == 0 {
			return false
		}
		_, dflt := tenants["default"]
		return dflt && len(tenants) == 3
	})
	var share float64
	for _, ts := range tenants {
		share += ts.Share
		if ts.Queued > 600 || ts.Share <= 0 || ts.Share >= 1 {
			t.Errorf("tenant %+v", ts)
		}
	}
	if share < 0.99 || share > 1.01 {
		t.Errorf("the shares add up to %.3f: %+v", share, tenants)
	}
	out, _, code := runCLI(t, nil, "", "status", "--config", w.config, "--once")
	lines := strings.Split(out, "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "sms-gw ") })
	var under []string
	for j := i + 1; i >= 0 && j < len(lines) && strings.HasPrefix(lines[j], "  tenant "); j++ {
		under = append(under, strings.Fields(lines[j])[1])
	}
	if code != 0 || len(under) < 2 || under[len(under)-1] != "acme" || !slices.Contains(under, "other") || !strings.Contains(out, "jobs waiting") {
		t.Fatalf("status --once: a line per tenant under the provider (default, other, then by name):\n%s", out)
	}

	cfg, err := os.ReadFile(w.config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.config, bytes.Replace(cfg, []byte("{acme: 3}"), []byte("{acme: 3, Bank.eu: 2}"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "the reload", func() bool { return strings.Contains(p.logs(), `"tenant_weights":2`) })
	testenv.WaitFor(t, 20*time.Second, "Bank.eu's sends under its own name", func() bool {
		_, tenants = status()
		return tenants["Bank.eu"].Sent10s > 0
	})
	if strings.Contains(p.logs(), "needs a restart") {
		t.Errorf("a change of tenants.weights logged as needing a restart:\n%s", p.logs())
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

// TestTopRefusesAnAbsurdLimit: top read each hour's 10 × --limit users
// counted most and counted the first 4 × --limit exactly, products that
// wrapped past the largest int: with denials counted, --limit
// 6917529027641081856 (4 × it is -2^63) panicked slicing the candidates,
// and 4611686018427387904 (4 × it is 0) printed "nobody" (found in
// review). A --limit out of its range exits 2 naming the flag and the range.
func TestTopRefusesAnAbsurdLimit(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 100, "user_limits:\n  sms: {limit: 1, window: 1h, on_exceed: drop}\n")
	d := limits.NewDenials(w.redis.Client(), "notifier:")
	for _, u := range []string{"user-1", "user-2"} {
		if err := d.Record(context.Background(), "sms", u); err != nil {
			t.Fatal(err)
		}
	}
	for _, limit := range []string{"6917529027641081856", "4611686018427387904", "20001"} {
		// The binary, not runCLI: a panic would end the test process.
		out, stderr, code := runBinary(t, "top", "--config", w.config, "--channel", "sms", "--limit", limit)
		if code != 2 || strings.Contains(stderr, "panic") || !strings.Contains(stderr, "--limit must be from 1 to 20000") {
			t.Errorf("top --limit %s: exit %d, want 2 naming --limit and its range\n%s%s", limit, code, out, tail(stderr, 600))
		}
	}
	out, stderr, code := runBinary(t, "top", "--config", w.config, "--channel", "sms", "--limit", "20000")
	if code != 0 || !strings.Contains(out, "user-1") || !strings.Contains(out, "user-2") {
		t.Errorf("top --limit 20000: exit %d\n%s%s", code, out, stderr)
	}
}

// TestTopWindowIsWholeHours: top reads whole UTC hours back from the
// current one, so --window 90m read one hour and printed "last 1h30m"
// (found in review); a window that is not whole hours exits 2, named.
func TestTopWindowIsWholeHours(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "none.yaml") // refused before the file is read
	for _, args := range [][]string{{"--channel", "sms", "--window", "90m"}, {"--gateway", "--window", "1h30s"}} {
		_, stderr, code := runCLI(t, nil, "", append([]string{"top", "--config", missing}, args...)...)
		if code != 2 || !strings.Contains(stderr, "--window must be whole hours") {
			t.Errorf("top %v: exit %d, want 2 naming --window\n%s", args, code, stderr)
		}
	}
}

// TestReloadOnFileChangeAndSIGHUP: a running process takes a new contract
// when its file changes, refuses a broken file (logging its problems and
// keeping the old configuration, still sending), and reloads on SIGHUP.
func TestReloadOnFileChangeAndSIGHUP(t *testing.T) {
	// Not parallel: it asserts pacing at the provider, which the other
	// tests' processes (run in parallel after it) would disturb.
	measures(t)
	w := newWorld(t, 60, "") // the fake enforces 60/s; the configuration starts at 20/s
	orig, err := os.ReadFile(w.config)
	if err != nil {
		t.Fatal(err)
	}
	orig = bytes.Replace(orig, []byte("rate: 60"), []byte("rate: 20"), 1)
	if err := os.WriteFile(w.config, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	w.publish(600)
	p := w.run()
	testenv.WaitFor(t, 30*time.Second, "40 sent at 20/s", func() bool { return len(w.fake.AcceptedIDs()) >= 40 })
	// Pacing checks count every arrival with the jitter budget
	// (arrivalsPaced); after the reload the accepted requests' window could
	// not exceed the fake's own 60/s whatever was sent.
	if most := arrivalsPaced(t, w.fake, 20); most > 20 {
		t.Fatalf("before the reload: %d arrivals in 1 s − %s, contract 20", most, jitterBudget)
	}
	write := func(b []byte) {
		t.Helper()
		// Write-then-rename, as editors and config managers do.
		tmp := w.config + ".tmp"
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, w.config); err != nil {
			t.Fatal(err)
		}
	}
	write(bytes.Replace(orig, []byte("rate: 20"), []byte("rate: 60"), 1))
	testenv.WaitFor(t, 20*time.Second, "the file change reloaded", func() bool { return strings.Contains(p.logs(), `"trigger":"file changed"`) })
	testenv.WaitFor(t, 20*time.Second, "a second with more than 40 sends", func() bool { return w.fake.MaxInWindow(time.Second) > 40 })
	if most := arrivalsPaced(t, w.fake, 60); most > 60 {
		t.Fatalf("after the reload: %d arrivals in 1 s − %s, contract 60", most, jitterBudget)
	}

	sent := len(w.fake.AcceptedIDs())
	write(append(bytes.Replace(orig, []byte("rate: 20"), []byte("rate: -5"), 1), []byte("wrokers: 3\n")...))
	testenv.WaitFor(t, 20*time.Second, "the broken file refused", func() bool {
		return strings.Contains(p.logs(), "configuration reload refused")
	})
	for _, want := range []string{"rate: must be a number of units per second from 1/86400 (one a day) to 1000000", "got -5", "wrokers: unknown key"} {
		testenv.WaitFor(t, 5*time.Second, "the refusal names "+want, func() bool { return strings.Contains(p.logs(), want) })
	}
	testenv.WaitFor(t, 20*time.Second, "still sending on the old configuration", func() bool { return len(w.fake.AcceptedIDs()) > sent+40 })

	if err := os.WriteFile(w.config, append(bytes.Replace(orig, []byte("rate: 20"), []byte("rate: 60"), 1),
		[]byte("user_limits:\n  email: {limit: 5, window: 1h}\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond) // let the watcher's own reload of this write go first
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "reloaded on SIGHUP", func() bool { return strings.Contains(p.logs(), `"trigger":"SIGHUP"`) })
	testenv.WaitFor(t, 60*time.Second, "all 600 sent", func() bool { return len(w.fake.AcceptedIDs()) >= 600 })
	if dups := w.fake.Duplicates(); len(dups) > 0 {
		t.Fatalf("sent twice across reloads: %v", dups)
	}
	arrivalsPaced(t, w.fake, 60) // the refused file and SIGHUP kept it at 60 at most
}

// TestReloadKeepsTheStartOnlyKeysInForce: a reload that changes a key
// applied only at start logs it as needing a restart, and the process
// goes on with the one it started with, its own /status and /explain
// included: they read the reloaded redis.key_prefix, the dispatcher
// writing under the old one, so after an edit awaiting its restart the
// process's /status showed no instance of the fleet, itself included
// (found in review).
func TestReloadKeepsTheStartOnlyKeysInForce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 50, "")
	port := testenv.FreePort(t)
	setMetricsPort(t, w, port)
	p := w.run()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	testenv.WaitFor(t, 30*time.Second, "the process on its own /status", func() bool {
		resp, err := http.Get(base + "/status.json")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return len(pageState(t, base).Table.Instances) == 1
	})
	orig, err := os.ReadFile(w.config)
	if err != nil {
		t.Fatal(err)
	}
	moved := bytes.Replace(orig, []byte("redis:\n"), []byte("redis:\n  key_prefix: \"moved:\"\n"), 1)
	if bytes.Equal(moved, orig) {
		t.Fatal("no redis: block to change")
	}
	if err := os.WriteFile(w.config, moved, 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "redis named as needing a restart", func() bool {
		return strings.Contains(p.logs(), `needs a restart to apply","key":"redis"`)
	})
	time.Sleep(2500 * time.Millisecond) // the page samples every second
	if n := len(pageState(t, base).Table.Instances); n != 1 {
		t.Errorf("after a reload awaiting its restart, /status shows %d instances, want 1 (the process itself)", n)
	}
	resp, err := http.Get(base + "/explain?job=never-published")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/explain after the reload: %s %s", resp.Status, body)
	}
}

// TestShadowCapThenEnforce is the README's "what if", through the binary: a
// push cap of 2 per hour in shadow mode sends every job and counts what it
// would deny (top --shadow: 13 of each user's 15; top without --shadow:
// nobody); the file then switches it to enforce, the running process
// reloads it, and the next job of each user is suppressed: the enforced cap
// carries on from the shadow's state.
func TestShadowCapThenEnforce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 200, "user_limits:\n  sms: {limit: 2, window: 1h, on_exceed: drop, mode: shadow}\n")
	if out, _, code := runCLI(t, nil, "", "check", "--config", w.config); code != 0 || !strings.Contains(out, "shadow: counted, not enforced") {
		t.Fatalf("check: exit %d\n%s", code, out)
	}
	if _, _, code := runCLI(t, nil, "", "publish", "--config", w.config, "--count", "60", "--users", "4", "--channel", "sms", "--quiet"); code != 0 {
		t.Fatal("publish failed")
	}
	p := w.run()
	testenv.WaitFor(t, 30*time.Second, "all 60 sent", func() bool { return w.acceptedDistinct() == 60 })
	var rows []struct {
		User    string `json:"user"`
		Denials int64  `json:"denials"`
	}
	out, stderr, code := runCLI(t, nil, "", "top", "--config", w.config, "--channel", "sms", "--shadow", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 4 {
		t.Fatalf("top --shadow: exit %d %s %s", code, out, stderr)
	}
	for _, r := range rows {
		if r.Denials != 13 {
			t.Fatalf("top --shadow row %+v: want 13 would-be denials each (15 jobs, cap 2)", r)
		}
	}
	if out, _, _ := runCLI(t, nil, "", "top", "--config", w.config, "--channel", "sms"); !strings.Contains(out, "nobody") {
		t.Fatalf("top without --shadow counts the shadow's denials:\n%s", out)
	}
	var ex struct {
		Allowed bool `json:"allowed"`
		Rule    struct {
			Mode string `json:"mode"`
		} `json:"rule"`
		Denials struct {
			Last24h int `json:"last_24h"`
		} `json:"denials"`
	}
	out, stderr, code = runCLI(t, nil, "", "explain", "--config", w.config, "--user", rows[0].User, "--channel", "sms", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &ex) != nil || ex.Rule.Mode != "shadow" || ex.Allowed || ex.Denials.Last24h != 13 {
		t.Fatalf("explain of a user over a shadow cap: exit %d %s %s", code, out, stderr)
	}

	orig, err := os.ReadFile(w.config)
	if err != nil {
		t.Fatal(err)
	}
	tmp := w.config + ".tmp"
	if err := os.WriteFile(tmp, bytes.Replace(orig, []byte("mode: shadow"), []byte("mode: enforce"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, w.config); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "the file change reloaded", func() bool { return strings.Contains(p.logs(), `"trigger":"file changed"`) })
	if _, _, code := runCLI(t, nil, "", "publish", "--config", w.config, "--count", "4", "--users", "4", "--channel", "sms", "--quiet"); code != 0 {
		t.Fatal("publish failed")
	}
	testenv.WaitFor(t, 30*time.Second, "the 4 new jobs handled", func() bool { return w.remaining() == 0 })
	if n := w.acceptedDistinct(); n != 60 {
		t.Fatalf("%d jobs sent after the cap was enforced, want none more than the 60 (each user is over 2 per hour)", n-60)
	}
	out, _, _ = runCLI(t, nil, "", "top", "--config", w.config, "--channel", "sms", "--json")
	if json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 4 || rows[0].Denials != 1 {
		t.Fatalf("top after enforcing: %s, want each of the 4 users denied once", out)
	}
}
