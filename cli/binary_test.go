package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/internal/localenv"
	"github.com/notifier/notifier/testenv"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// notifierBinary builds the command once per test run, stamped with the
// repository's revision as make install stamps it (-buildvcs=true: the
// environment may say false), and -trimpath as make's steps build, so a
// fresh clone links it from the machine's build cache.
func notifierBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "notifier-bin-*")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "notifier")
		out, err := exec.Command("go", "build", "-buildvcs=true", "-trimpath", "-o", binPath, "../cmd/notifier").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// runBinary runs the notifier binary with args, as runCLI runs the
// command in the test's process: for the bench's throughput passes, which
// under -race would take minutes of the suite's CPU to measure a
// dispatcher the race detector slows several times (their code runs under
// -race in dispatch's and internal/bench's tests, and in TestBenchJSON).
func runBinary(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bin := notifierBinary(t) // built first: a cold build is not the run's time
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("notifier %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), code
}

// world is the servers a binary test runs the notifier against.
type world struct {
	t      *testing.T
	nats   *testenv.NATSServer
	redis  *testenv.RedisServer
	fake   *testenv.Fake
	config string
}

// jitterBudget is how late an arrival may be relative to its send slot in
// the pacing checks, and the jitter_budget newWorld's provider declares:
// the queue paces b/(1+b) under the contract, so contract+1 slots span
// 1 + b s and arrivals late by less than b still never put contract+1 in
// one 1 s window. These tests run `notifier run` processes beside the
// other packages' tests (and in make test's checks beside a CPU burner),
// where a send is at times 20–30 ms later at the fake than its last check
// of its slot: more than the default 15 ms, which dispatch's pacing tests
// measure in one process with the machine's load bounded. An operator on
// such a host sets jitter_budget the same way (docs/configuration.md).
const jitterBudget = 50 * time.Millisecond

// arrivalsPaced fails t when more than contract of the fake's arrivals
// (every send attempt it saw, 429s included) lie in a window of 1 s −
// jitterBudget: the slots of such arrivals lie in a 1 s window, which the
// dispatcher keeps to the contract. The fake's MaxInWindow counts accepted
// requests only, which a fake enforcing the contract caps at the contract
// whatever is sent, so it cannot check pacing.
func arrivalsPaced(t *testing.T, f *testenv.Fake, contract int) int {
	t.Helper()
	most := f.MaxArrivalsInWindow(time.Second, jitterBudget)
	if most > contract {
		t.Errorf("%d arrivals (429s included) in a window of 1 s − %s jitter budget, contract %d/s",
			most, jitterBudget.Round(100*time.Microsecond), contract)
	}
	return most
}

func newWorld(t *testing.T, contract int, extraYAML string) *world {
	t.Helper()
	w := &world{t: t, nats: testenv.NATS(t), redis: testenv.Redis(t), fake: testenv.FakeProvider(t, testenv.WithContract(contract))}
	yaml := fmt.Sprintf(`
nats:
  url: %s
  ack_wait: 4s
redis:
  addrs: ["%s"]
workers: 16
metrics:
  listen: 127.0.0.1:0
retry:
  base_delay: 50ms
  max_delay: 500ms
providers:
  - name: sms-gw
    channel: sms
    default: true
    kind: webhook
    url: %s
    rate: %d
    max_queue_delay: 1s
    timeout: 2s
    jitter_budget: %s
%s`, w.nats.URL(), w.redis.Addr(), w.fake.URL(), contract, jitterBudget, extraYAML)
	w.config = filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(w.config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return w
}

// process is one `notifier run`.
type process struct {
	cmd  *exec.Cmd
	out  *lockedWriter
	done chan struct{} // closed when the process has exited; err is then set
	err  error
}

// logs is what the process wrote so far (stdout and stderr).
func (p *process) logs() string { return p.out.String() }

func (w *world) run(env ...string) *process {
	w.t.Helper()
	return w.start([]string{"run", "--config", w.config, "--log-level", "debug"}, env...)
}

// start runs the binary with args (a command and its flags) until the test
// ends.
func (w *world) start(args []string, env ...string) *process {
	w.t.Helper()
	cmd := exec.Command(notifierBinary(w.t), args...)
	p := &process{cmd: cmd, out: &lockedWriter{w: &bytes.Buffer{}}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	// GOTRACEBACK=all: a SIGQUIT (sent by quit) prints every goroutine,
	// without the runtime's own.
	cmd.Env = append(append(os.Environ(), "GOTRACEBACK=all"), env...)
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	w.t.Cleanup(func() {
		if w.t.Failed() && p.quit() {
			// Still running in a failed test: its goroutines say where it
			// was stuck (the runtime prints them on SIGQUIT).
			w.t.Logf("goroutines of pid %d at SIGQUIT:\n%s", cmd.Process.Pid, stacks(p.logs(), 40000))
		}
		_ = cmd.Process.Kill()
		<-p.done
		if w.t.Failed() {
			logs, _, _ := strings.Cut(p.logs(), "SIGQUIT: quit")
			w.t.Logf("logs of pid %d:\n%s", cmd.Process.Pid, tail(logs, 3000))
		}
	})
	return p
}

// quit sends SIGQUIT to a process still running and waits up to 5 s for
// the runtime's goroutine dump and exit; it reports whether it was running.
func (p *process) quit() bool {
	select {
	case <-p.done:
		return false
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		return false
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
	return true
}

// stacks is the goroutine dump in logs (from "SIGQUIT: quit" on), at most
// n bytes of it.
func stacks(logs string, n int) string {
	i := strings.Index(logs, "SIGQUIT: quit")
	if i < 0 {
		return "(no goroutine dump)"
	}
	s := logs[i:]
	if len(s) > n {
		s = s[:n] + "\n…"
	}
	return s
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// publish publishes n jobs through the binary and returns their ids.
func (w *world) publish(n int) []string {
	w.t.Helper()
	out, err := exec.Command(notifierBinary(w.t), "publish", "--config", w.config, "--count", fmt.Sprint(n), "--users", "100", "--channel", "sms", "--quiet").CombinedOutput()
	if err != nil {
		w.t.Fatalf("publish: %v: %s", err, out)
	}
	if !strings.Contains(string(out), fmt.Sprintf("published %d, duplicates 0 (dropped by JetStream), failed 0", n)) {
		w.t.Fatalf("publish said: %s", out)
	}
	return w.streamIDs()
}

// streamIDs lists the ids of the jobs in the job stream now (streamJobs).
func (w *world) streamIDs() []string {
	w.t.Helper()
	var ids []string
	for _, j := range w.streamJobs() {
		ids = append(ids, j.id)
	}
	return ids
}

func (w *world) remaining() uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(w.nats.Conn())
	if err != nil {
		return 1
	}
	s, err := js.Stream(ctx, "NOTIFY")
	if err != nil {
		return 1
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 1
	}
	return info.State.Msgs
}

// delivered checks every id was accepted and returns the ids accepted more
// than once.
func (w *world) delivered(ids []string) []string {
	w.t.Helper()
	got := map[string]int{}
	for _, id := range w.fake.AcceptedIDs() {
		got[id]++
	}
	var missing []string
	for _, id := range ids {
		if got[id] == 0 {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		w.t.Fatalf("%d jobs never sent (lost), e.g. %v", len(missing), missing[:min(5, len(missing))])
	}
	return w.fake.Duplicates()
}

// TestKilledWorkerLosesNothing runs three `notifier run` processes and
// kills one with SIGKILL mid-run. Its jobs come back after ack_wait and are
// sent by the others: nothing is lost. A job is sent twice only if the kill
// fell between the provider accepting it and the ledger recording it (the
// documented window, about a millisecond per send), and then with the same
// Idempotency-Key, which a provider honouring it drops.
func TestKilledWorkerLosesNothing(t *testing.T) {
	// Not parallel: it asserts pacing at the provider, which the other
	// tests' processes (run in parallel after it) would disturb.
	measures(t)
	w := newWorld(t, 100, "")
	ids := w.publish(600)
	procs := []*process{w.run(), w.run(), w.run()}
	testenv.WaitFor(t, 60*time.Second, "150 jobs sent", func() bool { return len(w.fake.AcceptedIDs()) >= 150 })
	if err := procs[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-procs[0].done
	testenv.WaitFor(t, 90*time.Second, "all 600 sent by the survivors", func() bool { return len(w.fake.AcceptedIDs()) >= 600 })
	testenv.WaitFor(t, 10*time.Second, "job stream empty", func() bool { return w.remaining() == 0 })
	dups := w.delivered(ids)
	if len(dups) > 1 {
		t.Fatalf("sent twice: %v; only the one send in flight at the kill may repeat", dups)
	}
	for _, id := range dups {
		var keys []string
		for _, r := range w.fake.Requests() {
			if r.ID == id && r.Status == http.StatusOK {
				keys = append(keys, r.Header.Get("Idempotency-Key"))
			}
		}
		// The header is a structured-field string ("id", with quotes).
		if len(keys) != 2 || keys[0] != keys[1] || localenv.IdempotencyKey(http.Header{"Idempotency-Key": keys[:1]}) != id {
			t.Fatalf("a repeated send must carry the same Idempotency-Key (%s), got %v", id, keys)
		}
		t.Logf("job %s was accepted twice (the kill fell in the crash window); same Idempotency-Key", id)
	}
	// The arrival window is the promise (was the accepted requests'
	// window, which the fake's own contract capped at 100). A kill must not
	// set off a retry storm either: a rare late arrival may draw a 429 from
	// a fake enforcing the exact contract, more than 1 % of the jobs may not.
	most := arrivalsPaced(t, w.fake, 100)
	if n := w.fake.Count(http.StatusTooManyRequests); n > 6 {
		t.Errorf("the provider answered 429 %d times for 600 jobs, more than 6", n)
	}
	t.Logf("most arrivals in a 1 s − %s window: %d; %d answered 429",
		jitterBudget.Round(100*time.Microsecond), most, w.fake.Count(http.StatusTooManyRequests))
}

// TestSIGTERMStopsCleanly sends SIGTERM to one of two processes mid-run:
// it exits 0 within ack_wait, having released its waiting jobs; restarted,
// it finishes the work with the other. Nothing lost, nothing sent twice.
func TestSIGTERMStopsCleanly(t *testing.T) {
	// Not parallel: it asserts pacing at the provider, which the other
	// tests' processes (run in parallel after it) would disturb.
	measures(t)
	w := newWorld(t, 100, "")
	ids := w.publish(500)
	a, b := w.run(), w.run()
	_ = b
	testenv.WaitFor(t, 60*time.Second, "100 jobs sent", func() bool { return len(w.fake.AcceptedIDs()) >= 100 })
	start := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.done:
		if a.err != nil {
			t.Fatalf("exit after SIGTERM: %v, want 0\n%s", a.err, tail(a.logs(), 2000))
		}
	case <-time.After(4 * time.Second): // ack_wait
		t.Fatalf("no exit within ack_wait (4s) of SIGTERM")
	}
	t.Logf("stopped %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	w.run() // the restart
	testenv.WaitFor(t, 60*time.Second, "all 500 sent", func() bool { return len(w.fake.AcceptedIDs()) >= 500 })
	testenv.WaitFor(t, 10*time.Second, "job stream empty", func() bool { return w.remaining() == 0 })
	if dups := w.delivered(ids); len(dups) > 0 {
		t.Fatalf("sent twice after a clean stop: %v", dups)
	}
}

// TestRunRefusesWrongSecrets: a wrong Redis password or NATS token fails at
// start with a clear error that does not echo the secret.
func TestRunRefusesWrongSecrets(t *testing.T) {
	t.Parallel()
	nats := testenv.NATS(t, testenv.WithNATSToken("right-nats-token"))
	redisSrv := testenv.Redis(t, testenv.WithRedisPassword("right-redis-pw"))
	fake := testenv.FakeProvider(t)
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	yaml := fmt.Sprintf("nats: {url: %s}\nredis: {addrs: [\"%s\"]}\nmetrics: {listen: off}\nproviders:\n  - {name: p, channel: sms, default: true, kind: webhook, url: %s, rate: 10}\n",
		nats.URL(), redisSrv.Addr(), fake.URL())
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := notifierBinary(t)
	try := func(env ...string) (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "run", "--config", cfg)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return string(out), code
	}
	out, code := try("NOTIFIER_NATS_TOKEN=wrong-nats-token", "NOTIFIER_REDIS_PASSWORD=right-redis-pw")
	if code != 1 || !strings.Contains(strings.ToLower(out), "authorization") || strings.Contains(out, "wrong-nats-token") {
		t.Fatalf("wrong NATS token: exit %d, output:\n%s", code, out)
	}
	out, code = try("NOTIFIER_NATS_TOKEN=right-nats-token", "NOTIFIER_REDIS_PASSWORD=wrong-redis-pw")
	if code != 1 || !strings.Contains(out, "WRONGPASS") || strings.Contains(out, "wrong-redis-pw") || strings.Contains(out, "right-redis-pw") {
		t.Fatalf("wrong Redis password: exit %d, output:\n%s", code, out)
	}
}

func TestCheckExitCodes(t *testing.T) {
	t.Parallel()
	bin := notifierBinary(t)
	good := filepath.Join("..", "config.yaml")
	cmd := exec.Command(bin, "check", "--config", good)
	cmd.Env = withoutNotifierVars(os.Environ()) // the shipped file passes with no environment set
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("check of config.yaml: %v\n%s", err, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("workers: -1\nproviders: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "check", "--config", bad).CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 {
		t.Fatalf("check of a bad file: %v, want exit 2\n%s", err, out)
	}
	for _, want := range []string{"workers:", "providers:"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	if _, err := exec.Command(bin, "frobnicate").CombinedOutput(); err == nil || err.(*exec.ExitError).ExitCode() != 2 {
		t.Errorf("an unknown command: %v, want exit 2", err)
	}
	out, err = exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "notifier ") {
		t.Errorf("version: %v %s", err, out)
	}
}

// TestRunServesHealthAndMetrics: /healthz answers, /readyz says ready and
// turns 503 within seconds of Redis going away (hold: no jobs taken), then
// ready again; /metrics carries SPEC §8's metrics.
func TestRunServesHealthAndMetrics(t *testing.T) {
	t.Parallel()
	port := testenv.FreePort(t)
	w := newWorld(t, 100, "")
	setMetricsPort(t, w, port)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	status := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	ids := w.publish(20)
	w.run()
	testenv.WaitFor(t, 30*time.Second, "/readyz 200", func() bool { c, _ := status("/readyz"); return c == 200 })
	if c, body := status("/healthz"); c != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", c, body)
	}
	testenv.WaitFor(t, 30*time.Second, "20 jobs sent", func() bool { return len(w.fake.AcceptedIDs()) >= len(ids) })
	var metrics string
	testenv.WaitFor(t, 10*time.Second, "/metrics counts the 20 sent jobs", func() bool {
		_, metrics = status("/metrics")
		return strings.Contains(metrics, `notifier_jobs_total{channel="sms",outcome="sent",provider="sms-gw"} 20`)
	})
	// notifier_deferrals_total appears with the first deferral, which a
	// new install no longer has (its first jobs wait no cold start).
	for _, name := range []string{"notifier_jobs_total", "notifier_queue_latency_seconds",
		"notifier_job_latency_seconds", "notifier_leaky_queue_depth", "notifier_limit_decisions_total",
		"notifier_provider_requests_total", "notifier_provider_request_seconds", "notifier_provider_paused"} {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if c, page := status("/status"); c != 200 || !strings.Contains(page, "<canvas") && !strings.Contains(page, "<script") {
		t.Errorf("/status: %d, not the status page", c)
	}
	testenv.WaitFor(t, 10*time.Second, "/status.json names the provider", func() bool {
		c, js := status("/status.json")
		return c == 200 && strings.Contains(js, `"sms-gw"`)
	})
	w.redis.Stop()
	testenv.WaitFor(t, 10*time.Second, "/readyz 503 while Redis is down", func() bool { c, _ := status("/readyz"); return c == 503 })
	w.redis.Start()
	testenv.WaitFor(t, 20*time.Second, "/readyz 200 again", func() bool { c, _ := status("/readyz"); return c == 200 })
}

// withoutNotifierVars is env without the variables a configuration reads
// (NOTIFIER_*) or the shipped one could name (PUSH_TOKEN).
func withoutNotifierVars(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "NOTIFIER_") && !strings.HasPrefix(kv, "PUSH_TOKEN=") {
			out = append(out, kv)
		}
	}
	return out
}
