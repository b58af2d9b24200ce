package queue_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

func TestConnectToken(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t, testenv.WithNATSToken(secretToken))

	nc, err := queue.Connect(ctx(t), queue.Config{URL: srv.URL(), Token: secretToken}, "test-right-token")
	if err != nil {
		t.Fatalf("Connect with the right token: %v", err)
	}
	if !nc.IsConnected() {
		t.Fatal("not connected")
	}
	nc.Close()

	const wrong = "tok-WRONG-value"
	_, err = queue.Connect(ctx(t), queue.Config{URL: srv.URL(), Token: wrong}, "test-wrong-token")
	if err == nil {
		t.Fatal("Connect with a wrong token succeeded")
	}
	msg := err.Error()
	if !strings.Contains(strings.ToLower(msg), "authorization") || !strings.Contains(msg, srv.URL()) {
		t.Errorf("error %q should name the server and an authorization failure", msg)
	}
	if strings.Contains(msg, wrong) || strings.Contains(msg, secretToken) {
		t.Errorf("error contains a token: %q", msg)
	}

	_, err = queue.Connect(ctx(t), queue.Config{URL: srv.URL()}, "test-no-token")
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("Connect without a token: %v, want an authorization error", err)
	}
}

func TestConnectUserPassword(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t, testenv.WithNATSUser("app", secretPassword))
	nc, err := queue.Connect(ctx(t), queue.Config{URL: srv.URL(), User: "app", Password: secretPassword}, "test-user")
	if err != nil {
		t.Fatalf("Connect with the right password: %v", err)
	}
	nc.Close()
	_, err = queue.Connect(ctx(t), queue.Config{URL: srv.URL(), User: "app", Password: "nope-WRONG"}, "test-user")
	if err == nil || strings.Contains(err.Error(), "nope-WRONG") || strings.Contains(err.Error(), secretPassword) {
		t.Fatalf("Connect with a wrong password: %v, want an error without the password", err)
	}
	// A password in the URL is redacted from errors too.
	url := strings.Replace(srv.URL(), "nats://", "nats://app:nope-WRONG@", 1)
	_, err = queue.Connect(ctx(t), queue.Config{URL: url}, "test-user")
	if err == nil || strings.Contains(err.Error(), "nope-WRONG") || !strings.Contains(err.Error(), "[redacted]@127.0.0.1") {
		t.Fatalf("Connect with a password in the URL: %v, want an error with the URL redacted", err)
	}
}

func TestConnectTLS(t *testing.T) {
	t.Parallel()
	certs := testenv.NewCerts(t)
	srv := testenv.NATS(t, testenv.WithNATSTLS(certs))

	good := queue.Config{URL: srv.URL(), TLS: queue.TLSConfig{CAFile: certs.CAFile, CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile}}
	nc, err := queue.Connect(ctx(t), good, "test-tls")
	if err != nil {
		t.Fatalf("Connect with CA and client certificate: %v", err)
	}
	if _, err := nc.TLSConnectionState(); err != nil {
		t.Errorf("connection is not TLS: %v", err)
	}
	nc.Close()

	// Same over nats://: the TLS files alone turn TLS on.
	plain := good
	plain.URL = strings.Replace(srv.URL(), "tls://", "nats://", 1)
	nc, err = queue.Connect(ctx(t), plain, "test-tls-nats-scheme")
	if err != nil {
		t.Fatalf("Connect over nats:// with TLS files: %v", err)
	}
	nc.Close()

	noCA := good
	noCA.TLS.CAFile = ""
	_, err = queue.Connect(ctx(t), noCA, "test-tls-no-ca")
	if err == nil {
		t.Fatal("Connect without the CA (system roots) succeeded: verification is off")
	}
	if !strings.Contains(err.Error(), "certificate") {
		t.Errorf("error %q should say the certificate is not trusted", err)
	}

	noClientCert := good
	noClientCert.TLS.CertFile, noClientCert.TLS.KeyFile = "", ""
	if _, err := queue.Connect(ctx(t), noClientCert, "test-tls-no-client-cert"); err == nil {
		t.Fatal("Connect without a client certificate succeeded against a server that requires one")
	}
}

func TestConnectRefusesBadConfigBeforeDialing(t *testing.T) {
	t.Parallel()
	_, err := queue.Connect(ctx(t), queue.Config{URL: "http://x", Token: secretToken, User: "u", Password: secretPassword}, "test")
	if err == nil || !strings.HasPrefix(err.Error(), "nats configuration: url: ") {
		t.Fatalf("Connect: %v, want the configuration errors", err)
	}
	if strings.Contains(err.Error(), secretToken) || strings.Contains(err.Error(), secretPassword) {
		t.Fatalf("error contains a secret: %v", err)
	}
}

func TestConnectWithoutJetStream(t *testing.T) {
	t.Parallel()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	_, err = queue.Connect(ctx(t), queue.Config{URL: srv.ClientURL()}, "test-no-js")
	if err == nil {
		t.Fatal("Connect to a server without JetStream succeeded")
	}
	if !strings.Contains(err.Error(), "JetStream is not enabled") || !strings.Contains(err.Error(), srv.ClientURL()) {
		t.Fatalf("error %q should say JetStream is not enabled on the server", err)
	}
}

func TestConnectChecksServer(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	nc, err := queue.Connect(ctx(t), queue.Config{URL: srv.URL()}, "notifier-test")
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer nc.Close()
	if v := nc.ConnectedServerVersion(); v == "" {
		t.Fatal("no server version")
	}
	if got := nc.Opts.Name; got != "notifier-test" {
		t.Errorf("connection name %q", got)
	}
	if nc.Opts.MaxReconnect != -1 {
		t.Errorf("MaxReconnect %d, want -1 (forever)", nc.Opts.MaxReconnect)
	}
	// It reconnects after a server restart.
	srv.Restart()
	testenv.WaitFor(t, 10*time.Second, "reconnected after a restart", nc.IsConnected)
}
