package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/notifier/notifier/dispatch"
	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
)

// benchFlags are the flags of `notifier bench`.
type benchFlags struct {
	jobs, users, workers int
	rounds               int
	natsURL, redisAddr   string
	contract, processes  int
	cluster, json        bool
	gateway              bool
	shadow               bool
}

func benchCmd(e *env) *cobra.Command {
	f := &benchFlags{}
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure throughput, Redis cost, per-layer latency and pacing on this machine",
		Long: `Bench measures the notifier on this machine, each figure beside its reference in the same run.

  notifier bench                                throughput with the limits wide open, beside a bare JetStream
                                                pull-consume-and-ack loop over the same messages (the floor);
                                                Redis round trips and commands, CPU seconds and allocations per
                                                job; the latency each layer adds (p50/p99). --rounds rounds of
                                                the passes (default 3): each figure is its pass's median round,
                                                each ratio the median of the rounds' ratios
  notifier bench --shadow                       also a fourth pass each round: every layer on, with the per-user cap
                                                in shadow mode denying about half of each user's jobs and a fleet
                                                shadow_rate far under the rate reached (shadow limits cost nothing
                                                when the two every-layer ratios match)
  notifier bench --contract 100 --processes 3   pacing: 3 notifier run processes drain a backlog on a 100/s
                                                contract; achieved rate, most sends in any 1 s window, the gaps
                                                between sends, and the provider's 429s (there must be none)
  notifier bench --gateway                      the HTTP gateway: requests/s and p50/p99 latency of a 202 (the job
                                                published and acknowledged), requests/s of the 429 path, and each
                                                path's CPU per request (this process and redis-server) with the ratio
  notifier bench --cluster                      the same on a 3-node embedded JetStream cluster (streams at 3
                                                replicas) and a 3-master Redis Cluster it starts itself (with
                                                --contract, the pacing run on them)

It starts what it needs: an embedded NATS server (or --nats-url, a server for benchmarking: the bench
consumes notify.jobs.*), a private redis-server child process on a free port when redis-server is on
PATH (or --redis-addr), and the demo's sandbox provider in this process, over loopback HTTP. Every
section prints the command line that reproduces it. Progress goes to stderr; --json prints one JSON
object with every figure instead of the report. It exits 1 when a pacing run broke the contract.`,
		Args: cobra.NoArgs,
	}
	fl := c.Flags()
	fl.IntVar(&f.jobs, "jobs", 20000, "jobs per pass (pacing: default 30 s of the contract)")
	fl.IntVar(&f.users, "users", 1000, "users the jobs are spread over")
	fl.IntVar(&f.workers, "workers", 32, "workers per dispatcher (and the floor's consumers and pull size)")
	fl.IntVar(&f.rounds, "rounds", 3, "throughput: rounds of the three passes, one after another; each figure is the median round's")
	fl.StringVar(&f.natsURL, "nats-url", "", "use this NATS server (comma-separated for a cluster) instead of an embedded one")
	fl.StringVar(&f.redisAddr, "redis-addr", "", "use this Redis (host:port; comma-separated seeds of a Redis Cluster) instead of a private redis-server")
	fl.IntVar(&f.contract, "contract", 0, "pacing run: the provider's contract in sends per second")
	fl.IntVar(&f.processes, "processes", 3, "pacing run: notifier run processes")
	fl.BoolVar(&f.cluster, "cluster", false, "run on a 3-node JetStream cluster (R3) and a 3-master Redis Cluster")
	fl.BoolVar(&f.json, "json", false, "print one JSON object with every figure instead of the report")
	fl.BoolVar(&f.gateway, "gateway", false, "measure the HTTP gateway's 202 and 429 paths (--jobs requests each, --workers clients)")
	fl.BoolVar(&f.shadow, "shadow", false, "throughput: add a pass with every layer on and shadow limits that deny")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := f.check(cmd); err != nil {
			return &usageError{err: err}
		}
		return runBench(cmd.Context(), f, e)
	}
	c.AddCommand(benchGatewayClientCmd())
	return c
}

