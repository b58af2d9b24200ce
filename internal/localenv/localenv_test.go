package localenv_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/notifier/notifier/internal/localenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestContractWait: a contract of n in any trailing second refuses the
// (n+1)th request inside a second of the first, says how long until the
// window frees, and accepts at that instant.
func TestContractWait(t *testing.T) {
	t0 := time.Unix(1000, 0)
	acc := []time.Time{t0, t0.Add(100 * time.Millisecond), t0.Add(200 * time.Millisecond)}
	for _, tc := range []struct {
		n    int
		at   time.Duration
		want time.Duration
	}{
		{3, 300 * time.Millisecond, 700 * time.Millisecond},
		{3, time.Second, 0},
		{4, 300 * time.Millisecond, 0},
		{2, 300 * time.Millisecond, 800 * time.Millisecond},
		{0, 0, 0},
	} {
		if got := localenv.ContractWait(acc, tc.n, t0.Add(tc.at)); got != tc.want {
			t.Errorf("n %d at +%s: wait %s, want %s", tc.n, tc.at, got, tc.want)
		}
	}
}

// TestMostInWindow counts a window as a provider does: two instants w
// apart are never in one window.
func TestMostInWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ts := []time.Time{t0, t0.Add(500 * time.Millisecond), t0.Add(999 * time.Millisecond), t0.Add(time.Second)}
	if got := localenv.MostInWindow(ts, time.Second); got != 3 {
		t.Errorf("most in 1 s: %d, want 3", got)
	}
	if got := localenv.MostInWindow(ts, 0); got != 0 {
		t.Errorf("most in 0 s: %d, want 0", got)
	}
}

