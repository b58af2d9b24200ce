package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/gateway"
	"github.com/notifier/notifier/testenv"
)

// gatewayBlock is a gateway: block with one key, "acme-key-1", for tenant
// acme.
var gatewayBlock = `
gateway:
  listen: 127.0.0.1:0
  legacy_headers: true
  keys:
    - name: acme-app
      tenant: acme
      sha256: ` + gateway.HashKey("acme-key-1") + `
      rate: 50
      burst: 20
`

func TestGatewayConfigBlock(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(minimal+gatewayBlock), envOf(map[string]string{"NOTIFIER_GATEWAY_AUTH_FAILURES_LIMIT": "5"}))
	if err != nil {
		t.Fatalf("config with a gateway block refused: %v", err)
	}
	g := cfg.Gateway
	if g == nil || g.Listen != "127.0.0.1:0" || len(g.Keys) != 1 || g.Keys[0].Rate != 50 || g.Keys[0].Tenant != "acme" ||
		g.AuthFailures.Limit != 5 || g.AuthFailures.Window != time.Minute || g.PublishTimeout != 5*time.Second || !g.LegacyHeaders {
		t.Fatalf("gateway block read as %+v", g)
	}
	// Left out: no gateway, and run does not need one.
	if cfg, err := config.Parse([]byte(minimal), noEnv); err != nil || cfg.Gateway != nil {
		t.Fatalf("without a gateway block: %+v, %v", cfg.Gateway, err)
	}
	bad := minimal + `
gateway:
  listen: nowhere
  publish_timeout: 0s
  kyes: []
  keys:
    - name: x
      sha256: not-a-hash
      rate: 1
      burst: 0
`
	_, err = config.Parse([]byte(bad), noEnv)
	var ce *config.Error
	if !errors.As(err, &ce) {
		t.Fatalf("bad gateway block: %v, want a *config.Error", err)
	}
	for _, want := range []string{"gateway.listen:", "gateway.publish_timeout: 0s is not allowed", `gateway.kyes: unknown key (did you mean "keys"?)`,
		"gateway.keys[0].sha256:", "gateway.keys[0].burst:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("no problem %q in:\n%v", want, err)
		}
	}
}

func TestGatewayHashKey(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := run(context.Background(), []string{"gateway", "hash-key"}, strings.NewReader("  acme-key-1 \n"), &out, io.Discard, noEnv)
	if err != nil || strings.TrimSpace(out.String()) != gateway.HashKey("acme-key-1") {
		t.Fatalf("hash-key: %q, %v", out.String(), err)
	}
	err = run(context.Background(), []string{"gateway", "hash-key"}, strings.NewReader(""), &out, io.Discard, noEnv)
	if exitCode(err, io.Discard) != exitUsage {
		t.Fatalf("hash-key of nothing: %v, want exit 2", err)
	}
}

func TestGatewayCheckAndMissingBlock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	with := filepath.Join(dir, "with.yaml")
	without := filepath.Join(dir, "without.yaml")
	if err := os.WriteFile(with, []byte(minimal+gatewayBlock), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(without, []byte(minimal), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"check", "--config", with}, nil, &out, io.Discard, noEnv); err != nil {
		t.Fatalf("check: %v", err)
	}
	if !strings.Contains(out.String(), "gateway:   127.0.0.1:0, 1 API keys") || !strings.Contains(out.String(), "key        acme-app: acme, 50 jobs/s, burst 20") {
		t.Errorf("check does not describe the gateway:\n%s", out.String())
	}
	if strings.Contains(out.String(), gateway.HashKey("acme-key-1")) {
		t.Errorf("check prints a key's hash")
	}
	err := run(context.Background(), []string{"gateway", "--config", without}, nil, io.Discard, io.Discard, noEnv)
	if exitCode(err, io.Discard) != exitUsage || !strings.Contains(err.Error(), "gateway: required") {
		t.Fatalf("gateway without a gateway block: %v, want exit 2 naming gateway", err)
	}
}

// TestGatewayEndToEnd runs the binaries: `notifier run` and `notifier
// gateway` on real NATS and Redis; a job POSTed to the gateway is sent to
// the provider, with the tenant of the key; SIGTERM stops the gateway, exit 0.
func TestGatewayEndToEnd(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 100, gatewayBlock)
	w.run()
	gw := w.start([]string{"gateway", "--config", w.config})
	var base string
	addr := regexp.MustCompile(`gateway listening on (http://127\.0\.0\.1:[0-9]+)`)
	testenv.WaitFor(t, 20*time.Second, "the gateway to listen", func() bool {
		m := addr.FindStringSubmatch(gw.logs())
		if m != nil {
			base = m[1]
		}
		return m != nil
	})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/notifications",
		strings.NewReader(`{"user_id":"u1","channel":"sms","to":"+14155550123","body":"your code is 123456"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer acme-key-1")
	req.Header.Set("Idempotency-Key", "e2e-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || !strings.Contains(string(body), `"id":"e2e-1"`) {
		t.Fatalf("POST: %d %s", resp.StatusCode, body)
	}
	if resp.Header.Get("RateLimit") != `"key";r=19;t=1` || resp.Header.Get("X-RateLimit-Remaining") != "19" {
		t.Errorf("rate-limit headers %v", resp.Header)
	}
	testenv.WaitFor(t, 30*time.Second, "the job at the provider", func() bool {
		for _, id := range w.fake.AcceptedIDs() {
			if id == "e2e-1" {
				return true
			}
		}
		return false
	})
	if m := httpGet(t, base+"/metrics"); !strings.Contains(m, `notifier_gateway_requests_total{code="202",key="acme-app"} 1`) {
		t.Errorf("metrics:\n%s", m)
	}
	for range 2 { // counted for top --gateway
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/notifications", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer wrong")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a wrong key: %d", resp.StatusCode)
		}
	}
	if err := gw.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gw.done:
	case <-time.After(15 * time.Second):
		t.Fatal("the gateway did not stop within 15 s of SIGTERM")
	}
	if gw.err != nil {
		t.Fatalf("gateway exit: %v\n%s", gw.err, gw.logs())
	}
	if strings.Contains(gw.logs(), "acme-key-1") || strings.Contains(gw.logs(), "+14155550123") {
		t.Errorf("the gateway logged a key or a number:\n%s", gw.logs())
	}
	// The stopped gateway flushed its rejection counts: top --gateway shows them.
	var out bytes.Buffer
	if err := run(context.Background(), []string{"top", "--gateway", "--config", w.config, "--json"}, nil, &out, io.Discard, noEnv); err != nil {
		t.Fatalf("top --gateway: %v", err)
	}
	if strings.TrimSpace(out.String()) != `[{"key":"unauthenticated","rejected":2}]` {
		t.Errorf("top --gateway --json: %s", out.String())
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
