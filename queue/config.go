package queue

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/notifier/notifier/internal/text"
)

// Defaults of SPEC §4.
const (
	DefaultURL        = "nats://127.0.0.1:4222"
	DefaultStream     = "NOTIFY"
	DefaultDeadStream = "NOTIFY_DEAD"
	DefaultAckWait    = 30 * time.Second
	// MaxAckWait bounds ack_wait: a job a stopped process held comes
	// back after it, and a job's send lease (ledger) includes it.
	MaxAckWait = time.Hour
)

// Config is the `nats:` section of the configuration file (SPEC §4). Token,
// User and Password are secrets: the command line fills them from
// NOTIFIER_NATS_TOKEN, NOTIFIER_NATS_USER and NOTIFIER_NATS_PASSWORD, and
// String, GoString and LogValue redact them (and any password in URL), so a
// Config can be printed or logged. The zero value with WithDefaults is a
// local unauthenticated connection.
type Config struct {
	URL        string        `mapstructure:"url"`         // comma-separated for a cluster
	Stream     string        `mapstructure:"stream"`      // job stream
	DeadStream string        `mapstructure:"dead_stream"` // dead-letter stream
	AckWait    time.Duration `mapstructure:"ack_wait"`    // redelivery timeout of an unacknowledged job
	Replicas   int           `mapstructure:"replicas"`    // stream replicas: 1, or 3 on a JetStream cluster (default 1)
	CredsFile  string        `mapstructure:"creds_file"`  // NATS credentials (JWT + nkey seed)
	Token      string        `mapstructure:"token"`       // secret
	User       string        `mapstructure:"user"`
	Password   string        `mapstructure:"password"` // secret
	TLS        TLSConfig     `mapstructure:"tls"`
}

// TLSConfig names PEM files. CAFile replaces the system roots; CertFile and
// KeyFile (both or neither) are the client certificate. Server verification
// is always on.
type TLSConfig struct {
	CAFile   string `mapstructure:"ca_file"`
	CertFile string `mapstructure:"cert_file"`
	KeyFile  string `mapstructure:"key_file"`
}

// enabled reports whether any TLS file is configured.
func (t TLSConfig) enabled() bool { return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" }

// WithDefaults returns c with SPEC §4's value for every key left empty.
func (c Config) WithDefaults() Config {
	if strings.TrimSpace(c.URL) == "" {
		c.URL = DefaultURL
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Stream == "" {
		c.Stream = DefaultStream
	}
	if c.DeadStream == "" {
		c.DeadStream = DefaultDeadStream
	}
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
	return c
}

// Validate reports every problem at once (errors.Join), one error per
// problem, each starting with the key relative to `nats:` ("ack_wait: must
// be at least 1s, got 0s"). It checks the URLs, the stream names, ack_wait,
// that named files exist, are readable and hold what they should, and that
// at most one authentication method is configured. Call it on the result of
// WithDefaults. Messages never contain a secret.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Replicas < 0 || c.Replicas > 5 { // 0: the default, 1
		add("replicas: must be from 1 to 5 (3 on a JetStream cluster), got %d", c.Replicas)
	}

	if strings.TrimSpace(c.URL) == "" {
		add("url: required")
	}
	for i, u := range text.SplitList(c.URL) {
		if err := checkURL(u); err != nil {
			add("url: server %d (%s): %v", i+1, redactURL(u), err)
		}
	}
	if err := checkStreamName(c.Stream); err != nil {
		add("stream: %v", err)
	}
	if err := checkStreamName(c.DeadStream); err != nil {
		add("dead_stream: %v", err)
	}
	if c.Stream != "" && c.Stream == c.DeadStream {
		add("dead_stream: must differ from stream (both %q)", c.Stream)
	}
	if c.AckWait < time.Second || c.AckWait > MaxAckWait {
		add("ack_wait: must be from 1s to 1h, got %s", text.Duration(c.AckWait))
	}

	methods := 0
	if c.CredsFile != "" {
		methods++
		if err := checkReadable(c.CredsFile); err != nil {
			add("creds_file: %v", err)
		}
	}
	if c.Token != "" {
		methods++
	}
	if c.User != "" || c.Password != "" {
		methods++
		if c.User == "" {
			add("user: required with password (NOTIFIER_NATS_USER)")
		}
		if c.Password == "" {
			add("password: required with user (NOTIFIER_NATS_PASSWORD)")
		}
	}
	if methods > 1 {
		add("token: creds_file, token and user/password are exclusive: set only one")
	}

	if c.TLS.CAFile != "" {
		if err := checkCA(c.TLS.CAFile); err != nil {
			add("tls.ca_file: %v", err)
		}
	}
	switch {
	case c.TLS.CertFile != "" && c.TLS.KeyFile == "":
		add("tls.key_file: required with tls.cert_file")
	case c.TLS.CertFile == "" && c.TLS.KeyFile != "":
		add("tls.cert_file: required with tls.key_file")
	case c.TLS.CertFile != "":
		certErr, keyErr := checkReadable(c.TLS.CertFile), checkReadable(c.TLS.KeyFile)
		if certErr != nil {
			add("tls.cert_file: %v", certErr)
		}
		if keyErr != nil {
			add("tls.key_file: %v", keyErr)
		}
		if certErr == nil && keyErr == nil {
			if _, err := tls.LoadX509KeyPair(c.TLS.CertFile, c.TLS.KeyFile); err != nil {
				add("tls.cert_file: %q with tls.key_file %q is not a usable key pair: %v", c.TLS.CertFile, c.TLS.KeyFile, err)
			}
		}
	}
	return errors.Join(errs...)
}

