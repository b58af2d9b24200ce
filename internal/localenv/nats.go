package localenv

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
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

// WithNATSTLS serves TLS with serverTLS, requires client certificates, and
// connects with clientTLS (ConnOptions).
func WithNATSTLS(serverTLS, clientTLS *tls.Config) NATSOption {
	return func(n *NATSServer) {
		n.clientTLS = clientTLS
		n.opts.TLSConfig = serverTLS
		n.opts.TLSVerify = true
		n.opts.TLSTimeout = 5
	}
}

// WithNATSSyncAlways makes the store sync every write, so a Stop loses
// nothing that was acknowledged (what the restart tests need; slower).
func WithNATSSyncAlways() NATSOption {
	return func(n *NATSServer) { n.opts.SyncAlways = true }
}

// WithoutNATSSyncAlways undoes WithNATSSyncAlways: the store syncs on the
// server's interval (a stop may lose the last writes).
func WithoutNATSSyncAlways() NATSOption {
	return func(n *NATSServer) { n.opts.SyncAlways = false }
}

// WithNATSListen serves on host:port instead of a free loopback port (port
// 0: a free port on host); a fixed port is tried once.
func WithNATSListen(host string, port int) NATSOption {
	return func(n *NATSServer) { n.opts.Host, n.opts.Port, n.fixedPort = host, port, port != 0 }
}

// WithNATSStore keeps the JetStream state under dir (dir/jetstream), which
// Close leaves in place, instead of a temporary directory it removes.
func WithNATSStore(dir string) NATSOption {
	return func(n *NATSServer) { n.opts.StoreDir = dir }
}

// WithNATSName names the server (its server_name).
func WithNATSName(name string) NATSOption {
	return func(n *NATSServer) { n.opts.ServerName = name }
}

// WithNATSLog passes the server's warnings and errors to log; its notices
// and traces are left out. Without it the server logs nothing.
func WithNATSLog(log *slog.Logger) NATSOption {
	return func(n *NATSServer) { n.log = log }
}

// NATSServer is an embedded nats-server with JetStream. Stop and Start keep
// the port and the store, so stream messages survive a restart. Its
// methods are safe for concurrent use.
type NATSServer struct {
	opts      server.Options
	clientTLS *tls.Config
	log       *slog.Logger
	fixedPort bool
	tempStore bool // opts.StoreDir is removed by Close

	mu  sync.Mutex
	srv *server.Server
}

// StartNATS starts an embedded JetStream server, on a free loopback port
// and a temporary store unless the options say otherwise. Close shuts it
// down.
func StartNATS(opts ...NATSOption) (*NATSServer, error) {
	n := newNATS(opts...)
	if n.opts.StoreDir == "" {
		dir, err := os.MkdirTemp("", "notifier-nats-*")
		if err != nil {
			return nil, fmt.Errorf("embedded NATS store: %w", err)
		}
		n.opts.StoreDir, n.tempStore = dir, true
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if !n.fixedPort {
			if n.opts.Port, err = FreePort(); err != nil {
				break
			}
		}
		if err = n.start(); err == nil || n.fixedPort {
			break
		}
	}
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("start embedded NATS: %w", err)
	}
	return n, nil
}

// newNATS is a server not yet started: the defaults, then opts.
func newNATS(opts ...NATSOption) *NATSServer {
	n := &NATSServer{opts: server.Options{
		ServerName: "notifier-embedded",
		Host:       "127.0.0.1",
		JetStream:  true,
		NoLog:      true,
		NoSigs:     true,
		MaxPayload: 1 << 20,
	}}
	for _, o := range opts {
		o(n)
	}
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
	if n.log != nil {
		srv.SetLoggerV2(natsLogger{n.log}, false, false, false)
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

// URL is the client URL, nats://<host>:<port> (tls:// with WithNATSTLS).
func (n *NATSServer) URL() string {
	scheme := "nats"
	if n.clientTLS != nil {
		scheme = "tls"
	}
	host := n.opts.Host
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(n.opts.Port))
}

// Port is the client port; it does not change across restarts.
func (n *NATSServer) Port() int { return n.opts.Port }

// StoreDir is the JetStream store directory; it survives restarts.
func (n *NATSServer) StoreDir() string { return n.opts.StoreDir }

// Name is the server's name.
func (n *NATSServer) Name() string { return n.opts.ServerName }

// Server returns the running embedded server, or nil while stopped.
func (n *NATSServer) Server() *server.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

// Stop shuts the server down (flushing its store); clients see a
// disconnect. The store is kept.
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

// Close stops the server and removes a temporary store.
func (n *NATSServer) Close() {
	n.Stop()
	if n.tempStore {
		_ = os.RemoveAll(n.opts.StoreDir)
	}
}

// Start starts a stopped server again on the same port and store. It
// retries for up to 5 s: the port may linger for a moment.
func (n *NATSServer) Start() error {
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = n.start(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("restart embedded NATS on port %d: %w", n.opts.Port, err)
}

// Restart is Stop then Start: the same port and store, messages kept.
func (n *NATSServer) Restart() error {
	n.Stop()
	return n.Start()
}

// ConnOptions are the client options that reach this server: its
// credentials (token or user and password, the client certificate under
// TLS) and reconnecting forever, every 50 ms.
func (n *NATSServer) ConnOptions() []nats.Option {
	opts := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}
	if n.opts.Authorization != "" {
		opts = append(opts, nats.Token(n.opts.Authorization))
	}
	if n.opts.Username != "" {
		opts = append(opts, nats.UserInfo(n.opts.Username, n.opts.Password))
	}
	if n.clientTLS != nil {
		opts = append(opts, nats.Secure(n.clientTLS))
	}
	return opts
}

// natsLogger passes an embedded server's warnings and errors to a slog
// logger; its notices and traces are left out.
type natsLogger struct{ log *slog.Logger }

func (l natsLogger) Noticef(string, ...any) {}
func (l natsLogger) Debugf(string, ...any)  {}
func (l natsLogger) Tracef(string, ...any)  {}
func (l natsLogger) Warnf(format string, v ...any) {
	l.log.Warn("nats-server: " + fmt.Sprintf(format, v...))
}
func (l natsLogger) Errorf(format string, v ...any) {
	l.log.Error("nats-server: " + fmt.Sprintf(format, v...))
}
func (l natsLogger) Fatalf(format string, v ...any) {
	l.log.Error("nats-server: " + fmt.Sprintf(format, v...))
}
