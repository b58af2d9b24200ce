package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/internal/localenv"
	"github.com/notifier/notifier/internal/roundtrip"
	"github.com/notifier/notifier/internal/stats"
	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
)

// Config is what a bench run measures and on what. Jobs, Users, Workers
// and Rounds must be set (the CLI's defaults: 20,000, 1,000, 32, 3); the
// rest may be left zero.
type Config struct {
	Jobs    int // jobs per pass (pacing: the backlog; gateway: requests per path)
	Users   int // users the jobs are spread over
	Workers int // workers per dispatcher (and the floor's consumers and pull size; gateway: clients)
	Rounds  int // throughput: rounds of the passes, one after another
	// NATSURL and RedisAddr point the bench at servers instead of the
	// ones it starts (comma-separated: a cluster's URLs, a Redis Cluster's
	// seeds).
	NATSURL, RedisAddr string
	// Contract > 0 makes the run the pacing run: Processes `notifier run`
	// processes drain the backlog on a contract of Contract sends per
	// second that the sandbox enforces.
	Contract, Processes int
	Cluster             bool // a 3-node JetStream cluster (R3) and a 3-master Redis Cluster
	Gateway             bool // measure the HTTP gateway's 202 and 429 paths instead
	Shadow              bool // throughput: add a pass with shadow limits that deny
	// Naive makes the run the naive run: Processes `notifier run`
	// processes of Workers workers, the limits wide open, beside a naive
	// consume-POST-ack dispatcher of Processes × Workers goroutines, both
	// sending to the sandbox over loopback HTTP.
	Naive bool
	// Tenants, when set, makes the run the tenants run: a pass with every
	// layer on per number of tenants the jobs are spread over, each beside
	// the first (the cost per job as the tenant count grows).
	Tenants []int
	// TenantSubjects publishes the tenants run's jobs on each tenant's own
	// subject, as raw NATS publishers do (the router moves them), rather
	// than through a Publisher straight to their fair lanes.
	TenantSubjects bool
	// Executable is the notifier binary the pacing run starts as `notifier
	// run` and the gateway run as its load generator (`notifier bench
	// gateway-client`); required by those runs.
	Executable string
	// Version is the notifier's version, for the report.
	Version string
	// Progress, when set, gets a live progress line (redrawn in place when
	// ProgressTTY, else a line every 2 s).
	Progress    io.Writer
	ProgressTTY bool
}

// command is the command line that reproduces a section.
func (f *Config) command(pacing bool) string {
	args := []string{"notifier", "bench"}
	if f.Cluster {
		args = append(args, "--cluster")
	}
	if f.NATSURL != "" {
		args = append(args, "--nats-url", queue.RedactURLs(f.NATSURL))
	}
	if f.RedisAddr != "" {
		args = append(args, "--redis-addr", f.RedisAddr)
	}
	if f.Naive {
		args = append(args, "--naive", "--processes", strconv.Itoa(f.Processes))
	}
	if pacing {
		args = append(args, "--contract", strconv.Itoa(f.Contract), "--processes", strconv.Itoa(f.Processes))
		if len(f.Tenants) == 1 {
			args = append(args, "--tenants", strconv.Itoa(f.Tenants[0]))
			if f.TenantSubjects {
				args = append(args, "--tenant-subjects")
			}
		}
	}
	args = append(args, "--jobs", strconv.Itoa(f.Jobs))
	if !pacing {
		args = append(args, "--users", strconv.Itoa(f.Users), "--rounds", strconv.Itoa(f.Rounds))
		if f.Shadow {
			args = append(args, "--shadow")
		}
	}
	return strings.Join(append(args, "--workers", strconv.Itoa(f.Workers)), " ")
}

// Result is every figure of one run; --json prints it.
type Result struct {
	Version    string            `json:"version"`
	Go         string            `json:"go"`
	Platform   string            `json:"platform"`
	CPUs       int               `json:"cpus"`
	Mode       string            `json:"mode"` // throughput or pacing
	Cluster    bool              `json:"cluster"`
	NATS       string            `json:"nats"`
	Redis      string            `json:"redis"`
	Sink       string            `json:"sink"`
	Jobs       int               `json:"jobs"`
	Users      int               `json:"users"`
	Workers    int               `json:"workers"`
	Rounds     int               `json:"rounds,omitempty"`
	Warmup     int               `json:"warmup_jobs_per_pass,omitempty"`
	Throughput *ThroughputResult `json:"throughput,omitempty"`
	Latency    *LatencyResult    `json:"latency,omitempty"`
	Pacing     *PacingResult     `json:"pacing,omitempty"`
	Gateway    *GatewayResult    `json:"gateway,omitempty"`
	Tenants    *TenantsResult    `json:"tenants,omitempty"`
	Naive      *NaiveResult      `json:"naive,omitempty"`
}

