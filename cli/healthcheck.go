package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func healthcheckCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "healthcheck",
		Short: "Exit 0 when a notifier's /healthz (or another URL) answers 2xx: for container HEALTHCHECKs",
		Long: `Healthcheck asks a URL, by default notifier run's /healthz on the default metrics port,
and exits 0 when it answers 2xx within --timeout, else prints why and exits 1. It is the
HEALTHCHECK of the container image, which holds no shell and no curl:

  notifier healthcheck                                          # run: http://127.0.0.1:9464/healthz
  notifier healthcheck --url http://127.0.0.1:8081/healthz      # a gateway on 8081
  notifier healthcheck --url http://127.0.0.1:9464/readyz       # ready, not only up`,
		Args: cobra.NoArgs,
	}
	u := c.Flags().String("url", "http://127.0.0.1:9464/healthz", "the URL to ask")
	timeout := c.Flags().Duration("timeout", 3*time.Second, "how long to wait for the answer")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if !strings.HasPrefix(*u, "http://") && !strings.HasPrefix(*u, "https://") {
			return &usageError{err: fmt.Errorf("--url must be an http:// or https:// URL, got %q", *u)}
		}
		// A deadline already passed fails every ask: the healthy process
		// would be reported down.
		if *timeout <= 0 {
			return &usageError{err: fmt.Errorf("--timeout must be more than 0, got %s", *timeout)}
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), *timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, *u, nil)
		if err != nil {
			return &usageError{err: fmt.Errorf("--url: %w", err)}
		}
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("healthcheck: %w", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		line := strings.TrimSpace(string(body))
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("healthcheck: %s answered %s: %s", *u, resp.Status, line)
		}
		fmt.Fprintf(e.stdout, "%s: %s %s\n", *u, resp.Status, line)
		return nil
	}
	return c
}
