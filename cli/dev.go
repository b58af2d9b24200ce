package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/internal/demo"
	"github.com/notifier/notifier/internal/service"
	"github.com/notifier/notifier/internal/text"
)

// devFlags are the flags of `notifier dev`.
type devFlags struct {
	dataDir       string
	natsListen    string
	config        string
	metricsListen string
	sandbox       bool
	log           logOptions
}

// Defaults of `notifier dev`.
const (
	devDataDir    = ".notifier-dev"
	devNATSListen = "127.0.0.1:4222"
)

func devCmd(e *env) *cobra.Command {
	f := &devFlags{}
	c := &cobra.Command{
		Use:   "dev",
		Short: "Everything on one machine for development: a local JetStream server and a dispatcher, no Redis",
		Long: `Dev runs, in one process, what notifier run needs and notifier run itself:

  - a NATS JetStream server (the embedded nats-server) on --nats-listen, with its
    state (streams, jobs waiting, dead letters) kept in --data-dir: it survives
    a restart of notifier dev (jobs a worker held at the stop come back after
    nats.ack_wait, 30s by default); delete the directory to start afresh;
  - a dispatcher, notifier run's own, on limits in this process's memory: no Redis;
  - with --sandbox (the default), sandbox providers in the process: each accepts
    jobs within its contract and answers 429 over it, nothing leaves the machine,
    and every job they get is printed (10 a second at most; beyond, a count).

Without --config it dispatches sms, push and email to three sandbox providers
(100/s, 250/s, 50/s). With --config it takes the file's workers, per-user caps,
fleet bucket, retry, tenants and providers, each provider's contract then served
by a sandbox of the same name (--sandbox=false: the file's providers themselves,
for real); the file's nats.url, credentials and TLS and its redis section are
not used, and the file is read once.

It prints the server's URL and how to publish to it, serves /metrics and the
/status page on --metrics-listen as run does on metrics.listen, and stops on
SIGINT or SIGTERM (exit 0). A fleet runs notifier run instead, against a NATS
server 2.10.4 or newer and Redis.`,
		Args: cobra.NoArgs,
	}
	fl := c.Flags()
	fl.StringVar(&f.dataDir, "data-dir", devDataDir, "directory of the JetStream server's state, kept across restarts (created if missing)")
	fl.StringVar(&f.natsListen, "nats-listen", devNATSListen, "host:port the NATS server listens on for clients (port 0: any free port)")
	fl.StringVar(&f.config, "config", "", "YAML configuration to take workers, caps, tenants and providers from (default: three sandbox providers)")
	fl.StringVar(&f.metricsListen, "metrics-listen", "", "host:port of /metrics, /healthz, /readyz and /status, or off (default: the configuration's metrics.listen, 127.0.0.1:9464)")
	fl.BoolVar(&f.sandbox, "sandbox", true, "send to sandbox providers in the process; false sends to the configuration's providers")
	fl.StringVar(&f.log.level, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&f.log.format, "log-format", "text", "json or text")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if !f.sandbox && f.config == "" {
			return &usageError{err: errors.New("--sandbox=false needs --config: without a configuration the only providers are the sandbox's")}
		}
		if _, _, err := service.SplitListen(f.natsListen); err != nil {
			return &usageError{err: fmt.Errorf("--nats-listen: %w", err)}
		}
		if f.metricsListen != "" && f.metricsListen != "off" {
			if _, _, err := service.SplitListen(f.metricsListen); err != nil {
				return &usageError{err: fmt.Errorf("--metrics-listen: %w", err)}
			}
		}
		return runDev(cmd.Context(), f, e)
	}
	return c
}

// devBanner is what dev prints once it dispatches: where things are, and
// how to publish a job.
func devBanner(cfg config.Config, dir, metricsAddr string, sandboxed bool) string {
	var b strings.Builder
	u := cfg.NATS.URL
	fmt.Fprintf(&b, "notifier dev: a JetStream server and a dispatcher, nothing else to run\n\n")
	fmt.Fprintf(&b, "  NATS       %s  (state in %s: kept across restarts)\n", u, dir)
	var names []string
	for _, p := range cfg.Providers {
		names = append(names, fmt.Sprintf("%s %s %g/s", p.Name, p.Channel, p.Rate))
	}
	if sandboxed {
		fmt.Fprintf(&b, "  providers  sandbox, nothing leaves this machine: %s\n", strings.Join(names, " · "))
	} else {
		fmt.Fprintf(&b, "  providers  from the configuration, for real: %s\n", strings.Join(names, " · "))
	}
	fmt.Fprintf(&b, "  limits     in memory (no Redis): this process's own\n")
	if metricsAddr != "off" {
		fmt.Fprintf(&b, "  status     http://%s/status   metrics http://%s/metrics\n", metricsAddr, metricsAddr)
	}
	channel, to := "sms", "+447700900123"
	if len(cfg.Providers) > 0 {
		channel = cfg.Providers[0].Channel
		to = demo.SyntheticRecipient(channel, 42)
	}
	job := fmt.Sprintf(`{"id":"hello-1","user_id":"u42","channel":"%s","to":"%s","body":"Hello from notifier dev"}`, channel, to)
	fmt.Fprintf(&b, "\npoint the other commands (publish, gateway, dead, explain --job, status) at this server:\n")
	fmt.Fprintf(&b, "  export %s=%s\n", natsURLVar, u)
	fmt.Fprintf(&b, "\npublish a job (each needs its own id: a repeated one is dropped as a duplicate):\n")
	fmt.Fprintf(&b, "  notifier publish --nats %s --channel %s --user u42 --to %s --body \"Hello from notifier dev\"\n", u, channel, to)
	fmt.Fprintf(&b, "  nats pub -s %s notify.jobs.%s -H Nats-Msg-Id:hello-1 '%s'\n", u, channel, job)
	if metricsAddr != "off" {
		fmt.Fprintf(&b, "\nits limits live in this process, not in Redis: status, explain --user and top read Redis;\n")
		fmt.Fprintf(&b, "this one's state is at http://%s/status\n", metricsAddr)
	}
	fmt.Fprintf(&b, "\nCtrl-C stops it.\n\n")
	return b.String()
}