// ThroughputResult is the throughput section: the floor and the two
// dispatcher passes, each the round with the median jobs/s of its pass,
// their ratios to the floor the medians of the rounds' ratios (each pass
// against the floor measured just before it), and every round's figures.
type ThroughputResult struct {
	Command   string     `json:"command"`
	Floor     PassResult `json:"floor"`
	WideOpen  PassResult `json:"wide_open"`
	AllLayers PassResult `json:"all_layers"`
	// AllLayersShadow is the --shadow pass: every layer on, with shadow
	// limits that deny.
	AllLayersShadow       *PassResult   `json:"all_layers_shadow,omitempty"`
	Rounds                []RoundResult `json:"rounds"`
	WideOpenLimits        string        `json:"wide_open_limits"`
	AllLayersLimits       string        `json:"all_layers_limits"`
	AllLayersShadowLimits string        `json:"all_layers_shadow_limits,omitempty"`
}

// passes are the throughput passes to print: the floor (when floor), the
// dispatcher's, and the --shadow pass when it ran.
func (t *ThroughputResult) passes(floor bool) []PassResult {
	ps := []PassResult{t.WideOpen, t.AllLayers}
	if floor {
		ps = append([]PassResult{t.Floor}, ps...)
	}
	if t.AllLayersShadow != nil {
		ps = append(ps, *t.AllLayersShadow)
	}
	return ps
}

// RoundResult is one round's throughput: the three passes, one after
// another, and the dispatcher passes' ratios to that round's floor.
type RoundResult struct {
	Floor          float64 `json:"floor_jobs_per_second"`
	WideOpen       float64 `json:"wide_open_jobs_per_second"`
	AllLayers      float64 `json:"all_layers_jobs_per_second"`
	WideOpenRatio  float64 `json:"wide_open_ratio"`
	AllLayersRatio float64 `json:"all_layers_ratio"`
	// The --shadow pass, when it ran.
	AllLayersShadow      float64 `json:"all_layers_shadow_jobs_per_second,omitempty"`
	AllLayersShadowRatio float64 `json:"all_layers_shadow_ratio,omitempty"`
}

// medianPass is the pass of the round with the median jobs/s (the lower
// middle one of an even count).
func medianPass(rounds []PassResult) PassResult {
	sorted := append([]PassResult(nil), rounds...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].JobsPerSecond < sorted[j].JobsPerSecond })
	return sorted[(len(sorted)-1)/2]
}

// LatencyResult is the per-layer latency section.
type LatencyResult struct {
	Command string        `json:"command"`
	Pass    string        `json:"pass"`
	Steps   []StepLatency `json:"steps"`
}

// benchWorld is what every pass runs on.
type benchWorld struct {
	f      *Config
	nats   *benchNATS
	redis  *benchRedis
	sb     *localenv.Sandbox
	sink   providers.Config // the sandbox as a provider with a contract far above reach
	qcfg   queue.Config
	nc     *nats.Conn
	js     jetstream.JetStream
	rdb    redis.UniversalClient // the dispatchers' client, round trips counted
	trips  *roundtrip.Counter
	prefix string // Redis key prefix of this run
	run    string // job id prefix of this run
	prog   *progress
	// tenants spreads a pass's jobs over this many tenants (0: the
	// default tenant's).
	tenants int
}

