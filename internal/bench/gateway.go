package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/notifier/notifier/gateway"
	"github.com/notifier/notifier/internal/localenv"
	"github.com/notifier/notifier/internal/stats"
	"github.com/notifier/notifier/queue"
	"github.com/valyala/fasthttp"
)

// GatewayResult is `notifier bench --gateway`: the 202 path and the
// 429 path of POST /v1/notifications, one after the other, on this machine.
type GatewayResult struct {
	Command     string     `json:"command"`
	Requests    int        `json:"requests_per_pass"`
	Concurrency int        `json:"concurrency"`
	Accepted    GatewayRun `json:"accepted"`
	Limited     GatewayRun `json:"limited"`
	// Floor is the same requests answered by a handler that does nothing
	// but write a fixed 429 (no key, no bucket, no metric) on a server
	// configured as the gateway's (Gateway.Server): what the HTTP server
	// alone costs per request on this machine, the least any answer costs.
	Floor GatewayRun `json:"http_floor"`
	// NetHTTPFloor is the same with Go's net/http server, which the
	// gateway does not use: its floor is what a 429 would cost on it.
	NetHTTPFloor GatewayRun `json:"net_http_floor"`
	// CPURatio is the accepted path's CPU per request over the limited
	// path's: how many times cheaper a 429 is.
	CPURatio float64 `json:"cpu_ratio"`
	// FloorRatio and NetHTTPFloorRatio are the accepted path's CPU per
	// request over each floor's: the most CPURatio could be with a 429
	// that cost nothing beyond that server's own work.
	FloorRatio        float64 `json:"cpu_ratio_at_http_floor"`
	NetHTTPFloorRatio float64 `json:"cpu_ratio_at_net_http_floor"`
}

// GatewayRun is one pass's figures. CPU is this process's (the
// gateway, the HTTP client, and the embedded NATS server unless
// --nats-url) plus redis-server's (INFO cpu), per request.
type GatewayRun struct {
	Status            int     `json:"status"`
	Seconds           float64 `json:"seconds"`
	RequestsPerSecond float64 `json:"requests_per_second"`
	P50Ms             float64 `json:"p50_ms"`
	P99Ms             float64 `json:"p99_ms"`
	CPUMicrosPerReq   float64 `json:"cpu_us_per_request"`
	ProcessCPUMicros  float64 `json:"process_cpu_us_per_request"`
	RedisCPUMicros    float64 `json:"redis_cpu_us_per_request"`
	ClientCPUMicros   float64 `json:"client_cpu_us_per_request"` // the load generator's, not counted above
}

// Bench keys: one that never limits, one that allows a single job.
const (
	benchOpenKey    = "bench-open-key"
	benchLimitedKey = "bench-limited-key"
)

