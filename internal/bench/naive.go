package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/internal/stats"
	"github.com/notifier/notifier/queue"
)

// NaiveResult is the naive section: a fleet of `notifier run` processes
// with its limits wide open beside a naive dispatcher on the same NATS,
// Redis and HTTP sink, each round's two passes one after the other. The
// naive dispatcher pulls from JetStream, POSTs each job to the sink and
// acknowledges it: no ledger, no caps, no contract. Each pass's rate is
// taken from the sink's arrivals (first to last), so that neither the
// processes' start nor the publishing counts.
type NaiveResult struct {
	Command           string `json:"command"`
	Processes         int    `json:"processes"`
	WorkersPerProcess int    `json:"workers_per_process"`
	NaiveGoroutines   int    `json:"naive_goroutines"`
	Jobs              int    `json:"jobs"`
	// NaivePerSecond and FleetPerSecond are the median rounds'; Ratio is
	// the median of the rounds' fleet/naive ratios.
	NaivePerSecond float64      `json:"naive_jobs_per_second"`
	FleetPerSecond float64      `json:"fleet_jobs_per_second"`
	Ratio          float64      `json:"fleet_to_naive"`
	FleetLost      int          `json:"fleet_lost"`       // jobs the sink never accepted, over every round
	FleetSentTwice int          `json:"fleet_sent_twice"` // requests the sink saw again for a job it had, over every round
	Rounds         []NaiveRound `json:"rounds"`
}

// NaiveRound is one round of the naive run.
type NaiveRound struct {
	NaivePerSecond float64 `json:"naive_jobs_per_second"`
	FleetPerSecond float64 `json:"fleet_jobs_per_second"`
	Ratio          float64 `json:"fleet_to_naive"`
}

const (
	// naiveStream is the naive dispatcher's stream: the job stream's
	// settings under a subject of its own, deleted after each pass.
	naiveStream  = "NOTIFY_BENCH_NAIVE"
	naiveSubject = "bench.naive.sms"
)

// naiveRun runs --rounds rounds of the naive pass and the fleet pass.
func (w *benchWorld) naiveRun(ctx context.Context, exe string) (*NaiveResult, error) {
	n := w.f.Jobs
	r := &NaiveResult{
		Command: w.f.command(false), Processes: w.f.Processes, WorkersPerProcess: w.f.Workers,
		NaiveGoroutines: w.f.Processes * w.f.Workers, Jobs: n,
	}
	var naives, fleets, ratios []float64
	for i := range w.f.Rounds {
		w.prog.prefix = ""
		if w.f.Rounds > 1 {
			w.prog.prefix = fmt.Sprintf("round %d/%d: ", i+1, w.f.Rounds)
		}
		naive, err := w.naivePass(ctx, fmt.Sprintf("naive-r%d", i), n, r.NaiveGoroutines)
		if err != nil {
			return nil, err
		}
		fleet, lost, twice, err := w.fleetPass(ctx, exe, fmt.Sprintf("fleet-r%d", i), n)
		if err != nil {
			return nil, err
		}
		r.FleetLost += lost
		r.FleetSentTwice += twice
		rd := NaiveRound{NaivePerSecond: naive, FleetPerSecond: fleet, Ratio: fleet / naive}
		r.Rounds = append(r.Rounds, rd)
		naives, fleets, ratios = append(naives, naive), append(fleets, fleet), append(ratios, rd.Ratio)
	}
	r.NaivePerSecond, r.FleetPerSecond, r.Ratio = stats.Median(naives), stats.Median(fleets), stats.Median(ratios)
	return r, nil
}

// arrivalRate is a sink lane's jobs per second from its first arrival to
// its last.
func (w *benchWorld) arrivalRate(lane string) float64 {
	a := w.sb.Arrivals(lane)
	if len(a) < 2 {
		return 0
	}
	span := a[len(a)-1].Sub(a[0])
	if span <= 0 {
		return 0
	}
	return float64(len(a)-1) / span.Seconds()
}

