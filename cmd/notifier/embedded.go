package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// embeddedNATS is an in-process nats-server with JetStream: on a temporary
// store for `demo` and `bench` (nothing to install, nothing left behind),
// on a kept directory and a fixed port for `dev`.
type embeddedNATS struct {
	srv  *server.Server
	dir  string
	temp bool // dir is removed by Close
}

// startEmbeddedNATS starts the server on a free loopback port and a
// temporary store.
func startEmbeddedNATS() (*embeddedNATS, error) {
	dir, err := os.MkdirTemp("", "notifier-nats-*")
	if err != nil {
		return nil, fmt.Errorf("embedded NATS store: %w", err)
	}
	n, err := startNATSServer(natsServerOptions{name: "notifier-embedded", host: "127.0.0.1", port: server.RANDOM_PORT, storeDir: dir})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	n.temp = true
	return n, nil
}

// natsServerOptions are what differs between the embedded servers.
type natsServerOptions struct {
	name     string
	host     string
	port     int    // server.RANDOM_PORT for any free one
	storeDir string // JetStream keeps its state under storeDir/jetstream
	log      *slog.Logger
}

// startNATSServer starts a JetStream server as o says and waits until it
// takes connections. Its own warnings and errors go to o.log, if set.
func startNATSServer(o natsServerOptions) (*embeddedNATS, error) {
	srv, err := server.NewServer(&server.Options{
		ServerName: o.name,
		Host:       o.host,
		Port:       o.port,
		JetStream:  true,
		StoreDir:   o.storeDir,
		NoLog:      true,
		NoSigs:     true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	if o.log != nil {
		srv.SetLoggerV2(natsLogger{o.log}, false, false, false)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("embedded NATS did not start within 10s")
	}
	return &embeddedNATS{srv: srv, dir: o.storeDir}, nil
}

func (e *embeddedNATS) URL() string { return e.srv.ClientURL() }

// Close shuts the server down (flushing its store) and removes a
// temporary store.
func (e *embeddedNATS) Close() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	if e.temp {
		_ = os.RemoveAll(e.dir)
	}
}

// natsLogger passes an embedded server's warnings and errors to the
// notifier's log; its notices and traces are left out.
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

// portTakenError is a listen address another process holds.
type portTakenError struct {
	what, addr, flag string
	err              error
}

func (e *portTakenError) Error() string {
	return fmt.Sprintf("%s %s is already in use (another process listens there); stop it, or give %s another address, such as %s, or port 0 for any free one",
		e.what, e.addr, e.flag, nextPort(e.addr))
}

func (e *portTakenError) Unwrap() error { return e.err }

// nextPort is addr with its port plus one: a suggestion.
func nextPort(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	n, perr := strconv.Atoi(port)
	if err != nil || perr != nil || n <= 0 || n >= 65535 {
		return "127.0.0.1:4223"
	}
	return net.JoinHostPort(host, strconv.Itoa(n+1))
}

// checkFree fails with a *portTakenError, naming what listens there and
// the flag that moves it, when addr cannot be listened on because another
// process holds it. nats-server binds its port only once started, and then
// only logs the failure: this check turns it into an error at once.
func checkFree(what, addr, flag string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return &portTakenError{what: what, addr: addr, flag: flag, err: syscall.EADDRINUSE}
		}
		return fmt.Errorf("listen for %s on %s (%s): %w", what, addr, flag, err)
	}
	return ln.Close()
}
