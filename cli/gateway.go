package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/gateway"
	"github.com/notifier/notifier/internal/service"
)

func gatewayCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "gateway",
		Short: "Serve the HTTP intake: POST /v1/notifications, limited per API key",
		Long: `Gateway serves jobs over HTTP on gateway.listen (default 127.0.0.1:8080) and publishes
them to the NOTIFY stream, answering 202 only once JetStream acknowledged them:

  POST /v1/notifications   one job (SPEC §2 JSON) or an array of up to 1000;
                           Authorization: Bearer <API key>; Idempotency-Key: <id>
  GET  /healthz, /readyz, /metrics, /openapi.json

Each key of gateway.keys has a token bucket (rate, burst) shared by every gateway
instance through Redis, beside its tenant's (gateway.tenants) and the whole intake's
(gateway.capacity); failed authentications are limited per client IP
(gateway.auth_failures). Connections, requests in flight and a slow JetStream are
shed at once (gateway.shed). It keeps no state of its own: run as many as you like
behind a load balancer. On SIGINT or SIGTERM it stops accepting connections, lets the
requests in flight finish, and exits 0.`,
		Args: cobra.NoArgs,
	}
	path := configFlag(c)
	logf := logFlags(c)
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, log, err := logf.start(*path, e, func(cfg config.Config) error {
			if cfg.Gateway == nil {
				return &config.Error{File: *path, Problems: []error{errors.New("gateway: required by notifier gateway: at least gateway.keys (see `notifier gateway hash-key`)")}}
			}
			return nil
		})
		if err != nil {
			return err
		}
		return service.Gateway(cmd.Context(), cfg, version, log, func(addr string) {
			fmt.Fprintf(e.stdout, "gateway listening on http://%s\n", addr)
		})
	}
	c.AddCommand(hashKeyCmd(e))
	return c
}

func hashKeyCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "hash-key",
		Short: "Print the SHA-256 of an API key read from stdin, for gateway.keys[].sha256",
		Long: `Hash-key reads an API key from stdin (its first line; surrounding spaces and the
line end are not part of it) and prints its SHA-256 in hex, the value of
gateway.keys[].sha256: the configuration never holds a key in clear.

  head -c 32 /dev/urandom | base64 | tr -d '/+=' > key.txt     # a new key
  notifier gateway hash-key < key.txt`,
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			line, err := bufio.NewReader(io.LimitReader(e.stdin, 64<<10)).ReadString('\n')
			if err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("read the key from stdin: %w", err)
			}
			key := strings.TrimSpace(line)
			if key == "" {
				return &usageError{err: errors.New("no key on stdin: pipe the key in (notifier gateway hash-key < key.txt)")}
			}
			fmt.Fprintln(e.stdout, gateway.HashKey(key))
			return nil
		},
	}
}