// naivePass publishes n jobs to a stream of their own and moves them with
// the naive dispatcher: one consumer's messages (nats.go's Consume, its
// default pull settings) handed to goroutines that each POST a job's JSON
// to the sink (a shared HTTP client keeping a connection per goroutine)
// and acknowledge it once the sink answered 2xx. It returns the sink's
// arrival rate.
func (w *benchWorld) naivePass(ctx context.Context, tag string, n, goroutines int) (float64, error) {
	drop, err := w.scratchStream(ctx, naiveStream, "bench.naive.*", "notifier bench: the naive dispatcher's jobs")
	if err != nil {
		return 0, err
	}
	defer drop()
	if err := w.publishJobs(ctx, tag, n, naiveSubject); err != nil {
		return 0, err
	}
	cons, err := w.js.CreateOrUpdateConsumer(ctx, naiveStream, jetstream.ConsumerConfig{
		Durable:       "bench-naive",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       w.qcfg.AckWait,
		MaxAckPending: queue.DefaultMaxAckPending,
	})
	if err != nil {
		return 0, fmt.Errorf("create the naive dispatcher's consumer: %w", err)
	}
	lane := "/" + tag
	url := w.sb.Lane(lane, math.MaxInt32, 0)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		MaxIdleConns: goroutines, MaxIdleConnsPerHost: goroutines, IdleConnTimeout: 30 * time.Second,
	}}
	defer client.CloseIdleConnections()

	var acked, failed atomic.Int64
	w.prog.set(fmt.Sprintf("naive dispatcher: %d goroutines", goroutines), n, func() int { return int(acked.Load()) })
	msgs := make(chan jetstream.Msg, goroutines)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range msgs {
				if err := naivePost(ctx, client, url, m); err != nil {
					failed.Add(1)
					_ = m.Nak()
					continue
				}
				if m.Ack() == nil {
					acked.Add(1)
				}
			}
		}()
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { msgs <- m })
	if err != nil {
		close(msgs)
		wg.Wait()
		return 0, fmt.Errorf("consume the naive dispatcher's jobs: %w", err)
	}
	werr := waitForJobs(ctx, n, func() int { return int(acked.Load()) })
	cc.Stop()
	<-cc.Closed()
	close(msgs)
	wg.Wait()
	if werr != nil {
		return 0, fmt.Errorf("naive dispatcher: %w (%d POSTs failed)", werr, failed.Load())
	}
	return w.arrivalRate(lane), nil
}

// naivePost POSTs a job's JSON to the sink, as a webhook, keyed by its
// message id.
func naivePost(ctx context.Context, client *http.Client, url string, m jetstream.Msg) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(m.Data()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if id := m.Headers().Get(jetstream.MsgIDHeader); id != "" {
		req.Header.Set("Idempotency-Key", id)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("sink answered %d", resp.StatusCode)
	}
	return nil
}

// fleetPass publishes a backlog of n jobs to the job stream and drains it
// with --processes `notifier run` processes of --workers workers each, the
// limits wide open (no per-user cap, no fleet bucket, a contract of
// 1,000,000/s) and a webhook provider to the sink. It returns the sink's
// arrival rate, the jobs it never accepted and those it saw twice.
func (w *benchWorld) fleetPass(ctx context.Context, exe, tag string, n int) (rate float64, lost, twice int, err error) {
	if err := w.publishJobs(ctx, tag, n, ""); err != nil {
		return 0, 0, 0, err
	}
	lane := "/" + tag
	url := w.sb.Lane(lane, math.MaxInt32, 0)
	dir, err := os.MkdirTemp("", "notifier-bench-fleet-*")
	if err != nil {
		return 0, 0, 0, fmt.Errorf("fleet configuration directory: %w", err)
	}
	defer os.RemoveAll(dir)
	cfgPath := filepath.Join(dir, "bench.yaml")
	if err := os.WriteFile(cfgPath, []byte(w.fleetConfig(url)), 0o600); err != nil {
		return 0, 0, 0, fmt.Errorf("write the fleet configuration: %w", err)
	}
	if _, err := config.Load(cfgPath, func(string) string { return "" }); err != nil {
		return 0, 0, 0, fmt.Errorf("the generated fleet configuration: %w", err)
	}
	w.prog.set(fmt.Sprintf("fleet: %d processes × %d workers, limits wide open", w.f.Processes, w.f.Workers), n, func() int {
		return w.sb.Accepted(lane)
	})
	children, err := w.drain(ctx, exe, cfgPath, lane, n)
	for _, c := range children {
		c.stop()
	}
	if err != nil {
		return 0, 0, 0, err
	}
	st := w.sb.Stats(lane)
	return w.arrivalRate(lane), max(0, n-st.Accepted), st.Duplicates, nil
}