// check validates the flags and fills the pacing run's default job count.
func (f *benchFlags) check(cmd *cobra.Command) error {
	switch {
	case f.users < 1:
		return fmt.Errorf("--users must be at least 1, got %d", f.users)
	case f.workers < 1 || f.workers > 4096:
		return fmt.Errorf("--workers must be from 1 to 4096, got %d", f.workers)
	case f.contract < 0 || f.contract > 100_000:
		return fmt.Errorf("--contract must be from 1 to 100000 sends per second, got %d", f.contract)
	case f.contract == 0 && cmd.Flags().Changed("processes"):
		return fmt.Errorf("--processes is for the pacing run: give --contract too")
	case f.processes < 1 || f.processes > 64:
		return fmt.Errorf("--processes must be from 1 to 64, got %d", f.processes)
	case f.rounds < 1 || f.rounds > 99:
		return fmt.Errorf("--rounds must be from 1 to 99, got %d", f.rounds)
	case f.contract > 0 && cmd.Flags().Changed("rounds"):
		return fmt.Errorf("--rounds is for the throughput passes, not the pacing run")
	case f.gateway && (f.contract > 0 || f.cluster || f.shadow || cmd.Flags().Changed("rounds") || cmd.Flags().Changed("users")):
		return fmt.Errorf("--gateway takes --jobs, --workers, --nats-url, --redis-addr and --json only")
	case f.shadow && f.contract > 0:
		return fmt.Errorf("--shadow is for the throughput passes, not the pacing run")
	}
	if f.contract > 0 && !cmd.Flags().Changed("jobs") {
		f.jobs = max(300, 30*f.contract)
	}
	if f.jobs < 100 || f.jobs > 10_000_000 {
		return fmt.Errorf("--jobs must be from 100 to 10000000, got %d", f.jobs)
	}
	return nil
}

// command is the command line that reproduces a section.
func (f *benchFlags) command(pacing bool) string {
	args := []string{"notifier", "bench"}
	if f.cluster {
		args = append(args, "--cluster")
	}
	if f.natsURL != "" {
		args = append(args, "--nats-url", queue.RedactURLs(f.natsURL))
	}
	if f.redisAddr != "" {
		args = append(args, "--redis-addr", f.redisAddr)
	}
	if pacing {
		args = append(args, "--contract", strconv.Itoa(f.contract), "--processes", strconv.Itoa(f.processes))
	}
	args = append(args, "--jobs", strconv.Itoa(f.jobs))
	if !pacing {
		args = append(args, "--users", strconv.Itoa(f.users), "--rounds", strconv.Itoa(f.rounds))
		if f.shadow {
			args = append(args, "--shadow")
		}
	}
	return strings.Join(append(args, "--workers", strconv.Itoa(f.workers)), " ")
}

// benchResult is every figure of one run; --json prints it.
type benchResult struct {
	Version    string              `json:"version"`
	Go         string              `json:"go"`
	Platform   string              `json:"platform"`
	CPUs       int                 `json:"cpus"`
	Mode       string              `json:"mode"` // throughput or pacing
	Cluster    bool                `json:"cluster"`
	NATS       string              `json:"nats"`
	Redis      string              `json:"redis"`
	Sink       string              `json:"sink"`
	Jobs       int                 `json:"jobs"`
	Users      int                 `json:"users"`
	Workers    int                 `json:"workers"`
	Rounds     int                 `json:"rounds,omitempty"`
	Warmup     int                 `json:"warmup_jobs_per_pass,omitempty"`
	Throughput *throughputResult   `json:"throughput,omitempty"`
	Latency    *latencyResult      `json:"latency,omitempty"`
	Pacing     *pacingResult       `json:"pacing,omitempty"`
	Gateway    *gatewayBenchResult `json:"gateway,omitempty"`
}

// throughputResult is the throughput section: the floor and the two
// dispatcher passes, each the round with the median jobs/s of its pass,
// their ratios to the floor the medians of the rounds' ratios (each pass
// against the floor measured just before it), and every round's figures.
type throughputResult struct {
	Command   string     `json:"command"`
	Floor     passResult `json:"floor"`
	WideOpen  passResult `json:"wide_open"`
	AllLayers passResult `json:"all_layers"`
	// AllLayersShadow is the --shadow pass: every layer on, with shadow
	// limits that deny.
	AllLayersShadow       *passResult   `json:"all_layers_shadow,omitempty"`
	Rounds                []roundResult `json:"rounds"`
	WideOpenLimits        string        `json:"wide_open_limits"`
	AllLayersLimits       string        `json:"all_layers_limits"`
	AllLayersShadowLimits string        `json:"all_layers_shadow_limits,omitempty"`
}

// passes are the throughput passes to print: the floor (when floor), the
// dispatcher's, and the --shadow pass when it ran.
func (t *throughputResult) passes(floor bool) []passResult {
	ps := []passResult{t.WideOpen, t.AllLayers}
	if floor {
		ps = append([]passResult{t.Floor}, ps...)
	}
	if t.AllLayersShadow != nil {
		ps = append(ps, *t.AllLayersShadow)
	}
	return ps
}