// checkURL accepts what nats.go dials: nats://, tls://, ws:// or wss://
// with a host, or a bare host:port.
func checkURL(raw string) error {
	if !strings.Contains(raw, "://") {
		raw = "nats://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	switch u.Scheme {
	case "nats", "tls", "ws", "wss":
	default:
		return fmt.Errorf("scheme %q is not one of nats, tls, ws, wss", u.Scheme)
	}
	if u.Hostname() == "" {
		return errors.New("no host")
	}
	if p := u.Port(); p != "" {
		if _, err := net.LookupPort("tcp", p); err != nil {
			return fmt.Errorf("bad port %q", p)
		}
	}
	return nil
}

// checkStreamName applies JetStream's rules for a stream name.
func checkStreamName(name string) error {
	switch {
	case name == "":
		return errors.New("required")
	case len(name) > 255:
		return fmt.Errorf("must be at most 255 characters, got %d", len(name))
	case strings.ContainsAny(name, ".*>/\\ \t\r\n"):
		return fmt.Errorf("%q must not contain . * > / \\ or whitespace", name)
	}
	return nil
}

// checkReadable checks that path names a regular file this process can read.
func checkReadable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%q cannot be read: %w", path, unwrapPathError(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%q cannot be read: %w", path, unwrapPathError(err))
	}
	if st.IsDir() {
		return fmt.Errorf("%q is a directory, not a file", path)
	}
	return nil
}

// checkCA checks that path holds at least one PEM certificate.
func checkCA(path string) error {
	if err := checkReadable(path); err != nil {
		return err
	}
	pem, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%q cannot be read: %w", path, unwrapPathError(err))
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		return fmt.Errorf("%q holds no PEM certificate", path)
	}
	return nil
}

// unwrapPathError drops the *os.PathError wrapper, whose text repeats the path.
func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

const redacted = "[redacted]"

func secret(s string) string {
	if s == "" {
		return ""
	}
	return redacted
}

// RedactURLs is the comma-separated server list urls with the user
// information of every URL (a password, or a token given as the user
// name) replaced by [redacted]: how a NATS URL is shown (check, errors,
// logs).
func RedactURLs(urls string) string {
	parts := strings.Split(urls, ",")
	for i, u := range parts {
		parts[i] = redactURL(strings.TrimSpace(u))
	}
	return strings.Join(parts, ",")
}

// RedactAddr is a host:port address with any user information before an
// '@' (user:password@host:port, a common mistake in redis.addrs) replaced
// by [redacted].
func RedactAddr(a string) string {
	if i := strings.LastIndexByte(a, '@'); i >= 0 {
		return redacted + a[i:]
	}
	return a
}

// redactURL replaces the user information of a URL (a password, or a token
// given as the user name) with [redacted].
func redactURL(raw string) string {
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 {
		start = i + 3
	}
	end := len(raw)
	// Only a WebSocket URL has a path; in any other, a '/' is part of the
	// password (base64 passwords hold some), which ended the authority
	// early and was printed whole.
	if strings.HasPrefix(raw, "ws://") || strings.HasPrefix(raw, "wss://") {
		if i := strings.IndexByte(raw[start:], '/'); i >= 0 {
			end = start + i
		}
	}
	at := strings.LastIndexByte(raw[start:end], '@')
	if at < 0 {
		return raw
	}
	return raw[:start] + redacted + raw[start+at:]
}

// redactURLs redacts every server of a comma-separated list.
func redactURLs(s string) string {
	urls := text.SplitList(s)
	for i, u := range urls {
		urls[i] = redactURL(u)
	}
	return strings.Join(urls, ",")
}

// String prints the configuration with secrets redacted.
func (c Config) String() string {
	return fmt.Sprintf("{url:%s stream:%s dead_stream:%s ack_wait:%s replicas:%d creds_file:%s token:%s user:%s password:%s tls:{ca_file:%s cert_file:%s key_file:%s}}",
		redactURLs(c.URL), c.Stream, c.DeadStream, c.AckWait, c.Replicas, c.CredsFile, secret(c.Token), c.User, secret(c.Password),
		c.TLS.CAFile, c.TLS.CertFile, c.TLS.KeyFile)
}

// GoString makes %#v redact secrets too.
func (c Config) GoString() string { return "queue.Config" + c.String() }

// LogValue logs the configuration as a group with secrets redacted.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("url", redactURLs(c.URL)),
		slog.String("stream", c.Stream),
		slog.String("dead_stream", c.DeadStream),
		slog.Duration("ack_wait", c.AckWait),
		slog.String("creds_file", c.CredsFile),
		slog.String("token", secret(c.Token)),
		slog.String("user", c.User),
		slog.String("password", secret(c.Password)),
		slog.Group("tls",
			slog.String("ca_file", c.TLS.CAFile),
			slog.String("cert_file", c.TLS.CertFile),
			slog.String("key_file", c.TLS.KeyFile)),
	)
}
