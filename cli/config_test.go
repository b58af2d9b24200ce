package cli

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/internal/service"
)

// minimal is the smallest valid configuration: only providers is required.
const minimal = `
providers:
  - name: sms-gateway
    channel: sms
    default: true
    kind: webhook
    url: http://127.0.0.1:8080/send
    rate: 100
`

func noEnv(string) string { return "" }

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// writeConfig writes yaml to a file of the test's and returns its path.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCheckRedactsCredentialsInURLs: `check` printed a password written
// into NOTIFIER_NATS_URL (run redacted it), and a redis.addrs entry of the
// form user:PASS@host:port was echoed whole in its error.
func TestCheckRedactsCredentialsInURLs(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := runCLI(t, map[string]string{"NOTIFIER_NATS_URL": "nats://alice:S3cretPass@127.0.0.1:4222"}, "", "check", "--config", writeConfig(t, minimal))
	if code != 0 || strings.Contains(stdout+stderr, "S3cretPass") || !strings.Contains(stdout, "nats://[redacted]@127.0.0.1:4222") {
		t.Errorf("check with a password in the NATS URL: exit %d\n%s%s", code, stdout, stderr)
	}
	stdout, stderr, code = runCLI(t, map[string]string{"NOTIFIER_REDIS_ADDRS": "app:S3cretPass@redis-1:6379x"}, "", "check", "--config", writeConfig(t, minimal))
	if code != 2 || strings.Contains(stdout+stderr, "S3cretPass") || !strings.Contains(stderr, "[redacted]@redis-1:6379x") {
		t.Errorf("check with a password in a redis address: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestCheckRunsRunsValidation: a provider secret's variable unset passed
// `check` (exit 0) and failed `run` with exit 1, where a bad configuration
// exits 2. Both now refuse it, naming the variable, with exit 2, and run
// before it connects to anything.
func TestCheckRunsRunsValidation(t *testing.T) {
	t.Parallel()
	y := strings.Replace(minimal, "rate: 100", "rate: 100\n    credentials_env: GATEWAY_TOKEN_UNSET", 1)
	path := writeConfig(t, y)
	for _, cmd := range []string{"check", "run"} {
		stdout, stderr, code := runCLI(t, nil, "", cmd, "--config", path)
		if code != 2 || !strings.Contains(stderr, "GATEWAY_TOKEN_UNSET") {
			t.Errorf("%s with the provider's secret unset: exit %d, want 2 naming the variable\n%s%s", cmd, code, stdout, stderr)
		}
	}
	if _, stderr, code := runCLI(t, map[string]string{"GATEWAY_TOKEN_UNSET": "tok"}, "", "check", "--config", path); code != 0 {
		t.Errorf("check with the secret set: exit %d\n%s", code, stderr)
	}
}

// TestCheckReportsTenantWeights: `check` names a bad weight's key, value
// and what is allowed, exit 2; a good file's weights are described.
func TestCheckReportsTenantWeights(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := runCLI(t, nil, "", "check", "--config", writeConfig(t, minimal+"tenants:\n  weights: {acme: 0, \"a b\": 2, Bank: 2}\n"))
	if code != 2 || !strings.Contains(stderr, "tenants.weights.acme: must be a number from 0.001 to 1000 (a tenant left out weighs 1), got 0") ||
		!strings.Contains(stderr, `tenants.weights."a b": "a b" is not a tenant name`) || !strings.Contains(stderr, "2 problems") {
		t.Fatalf("check with bad weights: exit %d\n%s%s", code, stdout, stderr)
	}
	stdout, stderr, code = runCLI(t, nil, "", "check", "--config", writeConfig(t, minimal+"tenants:\n  weights: {acme: 3, Bank: 2}\n"))
	if code != 0 || !strings.Contains(stdout, "tenants:   weights Bank 2, acme 3; any other tenant 1") {
		t.Fatalf("check with good weights: exit %d\n%s%s", code, stdout, stderr)
	}
}

func TestSecretsNeverPrinted(t *testing.T) {
	t.Parallel()
	const pw, tok = "hunter2-redis-secret", "nats-token-secret-42"
	env := envOf(map[string]string{"NOTIFIER_REDIS_PASSWORD": pw, "NOTIFIER_NATS_TOKEN": tok, "NOTIFIER_REDIS_USERNAME": "app"})
	cfg, err := config.Parse([]byte(minimal), env)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	describeConfig(&b, cfg)
	// A broken config with the same secrets: the report must not echo them.
	_, bad := config.Parse([]byte(minimal+"workers: -1\nredis:\n  addrs: [\"nohost\"]\n"), env)
	for _, out := range []string{b.String(), bad.Error()} {
		if strings.Contains(out, pw) || strings.Contains(out, tok) {
			t.Fatalf("a secret was printed:\n%s", out)
		}
	}
	if !strings.Contains(b.String(), "ACL user app") || !strings.Contains(b.String(), "auth: token") {
		t.Errorf("check output should say which auth is used:\n%s", b.String())
	}
}

// TestTenantWeightsReachTheDispatcher: the weights as the file spells them
// are what a reload hands the dispatcher and what check describes.
func TestTenantWeightsReachTheDispatcher(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(minimal+"tenants:\n  weights: {acme: 3, Acme: 2, Bank.eu: 0.5, x_y-z: 1000}\n"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"acme": 3, "Acme": 2, "Bank.eu": 0.5, "x_y-z": 1000}
	if r := service.ReloadOf(cfg, nil); !maps.Equal(r.TenantWeights, want) {
		t.Fatalf("a reload hands the dispatcher %v, want %v", r.TenantWeights, want)
	}
	var b strings.Builder
	describeConfig(&b, cfg)
	if !strings.Contains(b.String(), "tenants:   weights Acme 2, Bank.eu 0.5, acme 3, x_y-z 1000; any other tenant 1") {
		t.Errorf("check's description:\n%s", b.String())
	}
}

// TestCheckRefusesAbsurdRates: the values issue 26 found passing `check`
// (a fleet rate of 1e-15, whose script overflowed and left keys expiring
// in ~9e18 ms; a fleet rate and burst of 1e12; a provider's rate of
// 1e12) are refused by check, run and gateway alike, exit 2, every
// problem listed at once with its key, its value and the range; the
// environment's values too.
func TestCheckRefusesAbsurdRates(t *testing.T) {
	t.Parallel()
	y := strings.Replace(minimal, "rate: 100", "rate: 1e12", 1) + "global:\n  rate: 1e-15\n  burst: 1e12\n" + gatewayBlock
	path := writeConfig(t, y)
	want := []string{
		"3 problems",
		"global.rate: must be a number of tokens per second from 1/86400 (one a day) to 1000000, got 1e-15",
		"global.burst: must be a whole number from 1 to 1000000, got 1000000000000",
		"providers[0] (sms-gateway).rate: must be a number of units per second from 1/86400 (one a day) to 1000000 (one a µs: the queue's interval is whole µs), got 1e+12",
	}
	var first string
	for _, cmd := range []string{"check", "run", "gateway"} {
		stdout, stderr, code := runCLI(t, nil, "", cmd, "--config", path)
		if code != 2 {
			t.Errorf("%s: exit %d, want 2\n%s%s", cmd, code, stdout, stderr)
		}
		for _, w := range want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr lacks %q:\n%s", cmd, w, stderr)
			}
		}
		if first == "" {
			first = stderr
		} else if stderr != first {
			t.Errorf("%s refuses the file otherwise than check:\n%s\ncheck:\n%s", cmd, stderr, first)
		}
	}
	_, stderr, code := runCLI(t, map[string]string{"NOTIFIER_GLOBAL_RATE": "1e12", "NOTIFIER_GLOBAL_BURST": "10"}, "", "check", "--config", writeConfig(t, minimal))
	if code != 2 || !strings.Contains(stderr, "global.rate: must be a number of tokens per second from 1/86400 (one a day) to 1000000, got 1e+12") {
		t.Errorf("check with NOTIFIER_GLOBAL_RATE=1e12: exit %d\n%s", code, stderr)
	}
}