// Run runs the bench f describes: the throughput passes (the default),
// the pacing run (f.Contract > 0) or the gateway run (f.Gateway), on the
// servers it starts or is pointed at, and returns every figure. A pacing
// run that broke the contract returns its result and an error wrapping
// ErrContractBroken.
func Run(ctx context.Context, f Config) (*Result, error) {
	res := &Result{
		Version: f.Version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU(),
		Mode: "throughput", Cluster: f.Cluster, Jobs: f.Jobs, Users: f.Users, Workers: f.Workers,
	}
	if f.Contract > 0 {
		res.Mode = "pacing"
	}
	if (f.Contract > 0 || f.Gateway) && f.Executable == "" {
		return nil, errors.New("bench: the pacing and gateway runs start the notifier binary: Config.Executable is required")
	}
	if f.Naive && f.Executable == "" {
		return nil, errNaiveNeedsBinary
	}
	exe := f.Executable
	prog := newProgress(f.Progress, f.ProgressTTY)
	defer prog.close()
	prog.set("starting servers", 0, nil)

	natsSrv, err := startBenchNATS(f.NATSURL, f.Cluster)
	if err != nil {
		return nil, err
	}
	defer natsSrv.close()
	rds, err := startBenchRedis(ctx, f.RedisAddr, f.Cluster)
	if err != nil {
		return nil, err
	}
	defer rds.close()
	sb, err := localenv.StartSandbox(localenv.SandboxOptions{})
	if err != nil {
		return nil, err
	}
	defer sb.Close()
	res.NATS, res.Redis = natsSrv.desc, rds.desc

	id := strconv.FormatUint(rand.Uint64()&0xffffffff, 36)
	w := &benchWorld{
		f: &f, nats: natsSrv, redis: rds, sb: sb, trips: &roundtrip.Counter{}, prog: prog,
		prefix: "notifier-bench-" + id + ":", run: "bench-" + id,
		qcfg: queue.Config{URL: natsSrv.url, AckWait: 30 * time.Second, Replicas: natsSrv.replicas}.WithDefaults(),
	}
	nc, js, err := natsSrv.connect(ctx, "notifier bench")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	w.nc, w.js = nc, js
	if natsSrv.external {
		existed, err := checkEmpty(ctx, js, w.qcfg)
		if err != nil {
			return nil, err
		}
		if !existed {
			defer deleteStreams(context.WithoutCancel(ctx), js, w.qcfg)
		}
	}
	if err := queue.EnsureStreams(ctx, js, w.qcfg, natsSrv.replicas); err != nil {
		return nil, err
	}
	if w.rdb, err = rds.newClient(f.Workers, w.trips); err != nil {
		return nil, err
	}
	defer w.rdb.Close()
	defer rds.cleanup(context.WithoutCancel(ctx), w.prefix)

	if len(f.Tenants) > 0 && f.Contract == 0 {
		res.Mode = "tenants"
		res.Sink = "an in-process sink provider (accepts every job at once, no network): the figures are the dispatcher's own cost"
		res.Warmup = warmupJobs(f.Jobs)
		res.Rounds = f.Rounds
		w.sink = providers.Config{
			Name: sinkProvider, Channel: "sms", Default: true, Kind: "webhook", URL: sb.Lane("/sink", math.MaxInt32, 0),
			Rate: sinkRate, MaxQueueDelay: 100 * time.Millisecond, Timeout: 5 * time.Second,
		}.WithDefaults()
		t, err := w.tenantsRun(ctx)
		if err != nil {
			return nil, err
		}
		res.Tenants = t
	} else if f.Naive {
		res.Mode = "naive"
		res.Sink = "the sandbox provider in this process (webhook over loopback HTTP), accepting every request"
		res.Rounds = f.Rounds
		r, err := w.naiveRun(ctx, exe)
		if err != nil {
			return nil, err
		}
		res.Naive = r
	} else if f.Gateway {
		res.Mode = "gateway"
		res.Sink = "none: the gateway publishes to the job stream, no dispatcher runs"
		g, err := w.gatewayPass(ctx)
		if err != nil {
			return nil, err
		}
		res.Gateway = g
	} else if f.Contract > 0 {
		res.Sink = fmt.Sprintf("the sandbox provider in this process (webhook over loopback HTTP), enforcing a contract of %d per any 1 s window (429 beyond it)", f.Contract)
		if len(f.Tenants) == 1 {
			w.tenants = f.Tenants[0]
		}
		r, err := w.pacingPass(ctx, exe, f.Jobs)
		if err != nil {
			return nil, err
		}
		r.Command = f.command(true)
		res.Pacing = r
	} else {
		res.Sink = "an in-process sink provider (accepts every job at once, no network): the figures are the dispatcher's own cost"
		res.Warmup = warmupJobs(f.Jobs)
		w.sink = providers.Config{
			Name: sinkProvider, Channel: "sms", Default: true, Kind: "webhook", URL: sb.Lane("/sink", math.MaxInt32, 0),
			Rate: sinkRate, MaxQueueDelay: 100 * time.Millisecond, Timeout: 5 * time.Second,
		}.WithDefaults()
		t := &ThroughputResult{
			Command:        f.command(false),
			WideOpenLimits: fmt.Sprintf("no per-user cap, no fleet bucket, a contract of %.0f/s: the ledger and the provider queue only", sinkRate),
			AllLayersLimits: fmt.Sprintf("also a per-user cap (%s, %d per %s) and a fleet bucket (%.0f/s, burst %d, leases of %d tokens), configured never to deny",
				benchUserRule.Algorithm, benchUserRule.Limit, inspect.FormatDuration(benchUserRule.Window), benchGlobalConfig.Rate, benchGlobalConfig.Burst, globallimit.LeaseSize(benchGlobalConfig)),
		}
		// Rounds of the three passes one after another, so that a slow
		// spell of a shared machine falls on every pass alike; each figure
		// is then the median round's.
		var floors, wides, alls, shadows []PassResult
		var steps map[string][]time.Duration
		for i := range f.Rounds {
			prog.prefix = ""
			if f.Rounds > 1 {
				prog.prefix = fmt.Sprintf("round %d/%d: ", i+1, f.Rounds)
			}
			floor, err := w.floorPass(ctx, fmt.Sprintf("r%d", i), f.Jobs)
			if err != nil {
				return nil, err
			}
			wide, err := w.dispatchPass(ctx, fmt.Sprintf("open-r%d", i), "limits wide open", passOpen, f.Jobs)
			if err != nil {
				return nil, err
			}
			all, err := w.dispatchPass(ctx, fmt.Sprintf("layers-r%d", i), "every layer on", passLayers, f.Jobs)
			if err != nil {
				return nil, err
			}
			floors, wides, alls = append(floors, floor), append(wides, wide), append(alls, all)
			rd := RoundResult{
				Floor: floor.JobsPerSecond, WideOpen: wide.JobsPerSecond, AllLayers: all.JobsPerSecond,
				WideOpenRatio: wide.JobsPerSecond / floor.JobsPerSecond, AllLayersRatio: all.JobsPerSecond / floor.JobsPerSecond,
			}
			if f.Shadow {
				sh, err := w.dispatchPass(ctx, fmt.Sprintf("shadow-r%d", i), "every layer on, shadow", passShadow, f.Jobs)
				if err != nil {
					return nil, err
				}
				shadows = append(shadows, sh)
				rd.AllLayersShadow, rd.AllLayersShadowRatio = sh.JobsPerSecond, sh.JobsPerSecond/floor.JobsPerSecond
			}
			t.Rounds = append(t.Rounds, rd)
			steps = mergeSteps(steps, all.stepDurations)
		}
		t.Floor, t.WideOpen, t.AllLayers = medianPass(floors), medianPass(wides), medianPass(alls)
		var wideRatios, allRatios, shadowRatios []float64
		for _, rd := range t.Rounds {
			wideRatios, allRatios = append(wideRatios, rd.WideOpenRatio), append(allRatios, rd.AllLayersRatio)
			shadowRatios = append(shadowRatios, rd.AllLayersShadowRatio)
		}
		t.WideOpen.RatioToFloor, t.AllLayers.RatioToFloor = stats.Median(wideRatios), stats.Median(allRatios)
		if f.Shadow {
			sh := medianPass(shadows)
			sh.RatioToFloor = stats.Median(shadowRatios)
			t.AllLayersShadow = &sh
			t.AllLayersShadowLimits = benchShadowLimits(&f)
		}
		res.Rounds = f.Rounds
		res.Throughput = t
		res.Latency = &LatencyResult{Command: f.command(false), Pass: "every layer on", Steps: latencies(steps)}
	}
	prog.close()
	if p := res.Pacing; p != nil && !p.ContractHeld {
		return res, fmt.Errorf("%w: %d requests reached the provider in a window of 1 s − %.1fms (contract %d), 429 answers %d",
			ErrContractBroken, p.MostInBudgetWindow, p.JitterBudgetMs, p.Contract, p.Answered429)
	}
	return res, nil
}