// gatewayPass runs the gateway in this process on the bench's NATS and
// Redis and times n requests of each path at f.Workers concurrent clients.
func (w *benchWorld) gatewayPass(ctx context.Context) (*GatewayResult, error) {
	n, conc := w.f.Jobs, w.f.Workers
	exe := w.f.Executable
	gw, err := gateway.New(gateway.Config{Keys: []gateway.Key{
		{Name: "bench-open", SHA256: gateway.HashKey(benchOpenKey), Rate: 1e6, Burst: 1e6},
		{Name: "bench-limited", SHA256: gateway.HashKey(benchLimitedKey), Rate: gateway.MinRate, Burst: 1},
	}}, gateway.Deps{
		Redis: w.rdb, KeyPrefix: w.prefix, Publisher: queue.NewPublisher(w.js),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the bench gateway: %w", err)
	}
	srv := gw.Server()
	go func() { _ = gw.Serve(srv, ln) }()
	defer func() { _ = srv.Shutdown() }()
	url := "http://" + ln.Addr().String() + "/v1/notifications"
	client := loadClient(conc)
	defer client.CloseIdleConnections()

	res := &GatewayResult{Command: w.f.gatewayCommand(), Requests: n, Concurrency: conc}
	warm := warmupJobs(n)
	if _, _, err := w.gatewayLoad(ctx, client, url, benchOpenKey, warm, conc, http.StatusAccepted, "gateway warm-up (202)"); err != nil {
		return nil, err
	}
	if res.Accepted, err = w.gatewayRun(ctx, exe, url, benchOpenKey, n, conc, http.StatusAccepted, "gateway 202 path"); err != nil {
		return nil, err
	}
	// The limited key's one token, then nothing but 429s.
	if _, _, err := w.gatewayLoad(ctx, client, url, benchLimitedKey, 1, 1, http.StatusAccepted, "gateway: the limited key's one job"); err != nil {
		return nil, err
	}
	if _, _, err := w.gatewayLoad(ctx, client, url, benchLimitedKey, warm, conc, http.StatusTooManyRequests, "gateway warm-up (429)"); err != nil {
		return nil, err
	}
	if res.Limited, err = w.gatewayRun(ctx, exe, url, benchLimitedKey, n, conc, http.StatusTooManyRequests, "gateway 429 path"); err != nil {
		return nil, err
	}
	if res.Limited.CPUMicrosPerReq > 0 {
		res.CPURatio = res.Accepted.CPUMicrosPerReq / res.Limited.CPUMicrosPerReq
	}
	body := []byte(`{"type":"quota-exceeded","title":"Quota exceeded","status":429}` + "\n")
	fast := gw.Server()
	fast.Handler = func(c *fasthttp.RequestCtx) {
		c.SetContentType("application/problem+json")
		c.Response.Header.Set("Retry-After", "1")
		c.SetStatusCode(http.StatusTooManyRequests)
		c.SetBody(body)
	}
	std := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header()["Content-Type"] = []string{"application/problem+json"}
		rw.Header()["Retry-After"] = []string{"1"}
		rw.WriteHeader(http.StatusTooManyRequests)
		_, _ = rw.Write(body)
	})}
	if res.Floor, err = w.httpFloorPass(ctx, exe, n, conc, fast.Serve, fast.Shutdown, "HTTP floor: the gateway's server, a handler that only answers 429"); err != nil {
		return nil, err
	}
	if res.NetHTTPFloor, err = w.httpFloorPass(ctx, exe, n, conc, std.Serve, std.Close, "HTTP floor: net/http, a handler that only answers 429"); err != nil {
		return nil, err
	}
	if res.Floor.CPUMicrosPerReq > 0 && res.NetHTTPFloor.CPUMicrosPerReq > 0 {
		res.FloorRatio = res.Accepted.CPUMicrosPerReq / res.Floor.CPUMicrosPerReq
		res.NetHTTPFloorRatio = res.Accepted.CPUMicrosPerReq / res.NetHTTPFloor.CPUMicrosPerReq
	}
	return res, nil
}

// httpFloorPass times n requests against a server (serve, stopped by stop)
// whose handler only writes a fixed 429: that server's own cost.
func (w *benchWorld) httpFloorPass(ctx context.Context, exe string, n, conc int, serve func(net.Listener) error, stop func() error, phase string) (GatewayRun, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return GatewayRun{}, fmt.Errorf("listen for the bench's floor server: %w", err)
	}
	go func() { _ = serve(ln) }()
	defer func() { _ = stop() }()
	url := "http://" + ln.Addr().String() + "/v1/notifications"
	client := loadClient(conc)
	defer client.CloseIdleConnections()
	if _, _, err := w.gatewayLoad(ctx, client, url, benchLimitedKey, warmupJobs(n), conc, http.StatusTooManyRequests, phase+" (warm-up)"); err != nil {
		return GatewayRun{}, err
	}
	return w.gatewayRun(ctx, exe, url, benchLimitedKey, n, conc, http.StatusTooManyRequests, phase)
}

