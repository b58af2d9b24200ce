package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/notifier/notifier/internal/bench"
)

// benchFlags are the flags of `notifier bench`: the bench's Config and how
// to print it.
type benchFlags struct {
	bench.Config
	json bool
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
  notifier bench --naive                        the fleet beside a naive dispatcher: --processes notifier run
                                                processes (default 2) of --workers workers (default 64), limits
                                                wide open, and a naive pull-POST-ack loop of processes × workers
                                                goroutines, each sending to the sandbox over loopback HTTP; the
                                                rate of each and their ratio (the median of --rounds rounds)
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
	fl.IntVar(&f.Jobs, "jobs", 20000, "jobs per pass (pacing: default 30 s of the contract)")
	fl.IntVar(&f.Users, "users", 1000, "users the jobs are spread over")
	fl.IntVar(&f.Workers, "workers", 32, "workers per dispatcher (and the floor's consumers and pull size)")
	fl.IntVar(&f.Rounds, "rounds", 3, "throughput: rounds of the three passes, one after another; each figure is the median round's")
	fl.StringVar(&f.NATSURL, "nats-url", "", "use this NATS server (comma-separated for a cluster) instead of an embedded one")
	fl.StringVar(&f.RedisAddr, "redis-addr", "", "use this Redis (host:port; comma-separated seeds of a Redis Cluster) instead of a private redis-server")
	fl.IntVar(&f.Contract, "contract", 0, "pacing run: the provider's contract in sends per second")
	fl.IntVar(&f.Processes, "processes", 3, "pacing run: notifier run processes (the naive run's: default 2)")
	fl.BoolVar(&f.Naive, "naive", false, "the fleet (--processes × --workers, limits wide open) beside a naive pull-POST-ack dispatcher")
	fl.BoolVar(&f.Cluster, "cluster", false, "run on a 3-node JetStream cluster (R3) and a 3-master Redis Cluster")
	fl.BoolVar(&f.json, "json", false, "print one JSON object with every figure instead of the report")
	fl.BoolVar(&f.Gateway, "gateway", false, "measure the HTTP gateway's 202 and 429 paths (--jobs requests each, --workers clients)")
	fl.BoolVar(&f.Shadow, "shadow", false, "throughput: add a pass with every layer on and shadow limits that deny")
	fl.IntSliceVar(&f.Tenants, "tenants", nil, "tenants run: an every-layer pass per number of tenants the jobs are spread over (e.g. 1,1000,10000,100000), each beside the first")
	fl.BoolVar(&f.TenantSubjects, "tenant-subjects", false, "tenants run: publish on each tenant's own subject (the raw NATS way, moved by the router) instead of straight to the fair lanes")
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
	case f.Users < 1:
		return fmt.Errorf("--users must be at least 1, got %d", f.Users)
	case f.Workers < 1 || f.Workers > 4096:
		return fmt.Errorf("--workers must be from 1 to 4096, got %d", f.Workers)
	case f.Contract < 0 || f.Contract > 100_000:
		return fmt.Errorf("--contract must be from 1 to 100000 sends per second, got %d", f.Contract)
	case f.Naive && (f.Contract > 0 || f.Gateway || f.Shadow || len(f.Tenants) > 0):
		return fmt.Errorf("--naive is a run of its own: it takes --jobs, --users, --workers, --processes, --rounds, --cluster, --nats-url, --redis-addr and --json")
	case f.Contract == 0 && !f.Naive && cmd.Flags().Changed("processes"):
		return fmt.Errorf("--processes is for the pacing and naive runs: give --contract or --naive too")
	case f.Processes < 1 || f.Processes > 64:
		return fmt.Errorf("--processes must be from 1 to 64, got %d", f.Processes)
	case f.Rounds < 1 || f.Rounds > 99:
		return fmt.Errorf("--rounds must be from 1 to 99, got %d", f.Rounds)
	case f.Contract > 0 && cmd.Flags().Changed("rounds"):
		return fmt.Errorf("--rounds is for the throughput passes, not the pacing run")
	case f.Gateway && (f.Contract > 0 || f.Cluster || f.Shadow || cmd.Flags().Changed("rounds") || cmd.Flags().Changed("users")):
		return fmt.Errorf("--gateway takes --jobs, --workers, --nats-url, --redis-addr and --json only")
	case f.Shadow && f.Contract > 0:
		return fmt.Errorf("--shadow is for the throughput passes, not the pacing run")
	case len(f.Tenants) > 0 && (f.Gateway || f.Shadow):
		return fmt.Errorf("--tenants is a run of its own (or, one number with --contract, the pacing run's jobs' tenants): it takes --jobs, --users, --workers, --rounds, --tenant-subjects, --cluster, --nats-url, --redis-addr and --json")
	case len(f.Tenants) > 1 && f.Contract > 0:
		return fmt.Errorf("--tenants with --contract takes one number: the tenants the pacing run's jobs are spread over")
	case f.TenantSubjects && len(f.Tenants) == 0:
		return fmt.Errorf("--tenant-subjects is for the tenants run: give --tenants too")
	}
	for _, n := range f.Tenants {
		if n < 1 || n > 10_000_000 {
			return fmt.Errorf("--tenants takes numbers of tenants from 1 to 10000000, got %d", n)
		}
	}
	if f.Naive {
		if !cmd.Flags().Changed("processes") {
			f.Processes = 2
		}
		if !cmd.Flags().Changed("workers") {
			f.Workers = 64
		}
	}
	if f.Contract > 0 && !cmd.Flags().Changed("jobs") {
		f.Jobs = max(300, 30*f.Contract)
	}
	if f.Jobs < 100 || f.Jobs > 10_000_000 {
		return fmt.Errorf("--jobs must be from 100 to 10000000, got %d", f.Jobs)
	}
	return nil
}