// Print writes r as the report `notifier bench` prints.
func Print(w io.Writer, r *Result) {
	fmt.Fprintf(w, "notifier bench — notifier %s, %s %s, %d CPUs\n", r.Version, r.Go, r.Platform, r.CPUs)
	fmt.Fprintf(w, "  NATS   %s\n", r.NATS)
	fmt.Fprintf(w, "  Redis  %s\n", r.Redis)
	fmt.Fprintf(w, "  sink   %s\n", r.Sink)
	if nv := r.Naive; nv != nil {
		printNaive(w, r, nv)
	}
	if t := r.Throughput; t != nil {
		fmt.Fprintf(w, "  jobs   %d per pass for %d users, %d workers, each pass after a warm-up of %d jobs\n", r.Jobs, r.Users, r.Workers, r.Warmup)
		if r.Rounds > 1 {
			fmt.Fprintf(w, "  rounds %d of the three passes, one after another; each figure below is its pass's median round\n", r.Rounds)
		}

		fmt.Fprintf(w, "\nthroughput, beside the bare JetStream floor\n  reproduce: %s\n\n", t.Command)
		fmt.Fprintf(w, "  %-28s %9s %9s %17s %11s\n", "pass", "jobs/s", "vs floor", "CPU s/1000 jobs", "allocs/job")
		for _, p := range t.passes(true) {
			fmt.Fprintf(w, "  %-28s %9.0f %9.2f %17.3f %11.0f\n", p.Name, p.JobsPerSecond, p.RatioToFloor, p.CPUSecondsPer1000, p.AllocsPerJob)
		}
		fmt.Fprintf(w, "\n  floor       = the same messages through a pull consumer with the lanes' settings on a stream with the job\n")
		fmt.Fprintf(w, "                stream's: one loop pulls as many as there are free workers, %d goroutines double-ack them\n", r.Workers)
		fmt.Fprintf(w, "  wide open   = %s\n", t.WideOpenLimits)
		fmt.Fprintf(w, "  every layer = %s\n", t.AllLayersLimits)
		if t.AllLayersShadow != nil {
			fmt.Fprintf(w, "  shadow      = %s\n", t.AllLayersShadowLimits)
		}
		fmt.Fprintln(w, "  CPU and allocations are this whole process: the embedded NATS server and the sandbox run in it too")
		fmt.Fprintln(w, "  (the floor's row is their share without the dispatcher)")
		if len(t.Rounds) > 1 {
			fmt.Fprintln(w, "  jobs/s is the median round's; vs floor is the median of the rounds' ratios, each dispatcher pass")
			fmt.Fprintln(w, "  against the floor measured just before it:")
			fmt.Fprintf(w, "\n  %-6s %13s %24s %24s\n", "round", "floor jobs/s", "wide open jobs/s (ratio)", "every layer jobs/s (ratio)")
			for i, rd := range t.Rounds {
				fmt.Fprintf(w, "  %-6d %13.0f %16.0f (%5.2f) %18.0f (%5.2f)", i+1, rd.Floor, rd.WideOpen, rd.WideOpenRatio, rd.AllLayers, rd.AllLayersRatio)
				if t.AllLayersShadow != nil {
					fmt.Fprintf(w, "   shadow %.0f (%5.2f)", rd.AllLayersShadow, rd.AllLayersShadowRatio)
				}
				fmt.Fprintln(w)
			}
		}

		fmt.Fprintf(w, "\nRedis cost per sent job\n  reproduce: %s\n\n", t.Command)
		fmt.Fprintf(w, "  %-28s %12s %9s %22s   %s\n", "pass", "round trips", "commands", "redis CPU s/1000 jobs", "top commands per job")
		for _, p := range t.passes(false) {
			var top []string
			for i, c := range p.Redis.TopCommands {
				if i == 5 {
					break
				}
				top = append(top, fmt.Sprintf("%s %.2f", c.Command, c.PerJob))
			}
			fmt.Fprintf(w, "  %-28s %12.2f %9.2f %22.3f   %s\n", p.Name, p.Redis.RoundTripsPerJob, p.Redis.CommandsPerJob, p.Redis.CPUSecondsPer1000, strings.Join(top, ", "))
		}
		fmt.Fprintln(w, "\n  round trips: a hook on the dispatcher's Redis client counts each command and each pipeline once, the")
		fmt.Fprintln(w, "  background calls (queue-depth gauges, pause subscription) included; commands: INFO commandstats before")
		fmt.Fprintln(w, "  and after, the commands scripts run included")
		if r.Cluster || strings.Contains(r.Redis, "Cluster") {
			fmt.Fprintln(w, "  on a Redis Cluster a pipeline counts once per node it reaches (go-redis sends the nodes' parts at once)")
		}
		for _, p := range t.passes(false) {
			if len(p.Deferrals) > 0 {
				fmt.Fprintf(w, "  waits in %q: %s\n", p.Name, formatCounts(p.Deferrals))
			}
		}
	}
	if l := r.Latency; l != nil {
		fmt.Fprintf(w, "\nlatency each layer adds, per job (pass %q)\n  reproduce: %s\n\n", l.Pass, l.Command)
		width := len("step")
		for _, s := range l.Steps {
			width = max(width, len(s.What))
		}
		fmt.Fprintf(w, "  %-*s %9s %9s\n", width, "step", "p50", "p99")
		for _, s := range l.Steps {
			fmt.Fprintf(w, "  %-*s %7.2fms %7.2fms\n", width, s.What, s.P50Ms, s.P99Ms)
		}
	}
	if g := r.Gateway; g != nil {
		printGatewayBench(w, g)
	}
	if t := r.Tenants; t != nil {
		printTenants(w, r, t)
	}
	if p := r.Pacing; p != nil {
		of := ""
		if p.Tenants > 0 {
			of = fmt.Sprintf(" of %d tenants", p.Tenants)
		}
		fmt.Fprintf(w, "\npacing: %d jobs%s through %d notifier run processes (%d workers each) on a %d/s contract\n  reproduce: %s\n\n",
			p.Jobs, of, p.Processes, p.WorkersPerProcess, p.Contract, p.Command)
		fmt.Fprintf(w, "  sent                %d of %d (%d lost, %d sent twice)\n", p.Sent, p.Jobs, p.Lost, p.SentTwice)
		fmt.Fprintf(w, "  achieved rate       %.1f/s sustained, first to last send over %.1fs (%.1f %% of the contract)\n", p.SustainedPerSecond, p.Seconds, 100*p.SustainedFraction)
		fmt.Fprintf(w, "  most in any 1 s     %d (contract %d)\n", p.MostInOneSecond, p.Contract)
		fmt.Fprintf(w, "  gap between sends   p1 %.2fms · p50 %.2fms · p99 %.2fms (the queue paces one send every %.2fms)\n",
			p.GapP1Ms, p.GapP50Ms, p.GapP99Ms, 1000/((1-leaky.DefaultHeadroom)*float64(p.Contract)))
		fmt.Fprintf(w, "  most requests in    %d in any 1 s − %.1fms window, 429s included (the jitter budget)\n", p.MostInBudgetWindow, p.JitterBudgetMs)
		fmt.Fprintf(w, "  429 answers         %d", p.Answered429)
		if p.Answered429 > 0 {
			fmt.Fprint(w, " (requests that reached the sandbox later than the jitter budget allows: a loaded machine)")
		}
		fmt.Fprintln(w)
		held := "held: no window of 1 s − the jitter budget over it"
		if !p.ContractHeld {
			held = "BROKEN"
		}
		fmt.Fprintf(w, "  contract            %s\n", held)
	}
}