// devPrinter prints what dev's sandbox providers answer, a line a job, at
// most devLinesPerSecond lines a second; beyond, one line a second counts
// the rest. It is safe for concurrent use.
type devPrinter struct {
	w     io.Writer
	names map[string]string // lane path → provider name
	width func() int        // on a terminal, its width: lines are cut to it; else nil

	mu      sync.Mutex
	second  time.Time      // the second being counted
	printed int            // lines printed in it
	more    map[string]int // not printed in it: "<provider> <what>" → jobs
}

const devLinesPerSecond = 10

// answered is the sandbox's hook: one request answered.
func (p *devPrinter) answered(path string, body []byte, status int) {
	var j struct {
		ID     string `json:"id"`
		UserID string `json:"user_id"`
		Tenant string `json:"tenant"`
	}
	_ = json.Unmarshal(body, &j)
	// What any client of the port sent, printed on the operator's terminal:
	// no control characters (an escape sequence would drive the terminal).
	j.ID, j.UserID, j.Tenant = text.OneLine(j.ID, 80), text.OneLine(j.UserID, 80), text.OneLine(j.Tenant, 80)
	what := "sent"
	switch status {
	case http.StatusOK:
	case http.StatusTooManyRequests:
		what = "answered 429 (over its contract)"
	default:
		what = fmt.Sprintf("answered %d", status)
	}
	name := p.names[path]
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if sec := now.Truncate(time.Second); !sec.Equal(p.second) {
		p.flushLocked()
		p.second = sec
	}
	if p.printed >= devLinesPerSecond {
		if p.more == nil {
			p.more = map[string]int{}
		}
		p.more[name+" "+what]++
		return
	}
	p.printed++
	line := fmt.Sprintf("%s  %-14s %-6s job %s  user %s", now.Format("15:04:05.000"), name, what, j.ID, j.UserID)
	if j.Tenant != "" {
		line += "  tenant " + j.Tenant
	}
	p.println(line)
}

// println prints line, cut to the terminal's width on one; the caller
// holds mu.
func (p *devPrinter) println(line string) {
	if p.width != nil {
		line = text.Fit(line, p.width()-1)
	}
	fmt.Fprintln(p.w, line)
}

// flushLocked prints the count of the lines not printed; the caller holds mu.
func (p *devPrinter) flushLocked() {
	if len(p.more) > 0 {
		keys := make([]string, 0, len(p.more))
		n := 0
		for k, v := range p.more {
			keys = append(keys, k)
			n += v
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s %d", k, p.more[k])
		}
		p.println(fmt.Sprintf("%s  … and %d more in that second: %s", p.second.Format("15:04:05"), n, strings.Join(parts, ", ")))
	}
	p.more, p.printed = nil, 0
}

// flush prints the count of the lines not printed in the last second.
func (p *devPrinter) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushLocked()
}

// flushEverySecond prints the counts of a busy second once it is over,
// until stop is closed.
func (p *devPrinter) flushEverySecond(stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			p.mu.Lock()
			if now.Truncate(time.Second).After(p.second) {
				p.flushLocked()
				p.second = now.Truncate(time.Second)
			}
			p.mu.Unlock()
		}
	}
}

// banner prints s whole, between the job lines.
func (p *devPrinter) banner(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprint(p.w, s)
}

// runDev runs service.Dev with the printer of what the sandbox answers and
// the banners.
func runDev(ctx context.Context, f *devFlags, e *env) error {
	log, err := f.log.logger(e.stderr)
	if err != nil {
		return err
	}
	cfg, path := config.Config{}.WithDefaults(), ""
	if f.config != "" {
		path = f.config
		if cfg, err = config.Load(f.config, e.getenv); err != nil {
			return err
		}
	}
	if f.metricsListen != "" {
		cfg.Metrics.Listen = f.metricsListen
	}
	out := &devPrinter{w: e.stdout, names: map[string]string{}}
	if isTerminal(e.stdout) {
		out.width = func() int { return termWidth(e.stdout, e.getenv) }
	}
	tick := make(chan struct{})
	defer close(tick)
	go out.flushEverySecond(tick)
	dir, err := service.Dev(ctx, cfg, service.DevOptions{
		Options:    service.Options{Path: path, Version: version, Logger: log, Stdout: e.stdout, Getenv: e.getenv},
		DataDir:    f.dataDir,
		NATSListen: f.natsListen,
		Sandbox:    f.sandbox,
		Answered:   out.answered,
		Lane:       func(path, provider string) { out.names[path] = provider },
		Started: func(cfg config.Config, dir, metricsAddr string) {
			out.banner(devBanner(cfg, dir, metricsAddr, f.sandbox))
		},
	})
	out.flush()
	if err != nil {
		return err
	}
	out.banner(fmt.Sprintf("notifier dev stopped; the server's state is kept in %s\n", dir))
	return nil
}