// roundResult is one round's throughput: the three passes, one after
// another, and the dispatcher passes' ratios to that round's floor.
type roundResult struct {
	Floor          float64 `json:"floor_jobs_per_second"`
	WideOpen       float64 `json:"wide_open_jobs_per_second"`
	AllLayers      float64 `json:"all_layers_jobs_per_second"`
	WideOpenRatio  float64 `json:"wide_open_ratio"`
	AllLayersRatio float64 `json:"all_layers_ratio"`
	// The --shadow pass, when it ran.
	AllLayersShadow      float64 `json:"all_layers_shadow_jobs_per_second,omitempty"`
	AllLayersShadowRatio float64 `json:"all_layers_shadow_ratio,omitempty"`
}

// median is the median of xs (the mean of the middle two of an even
// count); xs is not changed.
func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// medianPass is the pass of the round with the median jobs/s (the lower
// middle one of an even count).
func medianPass(rounds []passResult) passResult {
	sorted := append([]passResult(nil), rounds...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].JobsPerSecond < sorted[j].JobsPerSecond })
	return sorted[(len(sorted)-1)/2]
}

// latencyResult is the per-layer latency section.
type latencyResult struct {
	Command string        `json:"command"`
	Pass    string        `json:"pass"`
	Steps   []stepLatency `json:"steps"`
}

// benchWorld is what every pass runs on.
type benchWorld struct {
	f      *benchFlags
	nats   *benchNATS
	redis  *benchRedis
	sb     *sandbox
	sink   providers.Config // the sandbox as a provider with a contract far above reach
	qcfg   queue.Config
	nc     *nats.Conn
	js     jetstream.JetStream
	rdb    redis.UniversalClient // the dispatchers' client, round trips counted
	trips  *dispatch.RoundTripCounter
	prefix string // Redis key prefix of this run
	run    string // job id prefix of this run
	prog   *progress
}

