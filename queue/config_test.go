package queue_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

const (
	secretToken    = "tok-S3CRET-value"
	secretPassword = "pw-S3CRET-value"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	got := queue.Config{}.WithDefaults()
	want := queue.Config{URL: "nats://127.0.0.1:4222", Stream: "NOTIFY", DeadStream: "NOTIFY_DEAD", AckWait: 30 * time.Second, Replicas: 1}
	if got != want {
		t.Fatalf("WithDefaults() = %v, want %v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	kept := queue.Config{URL: "tls://a:1", Stream: "S", DeadStream: "D", AckWait: time.Second}.WithDefaults()
	if kept.URL != "tls://a:1" || kept.Stream != "S" || kept.DeadStream != "D" || kept.AckWait != time.Second {
		t.Fatalf("WithDefaults replaced set values: %v", kept)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	certs := testenv.NewCerts(t)
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(dir, "user.creds")
	if err := os.WriteFile(creds, []byte("creds"), 0o600); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(dir, "unreadable")
	if err := os.WriteFile(unreadable, []byte("x"), 0o000); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")

	tests := []struct {
		name   string
		change func(c *queue.Config)
		want   []string // every error message, in order; none for a valid config
	}{
		{"defaults", func(*queue.Config) {}, nil},
		{"cluster URLs", func(c *queue.Config) { c.URL = "nats://a:4222, tls://b:4223,ws://c:80,wss://d,e:4222" }, nil},
		{"token", func(c *queue.Config) { c.Token = secretToken }, nil},
		{"user and password", func(c *queue.Config) { c.User, c.Password = "app", secretPassword }, nil},
		{"credentials file", func(c *queue.Config) { c.CredsFile = creds }, nil},
		{"TLS files", func(c *queue.Config) {
			c.TLS = queue.TLSConfig{CAFile: certs.CAFile, CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile}
		}, nil},
		{"ack_wait zero", func(c *queue.Config) { c.AckWait = 0 }, []string{"ack_wait: must be from 1s to 1h, got 0s"}},
		{"ack_wait below a second", func(c *queue.Config) { c.AckWait = 500 * time.Millisecond }, []string{"ack_wait: must be from 1s to 1h, got 500ms"}},
		{"ack_wait over an hour", func(c *queue.Config) { c.AckWait = 2 * time.Hour }, []string{"ack_wait: must be from 1s to 1h, got 2h"}},
		{"empty URL", func(c *queue.Config) { c.URL = " " }, []string{"url: required"}},
		{"bad scheme", func(c *queue.Config) { c.URL = "nats://ok:4222,http://x:4222" }, []string{`url: server 2 (http://x:4222): scheme "http" is not one of nats, tls, ws, wss`}},
		{"no host", func(c *queue.Config) { c.URL = "nats://:4222" }, []string{"url: server 1 (nats://:4222): no host"}},
		{"bad port", func(c *queue.Config) { c.URL = "nats://h:99999" }, []string{`url: server 1 (nats://h:99999): bad port "99999"`}},
		{"password in a bad URL is redacted", func(c *queue.Config) { c.URL = "http://app:" + secretPassword + "@h:4222" }, []string{`url: server 1 (http://[redacted]@h:4222): scheme "http" is not one of nats, tls, ws, wss`}},
		{"stream with a dot", func(c *queue.Config) { c.Stream = "NOTI.FY" }, []string{`stream: "NOTI.FY" must not contain . * > / \ or whitespace`}},
		{"dead stream empty", func(c *queue.Config) { c.DeadStream = "" }, []string{"dead_stream: required"}},
		{"same streams", func(c *queue.Config) { c.DeadStream = c.Stream }, []string{`dead_stream: must differ from stream (both "NOTIFY")`}},
		{"missing credentials file", func(c *queue.Config) { c.CredsFile = missing }, []string{fmt.Sprintf("creds_file: %q cannot be read: no such file or directory", missing)}},
		{"credentials file is a directory", func(c *queue.Config) { c.CredsFile = dir }, []string{fmt.Sprintf("creds_file: %q is a directory, not a file", dir)}},
		{"token and user", func(c *queue.Config) { c.Token, c.User, c.Password = secretToken, "app", secretPassword }, []string{"token: creds_file, token and user/password are exclusive: set only one"}},
		{"token and credentials", func(c *queue.Config) { c.Token, c.CredsFile = secretToken, creds }, []string{"token: creds_file, token and user/password are exclusive: set only one"}},
		{"password without user", func(c *queue.Config) { c.Password = secretPassword }, []string{"user: required with password (NOTIFIER_NATS_USER)"}},
		{"user without password", func(c *queue.Config) { c.User = "app" }, []string{"password: required with user (NOTIFIER_NATS_PASSWORD)"}},
		{"CA not PEM", func(c *queue.Config) { c.TLS.CAFile = notPEM }, []string{fmt.Sprintf("tls.ca_file: %q holds no PEM certificate", notPEM)}},
		{"CA missing", func(c *queue.Config) { c.TLS.CAFile = missing }, []string{fmt.Sprintf("tls.ca_file: %q cannot be read: no such file or directory", missing)}},
		{"cert without key", func(c *queue.Config) { c.TLS.CertFile = certs.ClientCertFile }, []string{"tls.key_file: required with tls.cert_file"}},
		{"key without cert", func(c *queue.Config) { c.TLS.KeyFile = certs.ClientKeyFile }, []string{"tls.cert_file: required with tls.key_file"}},
		{"key missing", func(c *queue.Config) { c.TLS.CertFile, c.TLS.KeyFile = certs.ClientCertFile, missing }, []string{fmt.Sprintf("tls.key_file: %q cannot be read: no such file or directory", missing)}},
		{"key of another certificate", func(c *queue.Config) { c.TLS.CertFile, c.TLS.KeyFile = certs.ClientCertFile, certs.ServerKeyFile }, []string{
			fmt.Sprintf("tls.cert_file: %q with tls.key_file %q is not a usable key pair: tls: private key does not match public key", certs.ClientCertFile, certs.ServerKeyFile)}},
		{"every problem at once", func(c *queue.Config) {
			*c = queue.Config{URL: "ftp://x", Stream: "a b", DeadStream: "a b", AckWait: -time.Second, Token: secretToken, User: "u"}
		}, []string{
			`url: server 1 (ftp://x): scheme "ftp" is not one of nats, tls, ws, wss`,
			`stream: "a b" must not contain . * > / \ or whitespace`,
			`dead_stream: "a b" must not contain . * > / \ or whitespace`,
			`dead_stream: must differ from stream (both "a b")`,
			"ack_wait: must be from 1s to 1h, got -1s",
			"password: required with user (NOTIFIER_NATS_PASSWORD)",
			"token: creds_file, token and user/password are exclusive: set only one",
		}},
	}
	if os.Geteuid() != 0 { // root reads anything
		tests = append(tests, struct {
			name   string
			change func(c *queue.Config)
			want   []string
		}{"unreadable credentials", func(c *queue.Config) { c.CredsFile = unreadable }, []string{fmt.Sprintf("creds_file: %q cannot be read: permission denied", unreadable)}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := queue.Config{}.WithDefaults()
			tt.change(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate accepted it, want %q", tt.want)
			}
			got := unjoin(err)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Fatalf("Validate errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			for _, s := range []string{secretToken, secretPassword} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error contains a secret: %v", err)
				}
			}
		})
	}
}

// unjoin lists the messages of an errors.Join.
func unjoin(err error) []string {
	var out []string
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, e.Error())
		}
		return out
	}
	return []string{err.Error()}
}

