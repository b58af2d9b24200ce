package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/internal/localenv"
	"github.com/notifier/notifier/internal/stats"
	"github.com/notifier/notifier/leaky"
)

// PacingResult is the pacing section: how closely a fleet of `notifier
// run` processes holds a provider's contract, as the sandbox saw it.
type PacingResult struct {
	Command            string  `json:"command"`
	Contract           int     `json:"contract"`
	Processes          int     `json:"processes"`
	WorkersPerProcess  int     `json:"workers_per_process"`
	Jobs               int     `json:"jobs"`
	Tenants            int     `json:"tenants,omitempty"` // the jobs' tenants (0: the default tenant's)
	Sent               int     `json:"sent"`
	Lost               int     `json:"lost"`
	SentTwice          int     `json:"sent_twice"`
	Seconds            float64 `json:"seconds_first_to_last"`
	SustainedPerSecond float64 `json:"sustained_per_second"`
	SustainedFraction  float64 `json:"sustained_fraction_of_contract"`
	MostInOneSecond    int     `json:"most_in_any_1s_window"`
	// JitterBudgetMs is how late after its slot a request may reach the
	// provider with no 1 s window over the contract (the default
	// jitter_budget); MostInBudgetWindow is the most requests, 429s
	// included, that reached the sandbox in any window of 1 s minus it:
	// more than the contract there means the schedule broke it.
	JitterBudgetMs     float64 `json:"jitter_budget_ms"`
	MostInBudgetWindow int     `json:"most_arrivals_in_1s_less_jitter_budget"`
	GapP1Ms            float64 `json:"gap_p1_ms"`
	GapP50Ms           float64 `json:"gap_p50_ms"`
	GapP99Ms           float64 `json:"gap_p99_ms"`
	Answered429        int     `json:"answered_429"`
	ContractHeld       bool    `json:"contract_held"`
}

// pacingLane is the sandbox path the paced provider sends to.
const pacingLane = "/paced"

// ErrContractBroken fails the bench (exit 1) when a pacing run put more
// requests than the contract into some window of 1 s minus the jitter
// budget: the fleet's schedule, not the machine's scheduling, broke it.
var ErrContractBroken = errors.New("contract broken")

// pacingPass publishes a backlog of n jobs, starts --processes `notifier
// run` processes (this binary, re-executed) on a generated configuration
// pointing at the bench's NATS, Redis and the sandbox, which enforces the
// contract, and measures the sends until all n are in.
func (w *benchWorld) pacingPass(ctx context.Context, exe string, n int) (*PacingResult, error) {
	if err := w.publishJobs(ctx, "pacing", n, ""); err != nil {
		return nil, err
	}
	url := w.sb.Lane(pacingLane, w.f.Contract, 0)
	dir, err := os.MkdirTemp("", "notifier-bench-pacing-*")
	if err != nil {
		return nil, fmt.Errorf("pacing configuration directory: %w", err)
	}
	defer os.RemoveAll(dir)
	cfgPath := filepath.Join(dir, "bench.yaml")
	if err := os.WriteFile(cfgPath, []byte(w.pacingConfig(url)), 0o600); err != nil {
		return nil, fmt.Errorf("write the pacing configuration: %w", err)
	}
	if _, err := config.Load(cfgPath, func(string) string { return "" }); err != nil {
		return nil, fmt.Errorf("the generated pacing configuration: %w", err)
	}

	w.prog.set(fmt.Sprintf("pacing: %d processes, contract %d/s", w.f.Processes, w.f.Contract), n, func() int {
		return w.sb.Accepted(pacingLane)
	})
	children, err := w.drain(ctx, exe, cfgPath, pacingLane, n)
	for _, c := range children {
		c.stop()
	}
	if err != nil {
		return nil, fmt.Errorf("pacing: %w", err)
	}

	st := w.sb.Stats(pacingLane)
	arrivals := w.sb.Arrivals(pacingLane)
	budget := leaky.JitterFor(leaky.DefaultHeadroom)
	r := &PacingResult{
		Contract: w.f.Contract, Processes: w.f.Processes, WorkersPerProcess: w.f.Workers, Jobs: n, Tenants: w.tenants,
		Sent: st.Accepted, Lost: max(0, n-st.Accepted), SentTwice: st.Duplicates,
		MostInOneSecond: st.MostInOneSecond, Answered429: st.Answered429,
		JitterBudgetMs: ms(budget), MostInBudgetWindow: w.sb.MostArrivals(pacingLane, time.Second-budget),
	}
	if len(arrivals) > 1 {
		span := arrivals[len(arrivals)-1].Sub(arrivals[0])
		r.Seconds = span.Seconds()
		r.SustainedPerSecond = float64(len(arrivals)-1) / span.Seconds()
		r.SustainedFraction = r.SustainedPerSecond / float64(w.f.Contract)
		gaps := make([]time.Duration, len(arrivals)-1)
		for i := range gaps {
			gaps[i] = arrivals[i+1].Sub(arrivals[i])
		}
		sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
		r.GapP1Ms, r.GapP50Ms, r.GapP99Ms = ms(stats.Percentile(gaps, 0.01)), ms(stats.Percentile(gaps, 0.50)), ms(stats.Percentile(gaps, 0.99))
	}
	// A 429 alone does not break the contract: the sandbox enforces it
	// exactly, so one request that a loaded machine delays past the
	// budget draws one; the report counts them.
	r.ContractHeld = r.MostInBudgetWindow <= w.f.Contract
	return r, nil
}

