package main

import (
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// embeddedNATS is an in-process nats-server with JetStream on a temporary
// store, for `demo` and `bench`: nothing to install, nothing left behind.
type embeddedNATS struct {
	srv *server.Server
	dir string
}

// startEmbeddedNATS starts the server on a free loopback port.
func startEmbeddedNATS() (*embeddedNATS, error) {
	dir, err := os.MkdirTemp("", "notifier-nats-*")
	if err != nil {
		return nil, fmt.Errorf("embedded NATS store: %w", err)
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "notifier-embedded",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   dir,
		NoLog:      true,
		NoSigs:     true,
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("embedded NATS did not start within 10s")
	}
	return &embeddedNATS{srv: srv, dir: dir}, nil
}

func (e *embeddedNATS) URL() string { return e.srv.ClientURL() }

// Close shuts the server down and removes its store.
func (e *embeddedNATS) Close() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	_ = os.RemoveAll(e.dir)
}