func TestConfigRedactsSecrets(t *testing.T) {
	t.Parallel()
	c := queue.Config{
		URL:   "nats://" + secretToken + "@a:4222,nats://app:" + secretPassword + "@b:4222",
		Token: secretToken, User: "app", Password: secretPassword,
	}.WithDefaults()
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "nats", c)
	for name, s := range map[string]string{
		"String": c.String(), "%v": fmt.Sprintf("%v", c), "%+v": fmt.Sprintf("%+v", c), "%#v": fmt.Sprintf("%#v", c),
		"Sprint of a pointer": fmt.Sprint(&c), "slog": logged.String(),
	} {
		for _, secret := range []string{secretToken, secretPassword} {
			if strings.Contains(s, secret) {
				t.Errorf("%s prints a secret: %s", name, s)
			}
		}
		if !strings.Contains(s, "[redacted]") || !strings.Contains(s, "NOTIFY_DEAD") {
			t.Errorf("%s hides too much: %s", name, s)
		}
	}
	if want := "url:nats://[redacted]@a:4222,nats://[redacted]@b:4222 "; !strings.Contains(c.String(), want) {
		t.Errorf("String() = %s, want it to contain %q", c, want)
	}
	if empty := (queue.Config{}).String(); strings.Contains(empty, "[redacted]") {
		t.Errorf("empty secrets print as redacted: %s", empty)
	}
}

func TestConsumerConfigValidate(t *testing.T) {
	t.Parallel()
	if err := (queue.ConsumerConfig{}).WithDefaults().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	err := queue.ConsumerConfig{Name: "a.b", MaxAckPending: -1, FairLanes: 65}.Validate()
	want := "consumer name \"a.b\" must be non-empty without . * > / \\ or whitespace\nmax_ack_pending: must be at least 1, got -1\ntenants.lanes: must be 1 to 64, got 65"
	if err == nil || err.Error() != want {
		t.Fatalf("Validate: %v, want %q", err, want)
	}
}
