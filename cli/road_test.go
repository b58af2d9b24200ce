package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/testenv"
)

// TestDevBannerPointsTheOtherCommands: dev's banner gives the one line
// that points every other command at its server, and says its limits are
// not in Redis.
func TestDevBannerPointsTheOtherCommands(t *testing.T) {
	t.Parallel()
	cfg := config.Config{}.WithDefaults()
	cfg.NATS.URL = "nats://127.0.0.1:4333"
	cfg.Providers = []providers.Config{{Name: "sms-sandbox", Channel: "sms", Rate: 100}}
	b := devBanner(cfg, "/tmp/state", "127.0.0.1:9464", true)
	for _, want := range []string{
		"\n  export NOTIFIER_NATS_URL=nats://127.0.0.1:4333\n",
		"notifier publish --nats nats://127.0.0.1:4333 --channel sms",
		"this one's state is at http://127.0.0.1:9464/status",
	} {
		if !strings.Contains(b, want) {
			t.Errorf("the banner lacks %q:\n%s", want, b)
		}
	}
}

// configAt writes a configuration whose nats.url is a port nothing
// listens on, so a command reaches the server only through --nats.
func configAt(t *testing.T, redisAddr, extra string) string {
	t.Helper()
	return writeConfig(t, fmt.Sprintf(`
nats:
  url: nats://127.0.0.1:%d
redis:
  addrs: ["%s"]
metrics:
  listen: 127.0.0.1:0
providers:
  - { name: sms-gw, channel: sms, default: true, kind: webhook, url: "http://127.0.0.1:1/send", rate: 10 }
%s`, testenv.FreePort(t), redisAddr, extra))
}

// TestNATSFlagReplacesTheConfigurationsURL: status, dead and explain
// reach the server --nats names, not the file's nats.url; status with
// --nats counts the jobs waiting in the stream, and with no instance in
// Redis says what that likely means.
func TestNATSFlagReplacesTheConfigurationsURL(t *testing.T) {
	t.Parallel()
	srv, rdb := testenv.NATS(t), testenv.Redis(t)
	cfg := configAt(t, rdb.Addr(), "")
	// A job in the stream, through publish --nats (its streams made).
	if out, errs, code := runCLI(t, nil, "", "publish", "--nats", srv.URL(), "--id", "j1",
		"--channel", "sms", "--user", "u1", "--to", "+447700900123", "--body", "hi"); code != 0 {
		t.Fatalf("publish: exit %d\n%s%s", code, out, errs)
	}

	out, errs, code := runCLI(t, nil, "", "status", "--config", cfg, "--nats", srv.URL(), "--once")
	if code != 0 {
		t.Fatalf("status --nats: exit %d\n%s%s", code, out, errs)
	}
	for _, want := range []string{
		"jobs waiting in NOTIFY on " + srv.URL() + ": 1 (sms 1)",
		"0 live instances",
		"No notifier run has a heartbeat in this Redis (" + rdb.Addr() + `, key_prefix "notifier:")`,
		"a notifier dev: it keeps its limits in its own memory",
		"another redis.key_prefix",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status --nats lacks %q:\n%s", want, out)
		}
	}

	out, errs, code = runCLI(t, nil, "", "dead", "list", "--config", cfg, "--nats", srv.URL())
	if code != 0 {
		t.Fatalf("dead list --nats: exit %d\n%s%s", code, out, errs)
	}
	out, errs, code = runCLI(t, nil, "", "explain", "--config", cfg, "--nats", srv.URL(), "--job", "j1")
	if code != 0 || !strings.Contains(out, "job j1") || !strings.Contains(out, "No notifier run has a heartbeat") {
		t.Fatalf("explain --job --nats: exit %d\n%s%s", code, out, errs)
	}

	// With --nats and no --config, outside a directory with a config.yaml
	// (the tests run in cli/, which has none): the defaults.
	if out, errs, code := runCLI(t, nil, "", "dead", "list", "--nats", srv.URL()); code != 0 {
		t.Fatalf("dead list --nats without a file: exit %d\n%s%s", code, out, errs)
	}
	if _, errs, code := runCLI(t, nil, "", "dead", "list"); code != 2 || !strings.Contains(errs, "config.yaml") {
		t.Fatalf("dead list without --nats or a file: exit %d, want 2 naming the missing file\n%s", code, errs)
	}
	// Without --nats the file's URL is asked, where nothing listens.
	if _, errs, code := runCLI(t, nil, "", "dead", "list", "--config", cfg); code == 0 {
		t.Fatalf("dead list without --nats reached a server at the file's dead URL:\n%s", errs)
	}
	// NOTIFIER_NATS_URL, the line dev prints, does the same as --nats.
	if out, errs, code := runCLI(t, map[string]string{"NOTIFIER_NATS_URL": srv.URL()}, "", "dead", "list", "--config", cfg); code != 0 {
		t.Fatalf("dead list with NOTIFIER_NATS_URL: exit %d\n%s%s", code, out, errs)
	}
}

