package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/queue"
)

// benchNATS is the JetStream the bench runs on: an embedded server, an
// embedded three-node cluster (--cluster), or a server the user pointed it
// at with --nats-url.
type benchNATS struct {
	url      string // client URLs, comma-separated
	desc     string
	replicas int // of the bench's streams
	external bool
	close    func()
}

// startBenchNATS starts (or connects to) what the flags ask for.
func startBenchNATS(natsURL string, cluster bool) (*benchNATS, error) {
	switch {
	case natsURL != "":
		n := &benchNATS{url: natsURL, replicas: 1, external: true, close: func() {}}
		n.desc = "nats-server at " + natsURL + " (--nats-url)"
		if cluster {
			n.replicas = 3
			n.desc += ", streams at 3 replicas"
		}
		return n, nil
	case cluster:
		c, err := startEmbeddedCluster(3)
		if err != nil {
			return nil, err
		}
		return &benchNATS{url: c.URLs(), replicas: 3, close: c.Close,
			desc: fmt.Sprintf("embedded 3-node JetStream cluster, nats-server %s, joined by routes, streams at 3 replicas (R3)", server.VERSION)}, nil
	default:
		srv, err := startEmbeddedNATS()
		if err != nil {
			return nil, err
		}
		return &benchNATS{url: srv.URL(), replicas: 1, close: srv.Close,
			desc: fmt.Sprintf("embedded nats-server %s, JetStream file store", server.VERSION)}, nil
	}
}

// connect opens a client connection named name.
func (n *benchNATS) connect(ctx context.Context, name string) (*nats.Conn, jetstream.JetStream, error) {
	return connectJetStream(ctx, Config{NATS: queue.Config{URL: n.url}}, name, false)
}

// checkEmpty refuses to run on a server whose job stream holds jobs: the
// bench consumes notify.jobs.* and would take them. It reports whether the
// stream exists.
func checkEmpty(ctx context.Context, js jetstream.JetStream, qcfg queue.Config) (exists bool, err error) {
	s, err := js.Stream(ctx, qcfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up stream %s: %w", qcfg.Stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return true, fmt.Errorf("stream %s info: %w", qcfg.Stream, err)
	}
	if info.State.Msgs > 0 {
		return true, fmt.Errorf("stream %s on %s holds %d jobs: the bench consumes notify.jobs.* and would take them; point --nats-url at a server for benchmarking", qcfg.Stream, queue.RedactURLs(qcfg.URL), info.State.Msgs)
	}
	return true, nil
}

// deleteStreams removes the job streams the bench created on a server it
// was pointed at.
func deleteStreams(ctx context.Context, js jetstream.JetStream, qcfg queue.Config) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, name := range []string{qcfg.Stream, qcfg.DeadStream} {
		_ = js.DeleteStream(ctx, name)
	}
}

// embeddedCluster is n in-process nats-servers with JetStream joined by
// routes into one cluster, each with its own store.
type embeddedCluster struct {
	srvs []*server.Server
	dir  string
}

// startEmbeddedCluster starts n servers on free loopback ports and waits
// until they have elected a JetStream meta leader.
func startEmbeddedCluster(n int) (*embeddedCluster, error) {
	dir, err := os.MkdirTemp("", "notifier-bench-nats-*")
	if err != nil {
		return nil, fmt.Errorf("embedded NATS cluster store: %w", err)
	}
	c := &embeddedCluster{dir: dir}
	ports := make([]int, n)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			c.Close()
			return nil, err
		}
	}
	name := "notifier-bench-" + strconv.Itoa(ports[0])
	for i := range n {
		var routes []*url.URL
		for j, p := range ports {
			if j != i {
				routes = append(routes, &url.URL{Scheme: "nats", Host: "127.0.0.1:" + strconv.Itoa(p)})
			}
		}
		srv, err := server.NewServer(&server.Options{
			ServerName: "bench-" + strconv.Itoa(i),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			JetStream:  true,
			StoreDir:   filepath.Join(dir, strconv.Itoa(i)),
			NoLog:      true,
			NoSigs:     true,
			Cluster:    server.ClusterOpts{Name: name, Host: "127.0.0.1", Port: ports[i]},
			Routes:     routes,
		})
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("embedded NATS cluster node %d: %w", i, err)
		}
		go srv.Start()
		c.srvs = append(c.srvs, srv)
	}
	for i, srv := range c.srvs {
		if !srv.ReadyForConnections(10 * time.Second) {
			c.Close()
			return nil, fmt.Errorf("embedded NATS cluster node %d did not start within 10s", i)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for !c.ready() {
		if time.Now().After(deadline) {
			c.Close()
			return nil, errors.New("embedded NATS cluster: no JetStream meta leader elected within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c, nil
}

// ready reports whether one node leads the JetStream meta group and every
// node is current with it.
func (c *embeddedCluster) ready() bool {
	leaders := 0
	for _, srv := range c.srvs {
		if !srv.JetStreamIsCurrent() {
			return false
		}
		if srv.JetStreamIsLeader() {
			leaders++
		}
	}
	return leaders == 1
}

// URLs is the nodes' client URLs, comma-separated.
func (c *embeddedCluster) URLs() string {
	urls := make([]string, len(c.srvs))
	for i, srv := range c.srvs {
		urls[i] = srv.ClientURL()
	}
	return strings.Join(urls, ",")
}

// Close shuts every node down and removes the stores.
func (c *embeddedCluster) Close() {
	for _, srv := range c.srvs {
		srv.Shutdown()
	}
	for _, srv := range c.srvs {
		srv.WaitForShutdown()
	}
	_ = os.RemoveAll(c.dir)
}

// freePort is a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
