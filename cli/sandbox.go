package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/internal/localenv"
	"github.com/notifier/notifier/internal/service"
	"github.com/notifier/notifier/providers"
)

func sandboxCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "sandbox",
		Short: "Serve the configuration's webhook providers as sandboxes on this machine, for notifier run to send to",
		Long: `Sandbox serves, on its own, the sandbox providers notifier dev runs in its process: for
each webhook provider of the configuration whose url is on the --listen port, a sandbox on
that url's path that speaks the webhook protocol, accepts requests within the provider's
contract (rate per any 1 s), answers 429 with Retry-After over it, honours
Idempotency-Key, sends nothing anywhere, and prints a line for each job it gets (10 a
second at most; beyond, a count).

So notifier run can be tried end to end with the shipped config.yaml, whose webhook
providers post to 127.0.0.1:8080:

  notifier sandbox --config config.yaml          # the providers, on 127.0.0.1:8080
  notifier run     --config config.yaml          # beside it: NATS 2.10+ and Redis

--listen defaults to the host:port of the configuration's first webhook provider;
in a container, --listen 0.0.0.0:8080 serves the providers whose url has port 8080,
whatever host name it gives. Providers of other kinds, or on another port, are listed
as not served. It stops on SIGINT or SIGTERM (exit 0).`,
		Args: cobra.NoArgs,
	}
	path := configFlag(c)
	listen := c.Flags().String("listen", "", "host:port to serve on (default: the host:port of the configuration's first webhook provider)")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := config.Load(*path, e.getenv)
		if err != nil {
			return err
		}
		addr, lanes, skipped, err := sandboxLanes(cfg.Providers, *listen)
		if err != nil {
			return &usageError{err: err}
		}
		return runSandbox(cmd.Context(), e, addr, lanes, skipped)
	}
	return c
}

// sandboxLane is one provider a sandbox serves: its path, and its
// contract in requests per any 1 s.
type sandboxLane struct {
	provider, url, path string
	contract            int
}

// sandboxLanes picks what a sandbox on listen serves of ps: each webhook
// provider whose url's port is listen's; listen "" is the host:port of the
// first webhook provider. skipped names the others, with why.
func sandboxLanes(ps []providers.Config, listen string) (addr string, lanes []sandboxLane, skipped []string, err error) {
	addr = listen
	if addr == "" {
		for _, p := range ps {
			if p.Kind != "webhook" {
				continue
			}
			u, err := url.Parse(p.URL)
			if err != nil || u.Port() == "" {
				return "", nil, nil, fmt.Errorf("provider %s: url %q names no port: give --listen", p.Name, p.URL)
			}
			addr = u.Host
			break
		}
		if addr == "" {
			return "", nil, nil, errors.New("the configuration has no webhook provider: nothing for a sandbox to serve")
		}
	}
	_, port, err := service.SplitListen(addr)
	if err != nil {
		return "", nil, nil, fmt.Errorf("--listen: %w", err)
	}
	for _, p := range ps {
		u, err := url.Parse(p.URL)
		switch {
		case p.Kind != "webhook":
			skipped = append(skipped, fmt.Sprintf("%s (kind %s)", p.Name, p.Kind))
		case err != nil || u.Port() != fmt.Sprint(port):
			skipped = append(skipped, fmt.Sprintf("%s (%s: another port)", p.Name, p.URL))
		default:
			path := u.EscapedPath()
			if path == "" {
				path = "/"
			}
			lanes = append(lanes, sandboxLane{provider: p.Name, url: p.URL, path: path, contract: max(1, int(math.Ceil(p.Rate)))})
		}
	}
	if len(lanes) == 0 {
		return "", nil, nil, fmt.Errorf("no webhook provider of the configuration posts to port %d: nothing to serve on %s", port, addr)
	}
	return addr, lanes, skipped, nil
}

// runSandbox serves lanes on addr until ctx ends, printing what they
// answer as dev does.
func runSandbox(ctx context.Context, e *env, addr string, lanes []sandboxLane, skipped []string) error {
	out := &devPrinter{w: e.stdout, names: map[string]string{}}
	if isTerminal(e.stdout) {
		out.width = func() int { return termWidth(e.stdout, e.getenv) }
	}
	// The sandbox's own listener (a free loopback port) stays unused: its
	// handler is served on addr.
	sb, err := localenv.StartSandbox(localenv.SandboxOptions{Retain: 10 * time.Minute, Answered: out.answered})
	if err != nil {
		return err
	}
	defer sb.Close()
	for _, l := range lanes {
		out.names[l.path] = l.provider
		sb.Lane(l.path, l.contract, 0)
	}
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return &localenv.PortTakenError{What: "the sandbox's port", Addr: addr, Flag: "--listen", Err: err}
	}
	if err != nil {
		return fmt.Errorf("sandbox: listen on %s: %w", addr, err)
	}
	// Timeouts, so that idle or slow clients cannot hold descriptors for
	// good; idle longer than the providers' clients keep a connection (90 s).
	srv := &http.Server{Handler: sb, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()

	var b strings.Builder
	fmt.Fprintf(&b, "notifier sandbox: webhook providers on %s, nothing leaves this machine\n\n", ln.Addr())
	for _, l := range lanes {
		fmt.Fprintf(&b, "  %-14s %-32s %d/s: accepted within it, 429 over it\n", l.provider, l.url, l.contract)
	}
	if len(skipped) > 0 {
		fmt.Fprintf(&b, "  not served: %s\n", strings.Join(skipped, ", "))
	}
	fmt.Fprintf(&b, "\nCtrl-C stops it.\n\n")
	out.banner(b.String())

	tick := make(chan struct{})
	go out.flushEverySecond(tick)
	defer close(tick)
	select {
	case err := <-done:
		return fmt.Errorf("sandbox: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	<-done
	out.flush()
	return nil
}