// loadClient is the HTTP client of conc concurrent requests, each on its
// own kept-alive connection.
func loadClient(conc int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc}, Timeout: 30 * time.Second}
}

// gatewayRun is one timed pass: the requests come from a child process
// (`notifier bench gateway-client`), so that this process's CPU is the
// gateway's and the embedded NATS server's only, not the load generator's.
func (w *benchWorld) gatewayRun(ctx context.Context, exe, url, key string, n, conc, want int, phase string) (GatewayRun, error) {
	before, err := w.readMeter(ctx, true)
	if err != nil {
		return GatewayRun{}, err
	}
	w.prog.set(phase+" (client in a child process)", 0, nil)
	cmd := exec.CommandContext(ctx, exe, "bench", "gateway-client", "--url", url, "--key", key, "--requests", strconv.Itoa(n),
		"--concurrency", strconv.Itoa(conc), "--status", strconv.Itoa(want), "--run", w.run+"-"+strconv.Itoa(want))
	localenv.BindToParent(cmd)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return GatewayRun{}, fmt.Errorf("%s: the client process: %w: %s", phase, err, strings.TrimSpace(stderr.String()))
	}
	var cr GatewayClientResult
	if err := json.Unmarshal(out, &cr); err != nil {
		return GatewayRun{}, fmt.Errorf("%s: the client's report %q: %w", phase, out, err)
	}
	after, err := w.readMeter(ctx, true)
	if err != nil {
		return GatewayRun{}, err
	}
	_, _, redisCPU := after.redis.diff(before.redis)
	proc := float64((after.cpu - before.cpu).Microseconds()) / float64(n)
	rcpu := redisCPU * 1e6 / float64(n)
	client := float64(childCPU(cmd.ProcessState).Microseconds()) / float64(n)
	return GatewayRun{
		Status: want, Seconds: cr.Seconds, RequestsPerSecond: float64(n) / cr.Seconds,
		P50Ms: cr.P50Ms, P99Ms: cr.P99Ms,
		CPUMicrosPerReq: proc + rcpu, ProcessCPUMicros: proc, RedisCPUMicros: rcpu, ClientCPUMicros: client,
	}, nil
}

// GatewayClient is the load generator of the gateway run, which runs it in
// a child process (`notifier bench gateway-client`) so that the bench's
// CPU is the gateway's alone: n single-job requests with key to url from
// conc clients, each answered want, ids <run>-gw-….
func GatewayClient(ctx context.Context, url, key, run string, n, conc, want int) (GatewayClientResult, error) {
	client := loadClient(conc)
	defer client.CloseIdleConnections()
	var done atomic.Int64
	start := time.Now()
	lat, _, err := gatewayLoad(ctx, client, url, key, run, n, conc, want, "gateway-client", &done)
	if err != nil {
		return GatewayClientResult{}, err
	}
	took := time.Since(start)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return GatewayClientResult{Seconds: took.Seconds(), P50Ms: ms(stats.Percentile(lat, 0.50)), P99Ms: ms(stats.Percentile(lat, 0.99))}, nil
}

