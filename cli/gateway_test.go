package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
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
	// The edge's keys: capacity, tenant buckets (named as written: tenant
	// names are case-sensitive), the priority permission, shedding, and
	// their ranges.
	edge := minimal + `
gateway:
  listen: 127.0.0.1:0
  capacity: {rate: 5000, burst: 10000}
  tenants:
    Acme: {rate: 100, burst: 200}
  idempotency_ttl: 48h
  read_timeout: 10s
  shed: {max_conns: 2000, max_conns_per_ip: 50, max_in_flight: 100, max_in_flight_per_ip: 10, max_publish_latency: 500ms, max_stream_depth: 100000}
  keys:
    - {name: acme-app, tenant: Acme, sha256: ` + gateway.HashKey("acme-key-1") + `, rate: 50, burst: 20, priority: true}
`
	cfg, err = config.Parse([]byte(edge), envOf(map[string]string{"NOTIFIER_GATEWAY_SHED_MAX_CONNS": "3000", "NOTIFIER_GATEWAY_TENANTS_ACME_RATE": "1"}))
	if err != nil {
		t.Fatalf("the edge's keys refused: %v", err)
	}
	g = cfg.Gateway
	if g.Capacity != (gateway.Limit{Rate: 5000, Burst: 10000}) || len(g.Tenants) != 1 || g.Tenants["Acme"] != (gateway.Limit{Rate: 100, Burst: 200}) ||
		!g.Keys[0].Priority || g.IdempotencyTTL != 48*time.Hour || g.ReadTimeout != 10*time.Second || g.IdleTimeout != 2*time.Minute ||
		g.Shed != (gateway.Shed{MaxConns: 3000, MaxConnsPerIP: 50, MaxInFlight: 100, MaxInFlightPerIP: 10, MaxPublishLatency: 500 * time.Millisecond, MaxStreamDepth: 100000}) {
		t.Fatalf("the edge's keys read as %+v", g)
	}
	_, err = config.Parse([]byte(minimal+`
gateway:
  capacity: {rate: 1e-15, burst: 1}
  shed: {max_conns: 0}
  idempotency_ttl: 0s
  keys:
    - {name: x, sha256: `+gateway.HashKey("x")+`, rate: 1e12, burst: 1}
`), noEnv)
	for _, want := range []string{"gateway.capacity.rate: must be a number of jobs per second from 0.001 to 1000000, got 1e-15",
		"gateway.keys[0].rate: must be a number of jobs per second from 0.001 to 1000000, got 1e+12",
		"gateway.shed.max_conns: 0 is not allowed", "gateway.idempotency_ttl: 0s is not allowed"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("no problem %q in:\n%v", want, err)
		}
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
	// Malformed requests carrying the key, a number and a message: the
	// server's own errors must not quote them in the log.
	job := `{"user_id":"u1","channel":"sms","to":"+14155550123","body":"your code is 123456"}`
	head := "POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer acme-key-1\r\nContent-Type: application/json\r\n"
	for _, raw := range []string{
		head + "Content-Length: -1\r\n\r\n" + job,
		head + "X-Note: a\x00b\r\nContent-Length: " + strconv.Itoa(len(job)) + "\r\n\r\n" + job,
		head + "Transfer-Encoding: gzip\r\n\r\n" + job,
		head + "Transfer-Encoding: chunked\r\n\r\nzz\r\n" + job + "\r\n0\r\n\r\n",
	} {
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(c, raw)
		_, _ = io.ReadAll(c)
		c.Close()
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
	if strings.Contains(gw.logs(), "acme-key-1") || strings.Contains(gw.logs(), "+14155550123") || strings.Contains(gw.logs(), "123456") {
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
