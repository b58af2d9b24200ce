package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/internal/service"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/userlimit"
)

func checkCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "check",
		Short: "Validate the configuration: exit 0, or print every problem and exit 2",
		Args:  cobra.NoArgs,
	}
	path := configFlag(c)
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := config.Load(*path, e.getenv)
		if err != nil {
			return err
		}
		// What run checks before it connects: the providers' secrets in
		// the environment and the files they name. Only NATS and Redis
		// (their addresses, credentials and TLS handshakes) are left to
		// run, which needs the network for them.
		reg, err := service.BuildRegistry(*path, cfg.Providers, providers.Options{Version: version, Getenv: e.getenv, Stdout: io.Discard})
		if err != nil {
			return err
		}
		_ = reg.Close()
		fmt.Fprintf(e.stdout, "configuration %s is valid\n", *path)
		describeConfig(e.stdout, cfg)
		return nil
	}
	return c
}

// describeConfig prints what the configuration will do, without a secret.
func describeConfig(w io.Writer, cfg config.Config) {
	fmt.Fprintf(w, "  nats:      %s (streams %s, %s; ack_wait %s; auth: %s)\n",
		queue.RedactURLs(cfg.NATS.URL), cfg.NATS.Stream, cfg.NATS.DeadStream, inspect.FormatDuration(cfg.NATS.AckWait), natsAuthKind(cfg))
	mode := "standalone"
	switch {
	case cfg.Redis.MasterName != "":
		mode = "sentinel, master " + cfg.Redis.MasterName
	case len(cfg.Redis.Addrs) > 1:
		mode = "cluster"
	}
	auth := "none"
	if cfg.Redis.Password != "" {
		auth = "password"
		if cfg.Redis.Username != "" {
			auth = "ACL user " + cfg.Redis.Username
		}
	}
	addrs := make([]string, len(cfg.Redis.Addrs))
	for i, a := range cfg.Redis.Addrs {
		addrs[i] = queue.RedactAddr(a)
	}
	fmt.Fprintf(w, "  redis:     %s (%s, tls %v, auth %s, prefix %q, on_failure %s)\n",
		strings.Join(addrs, ","), mode, cfg.Redis.TLS.Enabled, auth, cfg.Redis.KeyPrefix, cfg.Redis.OnFailure)
	fmt.Fprintf(w, "  workers:   %d per process; dedup_ttl %s; retry %d attempts, %s..%s\n",
		cfg.Workers, inspect.FormatDuration(cfg.DedupTTL), cfg.Retry.MaxAttempts, inspect.FormatDuration(cfg.Retry.BaseDelay), inspect.FormatDuration(cfg.Retry.MaxDelay))
	if t := cfg.Tracing; t.OTLPEndpoint != "" {
		fmt.Fprintf(w, "  tracing:   OTLP/HTTP to %s (service %s, sample ratio %g)\n", config.RedactURL(t.OTLPEndpoint), t.ServiceName, *t.SampleRatio)
	} else {
		fmt.Fprintf(w, "  tracing:   off (jobs' traceparent still passed to webhooks)\n")
	}
	if cfg.Global != nil {
		fmt.Fprintf(w, "  global:    %g jobs/s, burst %d (whole fleet)\n", cfg.Global.Rate, cfg.Global.Burst)
		if cfg.Global.ShadowRate > 0 {
			fmt.Fprintf(w, "  global:    shadow %g jobs/s (counted, not enforced)\n", cfg.Global.ShadowRate)
		}
	} else {
		fmt.Fprintf(w, "  global:    off\n")
	}
	for _, ch := range slices.Sorted(maps.Keys(cfg.UserLimits)) {
		cc := cfg.UserLimits[ch]
		line := func(name string, r userlimit.Rule) {
			if r.Mode == userlimit.Shadow {
				fmt.Fprintf(w, "  cap %-5s  %d per %s per user (%s, shadow: counted, not enforced)\n", name, r.Limit, inspect.FormatDuration(r.Window), r.Algorithm)
				return
			}
			fmt.Fprintf(w, "  cap %-5s  %d per %s per user (%s, on_exceed %s)\n", name, r.Limit, inspect.FormatDuration(r.Window), r.Algorithm, r.OnExceed)
		}
		if cc.Own() {
			line(ch, cc.Rule)
		}
		for _, cat := range queue.Categories {
			if r := cc.Category(cat); r != nil {
				line(ch+"."+string(cat), *r)
			}
		}
	}
	for _, ch := range slices.Sorted(maps.Keys(cfg.Categories)) {
		fmt.Fprintf(w, "  category   %s jobs are %s unless they name one\n", ch, cfg.Categories[ch])
	}
	if len(cfg.Tenants.Weights) > 0 {
		var parts []string
		for _, t := range slices.Sorted(maps.Keys(cfg.Tenants.Weights)) {
			parts = append(parts, fmt.Sprintf("%s %g", t, cfg.Tenants.Weights[t]))
		}
		fmt.Fprintf(w, "  tenants:   weights %s; any other tenant 1\n", strings.Join(parts, ", "))
	}
	if g := cfg.Gateway; g != nil {
		legacy := ""
		if g.LegacyHeaders {
			legacy = ", legacy X-RateLimit headers"
		}
		fmt.Fprintf(w, "  gateway:   %s, %d API keys, at most %d failed authentications per IP per %s%s\n",
			g.Listen, len(g.Keys), g.AuthFailures.Limit, inspect.FormatDuration(g.AuthFailures.Window), legacy)
		for _, k := range g.Keys {
			tenant := k.Tenant
			if tenant == "" {
				tenant = "the default tenant"
			}
			fmt.Fprintf(w, "  key        %s: %s, %g jobs/s, burst %d\n", k.Name, tenant, k.Rate, k.Burst)
		}
	}
	for _, p := range cfg.Providers {
		def := ""
		if p.Default {
			def = ", default"
		}
		if r := p.TransactionalReserve(); r > 0 {
			def += fmt.Sprintf(", %g%% kept for transactional jobs", 100*r)
		}
		fmt.Fprintf(w, "  provider   %s: %s %s%s, contract %g %s/s, max_queue_delay %s\n",
			p.Name, p.Channel, p.Kind, def, p.Rate, p.Unit, inspect.FormatDuration(p.MaxQueueDelay))
	}
}

func natsAuthKind(cfg config.Config) string {
	switch {
	case cfg.NATS.CredsFile != "":
		return "credentials file"
	case cfg.NATS.Token != "":
		return "token"
	case cfg.NATS.User != "":
		return "user " + cfg.NATS.User
	}
	return "none"
}