// TestGatewayTakesNATSFlag: the gateway publishes to the server --nats
// names.
func TestGatewayTakesNATSFlag(t *testing.T) {
	t.Parallel()
	srv, rdb := testenv.NATS(t), testenv.Redis(t)
	port := testenv.FreePort(t)
	cfg := configAt(t, rdb.Addr(), fmt.Sprintf(`gateway:
  listen: 127.0.0.1:%d
  keys:
    - { name: dev, sha256: 57c8139db7290a9064aa57837c951138a32df40cca3aca526319f55651368823, rate: 50, burst: 100 }
`, port))
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb bytes.Buffer
	stdout := &lockedWriter{w: &out}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"gateway", "--config", cfg, "--nats", srv.URL()}, strings.NewReader(""), stdout, &lockedWriter{w: &errb}, noEnv)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway: %v", err)
		}
	}()
	testenv.WaitFor(t, 30*time.Second, "the gateway listening", func() bool {
		select {
		case err := <-done:
			t.Fatalf("gateway --nats exited: %v\n%s", err, errb.String())
		default:
		}
		return strings.Contains(stdout.String(), "gateway listening")
	})
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/v1/notifications", port),
		strings.NewReader(`{"id":"g1","user_id":"u1","channel":"sms","to":"+447700900123","body":"hi"}`))
	req.Header.Set("Authorization", "Bearer dev-key-change-me")
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST: %s", resp.Status)
	}
	if n := streamMsgs(t, srv.URL(), "NOTIFY"); n != 1 {
		t.Fatalf("the stream on --nats's server holds %d jobs, want 1", n)
	}
}

// TestSandboxLanes: a sandbox serves the webhook providers on its port,
// by their url's path and contract, and names the others.
func TestSandboxLanes(t *testing.T) {
	t.Parallel()
	ps := []providers.Config{
		{Name: "sms-gateway", Kind: "webhook", URL: "http://127.0.0.1:8080/send", Rate: 100},
		{Name: "push", Kind: "webhook", URL: "http://127.0.0.1:8080/push", Rate: 499.5},
		{Name: "email-dev", Kind: "log", Rate: 50},
		{Name: "other", Kind: "webhook", URL: "http://127.0.0.1:9090/x", Rate: 5},
	}
	addr, lanes, skipped, err := sandboxLanes(ps, "")
	if err != nil || addr != "127.0.0.1:8080" {
		t.Fatalf("default listen: %q, %v", addr, err)
	}
	if got := fmt.Sprint(lanes); got != "[{sms-gateway http://127.0.0.1:8080/send /send 100} {push http://127.0.0.1:8080/push /push 500}]" {
		t.Errorf("lanes %s", got)
	}
	if got := strings.Join(skipped, "; "); got != "email-dev (kind log); other (http://127.0.0.1:9090/x: another port)" {
		t.Errorf("skipped %s", got)
	}
	// In a container: every host name, by port.
	ps[0].URL = "http://sandbox:8080/send"
	if addr, lanes, _, err := sandboxLanes(ps, "0.0.0.0:8080"); err != nil || addr != "0.0.0.0:8080" || len(lanes) != 2 {
		t.Errorf("--listen 0.0.0.0:8080: %q %v %v", addr, lanes, err)
	}
	if _, _, _, err := sandboxLanes(ps[2:3], ""); err == nil {
		t.Error("no webhook provider: no error")
	}
	if _, _, _, err := sandboxLanes(ps, "127.0.0.1:7070"); err == nil || !strings.Contains(err.Error(), "port 7070") {
		t.Errorf("a port no provider posts to: %v", err)
	}
}