// runBench runs the bench and prints its report (or its JSON); a broken
// contract exits 1 after the report.
func runBench(ctx context.Context, f *benchFlags, e *env) error {
	cfg := f.Config
	cfg.Version, cfg.Progress, cfg.ProgressTTY = version, e.stderr, isTerminal(e.stderr)
	if cfg.Contract > 0 || cfg.Gateway || cfg.Naive {
		exe, err := notifierExecutable()
		if err != nil {
			return err
		}
		cfg.Executable = exe
	}
	res, err := bench.Run(ctx, cfg)
	if res == nil {
		return err
	}
	if f.json {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(res); jerr != nil {
			return jerr
		}
	} else {
		bench.Print(e.stdout, res)
	}
	return err
}

// notifierExecutable is this binary, which the pacing and naive runs
// start as `notifier run` (the gateway run as its clients); a test binary
// cannot be.
func notifierExecutable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find this binary to start notifier run: %w", err)
	}
	if strings.HasSuffix(exe, ".test") || strings.HasSuffix(exe, ".test.exe") {
		return "", fmt.Errorf("the pacing, gateway and naive runs start this binary (as `notifier run`, or the gateway's clients), and %s is a test binary: run a built notifier", filepath.Base(exe))
	}
	return exe, nil
}

// benchGatewayClientCmd is the load generator of `bench --gateway`, run
// as a child process (hidden: not for direct use).
func benchGatewayClientCmd() *cobra.Command {
	c := &cobra.Command{Use: "gateway-client", Hidden: true, Args: cobra.NoArgs}
	fl := c.Flags()
	url := fl.String("url", "", "")
	key := fl.String("key", "", "")
	run := fl.String("run", "bench", "")
	n := fl.Int("requests", 1000, "")
	conc := fl.Int("concurrency", 32, "")
	want := fl.Int("status", http.StatusAccepted, "")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		r, err := bench.GatewayClient(cmd.Context(), *url, *key, *run, *n, *conc, *want)
		if err != nil {
			return err
		}
		return json.NewEncoder(cmd.OutOrStdout()).Encode(r)
	}
	return c
}