// GatewayClientResult is what `notifier bench gateway-client` prints.
type GatewayClientResult struct {
	Seconds float64 `json:"seconds"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
}

// gatewayLoad sends n single-job requests with key from conc clients and
// returns each one's latency; an answer other than want fails the bench.
func (w *benchWorld) gatewayLoad(ctx context.Context, client *http.Client, url, key string, n, conc, want int, phase string) ([]time.Duration, int, error) {
	var done atomic.Int64
	w.prog.set(phase, n, func() int { return int(done.Load()) })
	return gatewayLoad(ctx, client, url, key, w.run, n, conc, want, phase, &done)
}

// gatewayLoad sends n single-job requests (ids <run>-gw-…) with key from
// conc clients, counting the answered ones in done, and returns each
// one's latency; an answer other than want fails it.
func gatewayLoad(ctx context.Context, client *http.Client, url, key, run string, n, conc, want int, phase string, done *atomic.Int64) ([]time.Duration, int, error) {
	var next atomic.Int64
	lat := make([]time.Duration, n)
	var (
		mu       sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	var wg sync.WaitGroup
	for c := range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				body := fmt.Sprintf(`{"id":"%s-gw-%d-%d","user_id":"user-%d","channel":"sms","to":"+14155550123","body":"bench"}`, run, c, i, i%1000)
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
				if err != nil {
					fail(err)
					return
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+key)
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					fail(fmt.Errorf("%s: %w", phase, err))
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat[i] = time.Since(t0)
				if resp.StatusCode != want {
					fail(fmt.Errorf("%s: answer %d, want %d", phase, resp.StatusCode, want))
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		return nil, 0, firstErr
	}
	if int(done.Load()) != n {
		return nil, 0, errors.New(phase + ": not every request was answered")
	}
	return lat, n, nil
}

// gatewayCommand is the command line that reproduces the gateway section.
func (f *Config) gatewayCommand() string {
	args := []string{"notifier", "bench", "--gateway"}
	if f.NATSURL != "" {
		args = append(args, "--nats-url", queue.RedactURLs(f.NATSURL))
	}
	if f.RedisAddr != "" {
		args = append(args, "--redis-addr", f.RedisAddr)
	}
	return strings.Join(append(args, "--jobs", fmt.Sprint(f.Jobs), "--workers", fmt.Sprint(f.Workers)), " ")
}

// printGatewayBench prints the gateway section.
func printGatewayBench(w io.Writer, g *GatewayResult) {
	fmt.Fprintf(w, "\ngateway: POST /v1/notifications, %d single-job requests per path from %d concurrent clients\n  reproduce: %s\n\n",
		g.Requests, g.Concurrency, g.Command)
	fmt.Fprintf(w, "  %-20s %8s %9s %9s %15s %26s %13s\n", "path", "req/s", "p50", "p99", "CPU µs/request", "(gateway+NATS + redis)", "client µs/req")
	for _, r := range []struct {
		name string
		run  GatewayRun
	}{{"202 accepted", g.Accepted}, {"429 over the limit", g.Limited}, {"floor: server", g.Floor}, {"floor: net/http", g.NetHTTPFloor}} {
		fmt.Fprintf(w, "  %-20s %8.0f %7.2fms %7.2fms %15.1f %17.1f + %-6.1f %13.1f\n", r.name, r.run.RequestsPerSecond, r.run.P50Ms, r.run.P99Ms,
			r.run.CPUMicrosPerReq, r.run.ProcessCPUMicros, r.run.RedisCPUMicros, r.run.ClientCPUMicros)
	}
	verdict := "≥ 5×: held"
	if g.CPURatio < 5 {
		verdict = "< 5×: NOT held"
	}
	fmt.Fprintf(w, "\n  a 429 costs 1/%.1f of a 202 in CPU per request (%s)\n", g.CPURatio, verdict)
	fmt.Fprintf(w, "  a handler that only answers 429 costs 1/%.1f of a 202 on the gateway's server (fasthttp), 1/%.1f on net/http\n", g.FloorRatio, g.NetHTTPFloorRatio)
	fmt.Fprintln(w, "  202: the key, the bucket (one EVALSHA), decode and validation, the JetStream publish and its ack.")
	fmt.Fprintln(w, "  429: the key and the bucket as this instance last heard of it (Redis only when that does not refuse).")
	fmt.Fprintln(w, "  floor: the same requests to a handler that only writes a fixed 429, on the gateway's server and on net/http.")
	fmt.Fprintln(w, "  CPU per request is the serving side: this process (the gateway and the embedded NATS server, which")
	fmt.Fprintln(w, "  stores the 202s' jobs; getrusage) plus redis-server (INFO cpu). The HTTP clients run in a child")
	fmt.Fprintln(w, "  process, their CPU shown apart; p50/p99 are the clients' request latencies")
}
