package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/notifier/notifier/internal/stats"
	"github.com/notifier/notifier/queue"
)

// TenantsResult is the tenants run: per number of tenants, the every-layer
// pass (the median round's) and its ratio to the first number's pass of
// the same round (the median of the rounds' ratios).
type TenantsResult struct {
	Command string       `json:"command"`
	Publish string       `json:"publish"` // how the jobs were published
	Passes  []TenantPass `json:"passes"`
	// Consumers is the most consumers the job stream held in the run, and
	// Bound the most the configuration allows (queue.Consumers).
	Consumers int `json:"consumers"`
	Bound     int `json:"consumers_bound"`
}

// TenantPass is one number of tenants' pass.
type TenantPass struct {
	Tenants int `json:"tenants"`
	PassResult
	RatioToFirst float64   `json:"ratio_to_first"`
	RoundRatios  []float64 `json:"round_ratios"`
}

// tenantsRun runs, round after round, an every-layer pass per number of
// tenants of f.Tenants, the jobs spread over them evenly.
func (w *benchWorld) tenantsRun(ctx context.Context) (*TenantsResult, error) {
	f := w.f
	res := &TenantsResult{Command: f.commandTenants(), Bound: queue.Consumers(queue.DefaultFairLanes),
		Publish: "through a Publisher (the gateway's and `notifier publish`'s way), straight to each tenant's fair lane"}
	if f.TenantSubjects {
		res.Publish = "on each tenant's own subject (notify.jobs.sms.t.<tenant>, the raw NATS way): the router moves them to the fair lanes"
	}
	byN := make([][]PassResult, len(f.Tenants))
	ratios := make([][]float64, len(f.Tenants))
	for round := range f.Rounds {
		w.prog.prefix = ""
		if f.Rounds > 1 {
			w.prog.prefix = fmt.Sprintf("round %d/%d: ", round+1, f.Rounds)
		}
		for i, n := range f.Tenants {
			w.tenants = n
			p, err := w.dispatchPass(ctx, fmt.Sprintf("t%d-r%d", n, round), fmt.Sprintf("%d tenants", n), passLayers, f.Jobs)
			if err != nil {
				return nil, err
			}
			byN[i] = append(byN[i], p)
			ratios[i] = append(ratios[i], p.JobsPerSecond/byN[0][round].JobsPerSecond)
			cons, err := w.consumers(ctx)
			if err != nil {
				return nil, err
			}
			res.Consumers = max(res.Consumers, cons)
		}
	}
	w.tenants = 0
	for i, n := range f.Tenants {
		res.Passes = append(res.Passes, TenantPass{Tenants: n, PassResult: medianPass(byN[i]), RatioToFirst: stats.Median(ratios[i]), RoundRatios: ratios[i]})
	}
	return res, nil
}

// consumers is how many consumers the job stream holds now.
func (w *benchWorld) consumers(ctx context.Context) (int, error) {
	s, err := w.js.Stream(ctx, w.qcfg.Stream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Consumers, nil
}

// commandTenants is the command line that reproduces the tenants run.
func (f *Config) commandTenants() string {
	ns := make([]string, len(f.Tenants))
	for i, n := range f.Tenants {
		ns[i] = strconv.Itoa(n)
	}
	args := []string{"notifier", "bench", "--tenants", strings.Join(ns, ",")}
	if f.TenantSubjects {
		args = append(args, "--tenant-subjects")
	}
	if f.Cluster {
		args = append(args, "--cluster")
	}
	args = append(args, "--jobs", strconv.Itoa(f.Jobs), "--users", strconv.Itoa(f.Users), "--rounds", strconv.Itoa(f.Rounds), "--workers", strconv.Itoa(f.Workers))
	return strings.Join(args, " ")
}

func printTenants(w io.Writer, r *Result, t *TenantsResult) {
	fmt.Fprintf(w, "  jobs   %d per pass for %d users, %d workers, each pass after a warm-up of %d jobs\n", r.Jobs, r.Users, r.Workers, r.Warmup)
	fmt.Fprintf(w, "  jobs published %s\n", t.Publish)
	if r.Rounds > 1 {
		fmt.Fprintf(w, "  rounds %d of the passes, one after another; each figure below is its pass's median round\n", r.Rounds)
	}
	fmt.Fprintf(w, "\ncost per job as the number of tenants grows (every layer on)\n  reproduce: %s\n\n", t.Command)
	fmt.Fprintf(w, "  %9s %9s %10s %17s %11s %12s %9s   %s\n", "tenants", "jobs/s", "vs first", "CPU s/1000 jobs", "allocs/job", "redis trips", "commands", "rounds' ratios")
	for _, p := range t.Passes {
		var rs []string
		for _, x := range p.RoundRatios {
			rs = append(rs, fmt.Sprintf("%.2f", x))
		}
		fmt.Fprintf(w, "  %9d %9.0f %10.2f %17.3f %11.0f %12.2f %9.2f   %s\n", p.Tenants, p.JobsPerSecond, p.RatioToFirst,
			p.CPUSecondsPer1000, p.AllocsPerJob, p.Redis.RoundTripsPerJob, p.Redis.CommandsPerJob, strings.Join(rs, " "))
	}
	fmt.Fprintf(w, "\n  consumers on the job stream: at most %d in the run (the configuration's bound: %d, whatever the tenants)\n", t.Consumers, t.Bound)
	fmt.Fprintln(w, "  vs first: the median of the rounds' ratios, each pass against the first number's pass of its round")
}