// pacingConfig is the `notifier run` configuration of the pacing run: the
// bench's servers, its key prefix, one webhook provider (the sandbox lane)
// on the contract.
func (w *benchWorld) pacingConfig(url string) string {
	return w.runConfig("its pacing run", "bench-paced", url, w.f.Contract, "1s")
}

// runConfig is a `notifier run` configuration of the bench's (for what
// the header comment names): its servers, key prefix and --workers, no
// per-user cap, no fleet bucket, and one webhook provider named provider
// to url on a contract of rate per second.
func (w *benchWorld) runConfig(what, provider, url string, rate int, maxQueueDelay string) string {
	addrs := make([]string, len(w.redis.addrs))
	for i, a := range w.redis.addrs {
		addrs[i] = fmt.Sprintf("%q", a)
	}
	return fmt.Sprintf(`# generated by notifier bench for %s
nats:
  url: %q
  replicas: %d
  ack_wait: 30s
redis:
  addrs: [%s]
  key_prefix: %q
workers: %d
metrics:
  listen: "off"
dedup_ttl: 1h
providers:
  - name: %s
    channel: sms
    default: true
    kind: webhook
    url: %q
    rate: %d
    max_queue_delay: %s
    timeout: 5s
`, what, w.nats.url, w.nats.replicas, strings.Join(addrs, ", "), w.prefix, w.f.Workers, provider, url, rate, maxQueueDelay)
}

// benchChild is one `notifier run` of the pacing run.
type benchChild struct {
	cmd  *exec.Cmd
	out  *localenv.Buffer
	done chan struct{}
	err  error
	once sync.Once
}

// startBenchChild starts `exe run --config cfg` with this environment less
// any NOTIFIER_* override (the generated file is the whole configuration).
func startBenchChild(exe, cfg string) (*benchChild, error) {
	c := &benchChild{out: &localenv.Buffer{}, done: make(chan struct{})}
	c.cmd = exec.Command(exe, "run", "--config", cfg, "--log-level", "warn", "--log-format", "text")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, config.EnvPrefix+"_") {
			c.cmd.Env = append(c.cmd.Env, kv)
		}
	}
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	localenv.BindToParent(c.cmd)
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { c.err = c.cmd.Wait(); close(c.done) }()
	return c, nil
}

func (c *benchChild) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop asks the process to stop (SIGTERM: it finishes or hands back what
// it holds) and kills it if it has not exited within 15 s.
func (c *benchChild) stop() {
	c.once.Do(func() {
		if c.exited() {
			return
		}
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(15 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
}

// tail is the end of the process's output.
func (c *benchChild) tail() string {
	s := c.out.String()
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}