// drain starts --processes `notifier run` processes on cfgPath and waits
// until the sink's lane has accepted n jobs; the caller stops the
// processes it returns.
func (w *benchWorld) drain(ctx context.Context, exe, cfgPath, lane string, n int) ([]*benchChild, error) {
	var children []*benchChild
	for i := range w.f.Processes {
		c, err := startBenchChild(exe, cfgPath)
		if err != nil {
			return children, fmt.Errorf("start notifier run %d: %w", i+1, err)
		}
		children = append(children, c)
	}
	last, lastMove := -1, time.Now()
	for {
		got := w.sb.Accepted(lane)
		if got >= n {
			return children, nil
		}
		if got != last {
			last, lastMove = got, time.Now()
		}
		for i, c := range children {
			if c.exited() {
				return children, fmt.Errorf("notifier run %d exited early (%v); its last lines:\n%s", i+1, c.err, c.tail())
			}
		}
		if time.Since(lastMove) > time.Minute {
			return children, fmt.Errorf("stalled: %d of %d jobs sent, none for a minute; the first process's last lines:\n%s", got, n, children[0].tail())
		}
		select {
		case <-ctx.Done():
			return children, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// fleetConfig is the `notifier run` configuration of the fleet pass: the
// limits wide open, one webhook provider (the sink's lane) on a contract
// of 1,000,000/s.
func (w *benchWorld) fleetConfig(url string) string {
	return w.runConfig("its naive run (the fleet pass)", sinkProvider, url, int(sinkRate), "100ms")
}

// errNaiveNeedsBinary: the naive run starts the notifier binary.
var errNaiveNeedsBinary = errors.New("bench: the naive run starts the notifier binary: Config.Executable is required")

// printNaive writes the naive section of the report.
func printNaive(w io.Writer, r *Result, nv *NaiveResult) {
	fmt.Fprintf(w, "  jobs   %d per pass for %d users; %d rounds of the two passes, one after the other\n", nv.Jobs, r.Users, len(nv.Rounds))
	fmt.Fprintf(w, "\nthe fleet beside a naive dispatcher\n  reproduce: %s\n\n", nv.Command)
	fmt.Fprintf(w, "  %-62s %9s\n", "pass", "jobs/s")
	fmt.Fprintf(w, "  %-62s %9.0f\n", fmt.Sprintf("naive dispatcher (%d goroutines: pull, POST, ack)", nv.NaiveGoroutines), nv.NaivePerSecond)
	fmt.Fprintf(w, "  %-62s %9.0f\n", fmt.Sprintf("fleet (%d notifier run × %d workers, limits wide open)", nv.Processes, nv.WorkersPerProcess), nv.FleetPerSecond)
	fmt.Fprintf(w, "\n  fleet / naive: %.2f (the median of the rounds' ratios)\n", nv.Ratio)
	fmt.Fprintf(w, "  fleet: %d jobs lost, %d sent twice over every round\n", nv.FleetLost, nv.FleetSentTwice)
	fmt.Fprintln(w, "  jobs/s: the sink's arrivals, first to last, of the median round; both send to the sandbox over loopback")
	fmt.Fprintln(w, "  HTTP, the naive dispatcher from this process, the fleet from its own processes")
	if len(nv.Rounds) > 1 {
		fmt.Fprintf(w, "\n  %-6s %14s %14s %8s\n", "round", "naive jobs/s", "fleet jobs/s", "ratio")
		for i, rd := range nv.Rounds {
			fmt.Fprintf(w, "  %-6d %14.0f %14.0f %8.2f\n", i+1, rd.NaivePerSecond, rd.FleetPerSecond, rd.Ratio)
		}
	}
}
