package testenv

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// NATSOption configures an embedded NATS server.
type NATSOption func(*NATSServer)

// WithNATSToken requires clients to present token.
func WithNATSToken(token string) NATSOption {
	return func(n *NATSServer) { n.opts.Authorization = token }
}

// WithNATSUser requires clients to log in as user with password.
func WithNATSUser(user, password string) NATSOption {
	return func(n *NATSServer) { n.opts.Username, n.opts.Password = user, password }
}

// WithNATSTLS serves TLS with the server certificate of certs and requires
// client certificates signed by its CA.
func WithNATSTLS(certs *Certs) NATSOption {
	return func(n *NATSServer) {
		n.certs = certs
		n.opts.TLSConfig = certs.ServerTLS(n.t)
		n.opts.TLSVerify = true
		n.opts.TLSTimeout = 5
	}
}

// NATSServer is an embedded nats-server with JetStream on a temporary store.
// Stop and Start keep the port and the store, so stream messages survive a
// restart; the store syncs every write (SyncAlways) so a stop loses nothing
// that was acknowledged. Its methods are safe for concurrent use.
type NATSServer struct {
	t     testing.TB
	opts  server.Options
	certs *Certs

	mu  sync.Mutex
	srv *server.Server
}

// NATS starts an embedded JetStream server on a free loopback port and shuts
// it down when the test ends.
func NATS(t testing.TB, opts ...NATSOption) *NATSServer {
	t.Helper()
	n := &NATSServer{t: t, opts: server.Options{
		ServerName: "test",
		Host:       "127.0.0.1",
		JetStream:  true,
		StoreDir:   t.TempDir(),
		SyncAlways: true,
		NoLog:      true,
		NoSigs:     true,
		MaxPayload: 1 << 20,
	}}
	for _, o := range opts {
		o(n)
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		n.opts.Port = FreePort(t)
		if err = n.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("testenv: start embedded NATS: %v", err)
	}
	t.Cleanup(n.Stop)
	return n
}

func (n *NATSServer) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		return nil
	}
	opts := n.opts // the server keeps and mutates its copy
	srv, err := server.NewServer(&opts)
	if err != nil {
		return fmt.Errorf("configure nats-server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return fmt.Errorf("nats-server on port %d not ready after 10s", n.opts.Port)
	}
	n.srv = srv
	return nil
}

// URL is the client URL, nats://127.0.0.1:<port> (tls:// with WithNATSTLS).
func (n *NATSServer) URL() string {
	scheme := "nats"
	if n.certs != nil {
		scheme = "tls"
	}
	return scheme + "://127.0.0.1:" + strconv.Itoa(n.opts.Port)
}

// Port is the client port; it does not change across restarts.
func (n *NATSServer) Port() int { return n.opts.Port }

// StoreDir is the JetStream store directory; it survives restarts.
func (n *NATSServer) StoreDir() string { return n.opts.StoreDir }

// Server returns the running embedded server, or nil while stopped.
func (n *NATSServer) Server() *server.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

// Stop shuts the server down; clients see a disconnect. The store is kept.
func (n *NATSServer) Stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv == nil {
		return
	}
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
	n.srv = nil
}

// Start starts a stopped server again on the same port and store.
func (n *NATSServer) Start() {
	n.t.Helper()
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = n.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	n.t.Fatalf("testenv: restart embedded NATS on port %d: %v", n.opts.Port, err)
}

// Restart is Stop then Start: the same port and store, messages kept.
func (n *NATSServer) Restart() {
	n.t.Helper()
	n.Stop()
	n.Start()
}

// Conn connects a new client with the server's credentials (token or user
// and password, and the client certificate under TLS) that reconnects
// forever, and closes it when the test ends. Extra options are applied
// last.
func (n *NATSServer) Conn(extra ...nats.Option) *nats.Conn {
	n.t.Helper()
	opts := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}
	if n.opts.Authorization != "" {
		opts = append(opts, nats.Token(n.opts.Authorization))
	}
	if n.opts.Username != "" {
		opts = append(opts, nats.UserInfo(n.opts.Username, n.opts.Password))
	}
	if n.certs != nil {
		opts = append(opts, nats.Secure(n.certs.ClientTLS()))
	}
	nc, err := nats.Connect(n.URL(), append(opts, extra...)...)
	if err != nil {
		n.t.Fatalf("testenv: connect to embedded NATS: %v", err)
	}
	n.t.Cleanup(nc.Close)
	return nc
}