// formatCounts prints a map of counts in key order.
func formatCounts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// progress is the live line on stderr: the phase, jobs done of the total,
// the rate and the time in the phase. On a terminal the line is redrawn
// four times a second; otherwise a line is printed every 2 s.
type progress struct {
	w   io.Writer
	tty bool

	mu       sync.Mutex
	phase    string
	prefix   string // put before every phase (the round); set between phases
	total    int
	done     func() int
	start    time.Time
	lastLine time.Time
	closed   bool

	stop chan struct{}
	wg   sync.WaitGroup
}

func newProgress(w io.Writer, tty bool) *progress {
	if w == nil {
		w = io.Discard
	}
	p := &progress{w: w, tty: tty, stop: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.print(false)
			}
		}
	}()
	return p
}

// set starts a phase: done reports how many of total are done (nil: no
// count).
func (p *progress) set(phase string, total int, done func() int) {
	p.mu.Lock()
	p.phase, p.total, p.done, p.start = p.prefix+phase, total, done, time.Now()
	p.mu.Unlock()
	p.print(true)
}

func (p *progress) print(force bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.phase == "" || (!p.tty && !force && time.Since(p.lastLine) < 2*time.Second) {
		return
	}
	elapsed := time.Since(p.start)
	line := fmt.Sprintf("bench  %-44s %5.1fs", p.phase, elapsed.Seconds())
	if p.done != nil {
		n := p.done()
		line += fmt.Sprintf("  %d/%d jobs", n, p.total)
		if elapsed > 0 {
			line += fmt.Sprintf("  %.0f/s", float64(n)/elapsed.Seconds())
		}
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
	p.lastLine = time.Now()
}

// close ends the live line; it may be called more than once.
func (p *progress) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	close(p.stop)
	p.wg.Wait()
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
