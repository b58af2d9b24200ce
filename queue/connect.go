package queue

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MinServerVersion is the oldest nats-server this package works with:
//
//   - 2.10.4 is the first release that honours a termination with a reason
//     (Delivery.Term sends "+TERM <reason>"; older servers ignore it and keep
//     redelivering the job);
//   - 2.10 gave consumer creation its create-or-update action, which makes
//     many processes creating the same durable consumers at once safe;
//   - 2.9 gave pull requests the no-wait and expiry statuses Fetch relies on.
const MinServerVersion = "2.10.4"

var minVersion = [3]int{2, 10, 4}

// Reconnect back-off: the first retry waits about 100ms, each later one
// twice as long, capped at 5s, with the upper half jittered so a fleet does
// not reconnect in step.
const (
	reconnectBase = 100 * time.Millisecond
	reconnectMax  = 5 * time.Second
	dialTimeout   = 5 * time.Second
)

func reconnectDelay(attempts int) time.Duration {
	d := reconnectMax
	if attempts < 8 {
		d = min(reconnectMax, reconnectBase<<max(attempts-1, 0))
	}
	return d/2 + rand.N(d/2+1)
}

// Connect dials NATS with the configured authentication (credentials file,
// token, or user and password) and TLS (server verification always on;
// tls.ca_file replaces the system roots; the client certificate when
// configured), named name so that operators can tell processes apart. It
// reconnects forever with a jittered exponential back-off once connected;
// the first dial fails fast (5s per server) so a misconfigured process stops
// at start. It then checks the server: JetStream enabled for the account,
// and a version of at least MinServerVersion. opts are applied last.
//
// Errors never contain a secret: URLs are printed with their user
// information redacted, and the token and password are never printed.
// The caller closes the connection (Drain or Close).
func Connect(ctx context.Context, cfg Config, name string, opts ...nats.Option) (*nats.Conn, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("nats configuration: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("connect to NATS: %w", err)
	}
	o := []nats.Option{
		nats.Name(name),
		nats.Timeout(dialTimeout),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(reconnectDelay),
	}
	switch {
	case cfg.CredsFile != "":
		o = append(o, nats.UserCredentials(cfg.CredsFile))
	case cfg.Token != "":
		o = append(o, nats.Token(cfg.Token))
	case cfg.User != "":
		o = append(o, nats.UserInfo(cfg.User, cfg.Password))
	}
	if cfg.TLS.enabled() {
		tc, err := cfg.TLS.clientConfig()
		if err != nil {
			return nil, err
		}
		o = append(o, nats.Secure(tc))
	}
	o = append(o, opts...)

	where := redactURLs(cfg.URL)
	nc, err := nats.Connect(cfg.URL, o...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", where, err)
	}
	if err := checkServer(ctx, nc); err != nil {
		nc.Close()
		return nil, fmt.Errorf("NATS at %s: %w", where, err)
	}
	return nc, nil
}

// clientConfig builds the TLS client configuration. Verification is never
// skipped.
func (t TLSConfig) clientConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.ca_file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.ca_file: %q holds no PEM certificate", t.CAFile)
		}
	}
	if t.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls.cert_file: load key pair: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// checkServer verifies the connected server's version and that JetStream
// is available to this account.
func checkServer(ctx context.Context, nc *nats.Conn) error {
	if err := checkVersion(nc.ConnectedServerVersion()); err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream context: %w", err)
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			return fmt.Errorf("JetStream is not enabled on server %s for this account: start nats-server with JetStream (-js, or a jetstream block in its configuration) and give the account JetStream limits: %w", nc.ConnectedServerId(), err)
		}
		return fmt.Errorf("JetStream account info: %w", err)
	}
	return nil
}

var versionPattern = regexp.MustCompile(`^v?(\d+)\.(\d+)\.(\d+)`)

// checkVersion fails unless version is at least MinServerVersion. A
// pre-release counts as its release.
func checkVersion(version string) error {
	m := versionPattern.FindStringSubmatch(version)
	if m == nil {
		return fmt.Errorf("server version %q is not a version; notifier needs nats-server %s or newer", version, MinServerVersion)
	}
	for i, want := range minVersion {
		got, _ := strconv.Atoi(m[i+1])
		if got > want {
			return nil
		}
		if got < want {
			return fmt.Errorf("server version %s is too old: notifier needs nats-server %s or newer", version, MinServerVersion)
		}
	}
	return nil
}