// TestSandboxEnforcesItsContract: a lane of 5/s accepts 5, answers the
// 6th 429 with Retry-After, answers a repeated Idempotency-Key 200 without
// delivering it twice, and fails every 3rd new request 503 when asked.
func TestSandboxEnforcesItsContract(t *testing.T) {
	sb, err := localenv.StartSandbox(localenv.SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	url := sb.Lane("/sms", 5, 0)
	post := func(key string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(`{"id":"`+key+`"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for i := range 5 {
		if r := post("j" + strconv.Itoa(i)); r.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d", i, r.StatusCode)
		}
	}
	if r := post("j0"); r.StatusCode != http.StatusOK {
		t.Errorf("a repeated key: %d, want 200", r.StatusCode)
	}
	r := post("j5")
	if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") != "1" {
		t.Errorf("the 6th in a second: %d Retry-After %q, want 429 and 1", r.StatusCode, r.Header.Get("Retry-After"))
	}
	st := sb.Stats("/sms")
	if st.Accepted != 5 || st.Duplicates != 1 || st.Answered429 != 1 || st.MostInOneSecond != 5 || sb.Accepted("/sms") != 5 {
		t.Errorf("stats %+v", st)
	}
	if got := sb.MostArrivals("/sms", time.Second); got != 6 {
		t.Errorf("most arrivals in 1 s, 429s included: %d, want 6", got)
	}
	if _, ok := sb.AcceptedAt("/sms", "j5"); ok {
		t.Error("the refused job is recorded as accepted")
	}

	url = sb.Lane("/flaky", 100, 3)
	codes := []int{}
	for i := range 6 {
		codes = append(codes, post("f"+strconv.Itoa(i)).StatusCode)
	}
	if codes[2] != http.StatusServiceUnavailable || codes[5] != http.StatusServiceUnavailable || codes[0] != http.StatusOK {
		t.Errorf("every 3rd fails: %v", codes)
	}
}

// TestSandboxChecksTheProtocol: the sandbox refuses what breaks the
// webhook protocol the way the tests' fake provider does (ReadWebhook):
// 405, 415, 413 and 400 with a JSON reason, and none of them is counted as
// an arrival or delivered.
func TestSandboxChecksTheProtocol(t *testing.T) {
	sb, err := localenv.StartSandbox(localenv.SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	url := sb.Lane("/push", 100, 0)
	for _, c := range []struct {
		name, method, ctype, body string
		want                      int
	}{
		{"a GET", http.MethodGet, "application/json", "", http.StatusMethodNotAllowed},
		{"text/plain", http.MethodPost, "text/plain", `{"id":"a"}`, http.StatusUnsupportedMediaType},
		{"over 1 MiB", http.MethodPost, "application/json", `{"id":"` + strings.Repeat("x", localenv.MaxProviderBody) + `"}`, http.StatusRequestEntityTooLarge},
		{"an array", http.MethodPost, "application/json", `[1]`, http.StatusBadRequest},
		{"not JSON", http.MethodPost, "application/json; charset=utf-8", `{`, http.StatusBadRequest},
		{"a job", http.MethodPost, "application/json; charset=utf-8", `{"id":"j1"}`, http.StatusOK},
	} {
		req, _ := http.NewRequest(c.method, url, strings.NewReader(c.body))
		req.Header.Set("Content-Type", c.ctype)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d, want %d", c.name, resp.StatusCode, c.want)
		}
		var why struct{ Reason string }
		if c.want != http.StatusOK && (json.Unmarshal(body, &why) != nil || why.Reason == "") {
			t.Errorf("%s: body %q, want a JSON reason", c.name, body)
		}
	}
	if st := sb.Stats("/push"); st.Accepted != 1 || sb.MostArrivals("/push", time.Minute) != 1 {
		t.Errorf("only the job counts: %+v, arrivals %d", st, sb.MostArrivals("/push", time.Minute))
	}
}

// TestServersStartStopAndRestart: a private redis-server and an embedded
// NATS server start on free ports, keep their ports across a restart
// (Redis wiped, NATS keeping its store), and Close leaves nothing running.
func TestServersStartStopAndRestart(t *testing.T) {
	ctx := context.Background()
	rs, err := localenv.StartRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	c := redis.NewClient(rs.Options())
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v := rs.Version(ctx); v == "" {
		t.Error("no redis_version")
	}
	port := rs.Port()
	if err := rs.Restart(); err != nil {
		t.Fatal(err)
	}
	if rs.Port() != port || !rs.Running() {
		t.Errorf("after restart: port %d (was %d), running %v", rs.Port(), port, rs.Running())
	}
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("get after restart: %v, want redis.Nil", err)
	}

	ns, err := localenv.StartNATS()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	nc, err := nats.Connect(ns.URL(), ns.ConnOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := ns.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := nc.FlushTimeout(10 * time.Second); err != nil {
		t.Errorf("flush after the restart: %v", err)
	}
	ns.Close()
	if _, err := net.DialTimeout("tcp", ns.URL()[len("nats://"):], time.Second); err == nil {
		t.Error("NATS still listens after Close")
	}
}

// TestCheckFree names what holds a taken port and suggests the next one.
func TestCheckFree(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = localenv.CheckFree("the NATS port", ln.Addr().String(), "--nats-listen")
	var taken *localenv.PortTakenError
	if !errors.As(err, &taken) || taken.Flag != "--nats-listen" {
		t.Fatalf("CheckFree on a taken port: %v", err)
	}
}

// TestIdempotencyKeyHeader: the key of an Idempotency-Key header sent as
// the draft's structured-field String ("job-1", the webhook kind's form)
// or bare (job-1, older senders) is the same.
func TestIdempotencyKeyHeader(t *testing.T) {
	for v, want := range map[string]string{
		`"job-1"`: "job-1", "job-1": "job-1", `"say \"hi\" \\"`: `say "hi" \`, "": "", `"bad"quote"`: `"bad"quote"`,
	} {
		h := http.Header{}
		if v != "" {
			h.Set("Idempotency-Key", v)
		}
		if got := localenv.IdempotencyKey(h); got != want {
			t.Errorf("IdempotencyKey(%s) = %q, want %q", v, got, want)
		}
	}
}