// TestShippedConfigRunsEndToEndWithTheSandbox is the README's local try of
// notifier run: the shipped config.yaml, its webhook providers served by
// `notifier sandbox`, NATS and Redis from the environment (a private
// JetStream server and redis-server here; the sandbox's port moved from
// 8080 to a free one, which another program may hold on this machine).
// A job published on each webhook channel is sent, each once.
func TestShippedConfigRunsEndToEndWithTheSandbox(t *testing.T) {
	t.Parallel()
	shipped, err := os.ReadFile("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	port := testenv.FreePort(t)
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	yaml := bytes.ReplaceAll(shipped, []byte("127.0.0.1:8080/"), fmt.Appendf(nil, "127.0.0.1:%d/", port))
	if err := os.WriteFile(cfgPath, yaml, 0o600); err != nil {
		t.Fatal(err)
	}
	srv, rdb := testenv.NATS(t), testenv.Redis(t)
	w := &world{t: t, nats: srv, redis: rdb, config: cfgPath}
	env := []string{"NOTIFIER_NATS_URL=" + srv.URL(), "NOTIFIER_REDIS_ADDRS=" + rdb.Addr(), "NOTIFIER_METRICS_LISTEN=127.0.0.1:0"}

	sandbox := w.start([]string{"sandbox", "--config", cfgPath}, env...)
	testenv.WaitFor(t, 30*time.Second, "the sandbox's banner", func() bool { return strings.Contains(sandbox.logs(), "Ctrl-C stops it.") })
	for _, want := range []string{"sms-gateway", fmt.Sprintf("http://127.0.0.1:%d/send", port), "push", "not served: email-dev (kind log)"} {
		if !strings.Contains(sandbox.logs(), want) {
			t.Errorf("the sandbox's banner lacks %q:\n%s", want, sandbox.logs())
		}
	}
	w.start([]string{"run", "--config", cfgPath}, env...)
	for _, j := range [][]string{
		{"--id", "e2e-sms", "--channel", "sms", "--to", "+447700900123"},
		{"--id", "e2e-push", "--channel", "push", "--to", "tok_abcdefgh12345678"},
	} {
		out, errs, code := runCLI(t, map[string]string{"NOTIFIER_NATS_URL": srv.URL(), "NOTIFIER_REDIS_ADDRS": rdb.Addr()}, "",
			append([]string{"publish", "--config", cfgPath, "--user", "u1", "--body", "hello"}, j...)...)
		if code != 0 {
			t.Fatalf("publish %v: exit %d\n%s%s", j, code, out, errs)
		}
	}
	for _, l := range []string{"sms-gateway    sent   job e2e-sms", "push           sent   job e2e-push"} {
		testenv.WaitFor(t, 30*time.Second, l, func() bool { return strings.Count(sandbox.logs(), l) == 1 })
	}
}

// TestHealthcheck: 2xx exits 0, anything else 1 with the answer, a bad
// URL 2.
func TestHealthcheck(t *testing.T) {
	t.Parallel()
	var status atomic.Int32
	status.Store(http.StatusOK)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(int(status.Load()))
		fmt.Fprintln(w, http.StatusText(int(status.Load())))
	}))
	defer srv.Close()
	if out, errs, code := runCLI(t, nil, "", "healthcheck", "--url", srv.URL+"/healthz"); code != 0 || !strings.Contains(out, "200 OK") {
		t.Errorf("200: exit %d\n%s%s", code, out, errs)
	}
	status.Store(http.StatusServiceUnavailable)
	if _, errs, code := runCLI(t, nil, "", "healthcheck", "--url", srv.URL+"/readyz"); code != 1 || !strings.Contains(errs, "503 Service Unavailable") {
		t.Errorf("503: exit %d\n%s", code, errs)
	}
	if _, errs, code := runCLI(t, nil, "", "healthcheck", "--url", "127.0.0.1:9464"); code != 2 {
		t.Errorf("no scheme: exit %d\n%s", code, errs)
	}
	if _, errs, code := runCLI(t, nil, "", "healthcheck", "--url", fmt.Sprintf("http://127.0.0.1:%d/healthz", testenv.FreePort(t))); code != 1 {
		t.Errorf("nothing listening: exit %d\n%s", code, errs)
	}
	// A --timeout of none or less was asked and failed, exit 1 "context
	// deadline exceeded": a container forever unhealthy, the healthy
	// process blamed (found in review). It is a bad flag: exit 2, named.
	status.Store(http.StatusOK)
	for _, d := range []string{"0s", "-1s"} {
		if _, errs, code := runCLI(t, nil, "", "healthcheck", "--url", srv.URL+"/healthz", "--timeout", d); code != 2 || !strings.Contains(errs, "--timeout must be more than 0") {
			t.Errorf("--timeout %s: exit %d\n%s", d, code, errs)
		}
	}
}