func runBench(ctx context.Context, f *benchFlags, e *env) error {
	res := &benchResult{
		Version: version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU(),
		Mode: "throughput", Cluster: f.cluster, Jobs: f.jobs, Users: f.users, Workers: f.workers,
	}
	var exe string
	if f.contract > 0 {
		res.Mode = "pacing"
		var err error
		if exe, err = notifierExecutable(); err != nil {
			return err
		}
	}
	prog := newProgress(e.stderr)
	defer prog.close()
	prog.set("starting servers", 0, nil)

	natsSrv, err := startBenchNATS(f.natsURL, f.cluster)
	if err != nil {
		return err
	}
	defer natsSrv.close()
	rds, err := startBenchRedis(ctx, f.redisAddr, f.cluster)
	if err != nil {
		return err
	}
	defer rds.close()
	sb, err := newSandbox()
	if err != nil {
		return err
	}
	defer sb.Close()
	res.NATS, res.Redis = natsSrv.desc, rds.desc

	id := strconv.FormatUint(rand.Uint64()&0xffffffff, 36)
	w := &benchWorld{
		f: f, nats: natsSrv, redis: rds, sb: sb, trips: &dispatch.RoundTripCounter{}, prog: prog,
		prefix: "notifier-bench-" + id + ":", run: "bench-" + id,
		qcfg: queue.Config{URL: natsSrv.url, AckWait: 30 * time.Second, Replicas: natsSrv.replicas}.WithDefaults(),
	}
	nc, js, err := natsSrv.connect(ctx, "notifier bench")
	if err != nil {
		return err
	}
	defer nc.Close()
	w.nc, w.js = nc, js
	if natsSrv.external {
		existed, err := checkEmpty(ctx, js, w.qcfg)
		if err != nil {
			return err
		}
		if !existed {
			defer deleteStreams(context.WithoutCancel(ctx), js, w.qcfg)
		}
	}
	if err := queue.EnsureStreams(ctx, js, w.qcfg, natsSrv.replicas); err != nil {
		return err
	}
	if w.rdb, err = rds.newClient(f.workers, w.trips); err != nil {
		return err
	}
	defer w.rdb.Close()
	defer rds.cleanup(context.WithoutCancel(ctx), w.prefix)

	if f.gateway {
		res.Mode = "gateway"
		res.Sink = "none: the gateway publishes to the job stream, no dispatcher runs"
		g, err := w.gatewayPass(ctx)
		if err != nil {
			return err
		}
		res.Gateway = g
	} else if f.contract > 0 {
		res.Sink = fmt.Sprintf("the sandbox provider in this process (webhook over loopback HTTP), enforcing a contract of %d per any 1 s window (429 beyond it)", f.contract)
		r, err := w.pacingPass(ctx, exe, f.jobs)
		if err != nil {
			return err
		}
		r.Command = f.command(true)
		res.Pacing = r
	} else {
		res.Sink = "an in-process sink provider (accepts every job at once, no network): the figures are the dispatcher's own cost"
		res.Warmup = warmupJobs(f.jobs)
		w.sink = providers.Config{
			Name: sinkProvider, Channel: "sms", Default: true, Kind: "webhook", URL: sb.lane("/sink", math.MaxInt32, 0),
			Rate: sinkRate, MaxQueueDelay: 100 * time.Millisecond, Timeout: 5 * time.Second,
		}.WithDefaults()
		t := &throughputResult{
			Command:        f.command(false),
			WideOpenLimits: fmt.Sprintf("no per-user cap, no fleet bucket, a contract of %.0f/s: the ledger and the provider queue only", sinkRate),
			AllLayersLimits: fmt.Sprintf("also a per-user cap (%s, %d per %s) and a fleet bucket (%.0f/s, burst %d, leases of %d tokens), configured never to deny",
				benchUserRule.Algorithm, benchUserRule.Limit, fmtDur(benchUserRule.Window), benchGlobalConfig.Rate, benchGlobalConfig.Burst, globallimit.LeaseSize(benchGlobalConfig)),
		}
		// Rounds of the three passes one after another, so that a slow
		// spell of a shared machine falls on every pass alike; each figure
		// is then the median round's.
		var floors, wides, alls, shadows []passResult
		var steps map[string][]time.Duration
		for i := range f.rounds {
			prog.prefix = ""
			if f.rounds > 1 {
				prog.prefix = fmt.Sprintf("round %d/%d: ", i+1, f.rounds)
			}
			floor, err := w.floorPass(ctx, fmt.Sprintf("r%d", i), f.jobs)
			if err != nil {
				return err
			}
			wide, err := w.dispatchPass(ctx, fmt.Sprintf("open-r%d", i), "limits wide open", passOpen, f.jobs)
			if err != nil {
				return err
			}
			all, err := w.dispatchPass(ctx, fmt.Sprintf("layers-r%d", i), "every layer on", passLayers, f.jobs)
			if err != nil {
				return err
			}
			floors, wides, alls = append(floors, floor), append(wides, wide), append(alls, all)
			rd := roundResult{
				Floor: floor.JobsPerSecond, WideOpen: wide.JobsPerSecond, AllLayers: all.JobsPerSecond,
				WideOpenRatio: wide.JobsPerSecond / floor.JobsPerSecond, AllLayersRatio: all.JobsPerSecond / floor.JobsPerSecond,
			}
			if f.shadow {
				sh, err := w.dispatchPass(ctx, fmt.Sprintf("shadow-r%d", i), "every layer on, shadow", passShadow, f.jobs)
				if err != nil {
					return err
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
		t.WideOpen.RatioToFloor, t.AllLayers.RatioToFloor = median(wideRatios), median(allRatios)
		if f.shadow {
			sh := medianPass(shadows)
			sh.RatioToFloor = median(shadowRatios)
			t.AllLayersShadow = &sh
			t.AllLayersShadowLimits = benchShadowLimits(f)
		}
		res.Rounds = f.rounds
		res.Throughput = t
		res.Latency = &latencyResult{Command: f.command(false), Pass: "every layer on", Steps: latencies(steps)}
	}
	prog.close()

	if f.json {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		printBench(e.stdout, res)
	}
	if p := res.Pacing; p != nil && !p.ContractHeld {
		return fmt.Errorf("%w: %d requests reached the provider in a window of 1 s − %.1fms (contract %d), 429 answers %d",
			errContractBroken, p.MostInBudgetWindow, p.JitterBudgetMs, p.Contract, p.Answered429)
	}
	return nil
}

// printBench prints the report.
func printBench(w io.Writer, r *benchResult) {
	fmt.Fprintf(w, "notifier bench — notifier %s, %s %s, %d CPUs\n", r.Version, r.Go, r.Platform, r.CPUs)
	fmt.Fprintf(w, "  NATS   %s\n", r.NATS)
	fmt.Fprintf(w, "  Redis  %s\n", r.Redis)
	fmt.Fprintf(w, "  sink   %s\n", r.Sink)
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
	if p := r.Pacing; p != nil {
		fmt.Fprintf(w, "\npacing: %d jobs through %d notifier run processes (%d workers each) on a %d/s contract\n  reproduce: %s\n\n",
			p.Jobs, p.Processes, p.WorkersPerProcess, p.Contract, p.Command)
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
	for _, k := range sortedKeys(m) {
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

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, tty: isTerminal(w), stop: make(chan struct{})}
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
