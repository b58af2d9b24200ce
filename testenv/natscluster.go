package testenv

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// NATSClusterServer is n embedded nats-server instances with JetStream,
// joined by routes into one cluster (a JetStream cluster for n >= 3: R3
// streams, a meta leader elected by Raft). Each node is a *NATSServer of its
// own, with its own client port, cluster port and store directory, that can
// be stopped, started and restarted alone; a restarted node keeps its port
// and store and rejoins. Its methods are safe for concurrent use.
type NATSClusterServer struct {
	t     testing.TB
	name  string
	nodes []*NATSServer
}

// NATSCluster starts n JetStream servers joined into one cluster on free
// loopback ports, and returns once the JetStream meta leader is elected and
// every node is current with it. The servers shut down when the test ends.
func NATSCluster(t testing.TB, n int) *NATSClusterServer {
	t.Helper()
	if n < 1 {
		t.Fatalf("testenv: a NATS cluster needs at least 1 node, got %d", n)
	}
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var c *NATSClusterServer
		if c, err = startNATSCluster(t, n); err == nil {
			t.Cleanup(c.stop)
			return c
		}
	}
	t.Fatalf("testenv: start a %d-node NATS cluster: %v", n, err)
	return nil
}

// startNATSCluster configures and starts every node, then waits for the
// meta leader. On failure (a port taken meanwhile) it stops what it started.
func startNATSCluster(t testing.TB, n int) (*NATSClusterServer, error) {
	t.Helper()
	clientPorts, clusterPorts := make([]int, n), make([]int, n)
	for i := range n {
		clientPorts[i], clusterPorts[i] = FreePort(t), FreePort(t)
	}
	c := &NATSClusterServer{t: t, name: "testenv-" + strconv.Itoa(clusterPorts[0])}
	for i := range n {
		var routes []*url.URL
		for j := range n {
			if j != i {
				routes = append(routes, &url.URL{Scheme: "nats", Host: "127.0.0.1:" + strconv.Itoa(clusterPorts[j])})
			}
		}
		c.nodes = append(c.nodes, &NATSServer{t: t, opts: server.Options{
			ServerName: "n" + strconv.Itoa(i),
			Host:       "127.0.0.1",
			Port:       clientPorts[i],
			JetStream:  true,
			StoreDir:   t.TempDir(),
			SyncAlways: true,
			NoLog:      true,
			NoSigs:     true,
			MaxPayload: 1 << 20,
			Cluster: server.ClusterOpts{
				Name: c.name,
				Host: "127.0.0.1",
				Port: clusterPorts[i],
			},
			Routes: routes,
		}})
	}
	for i, node := range c.nodes {
		if err := node.start(); err != nil {
			c.stop()
			return nil, fmt.Errorf("node %d: %w", i, err)
		}
	}
	if err := c.waitForLeader(30 * time.Second); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// stop shuts every node down.
func (c *NATSClusterServer) stop() {
	for _, node := range c.nodes {
		node.Stop()
	}
}

// Size is the number of nodes, running or not.
func (c *NATSClusterServer) Size() int { return len(c.nodes) }

// Name is the cluster's name (the servers' cluster.name).
func (c *NATSClusterServer) Name() string { return c.name }

// Node returns node i (0-based): its URL, Port, Server and Conn reach that
// node alone; Stop, Start and Restart act on it alone. Its server name is
// "n<i>", which is what JetStream reports as a stream's leader or peer.
func (c *NATSClusterServer) Node(i int) *NATSServer {
	c.t.Helper()
	if i < 0 || i >= len(c.nodes) {
		c.t.Fatalf("testenv: node %d of a %d-node NATS cluster", i, len(c.nodes))
	}
	return c.nodes[i]
}

// NodeIndex returns the index of the node whose server name is name ("n2"
// is 2), or -1.
func (c *NATSClusterServer) NodeIndex(name string) int {
	for i, node := range c.nodes {
		if node.opts.ServerName == name {
			return i
		}
	}
	return -1
}

// URLs is the client URLs of every node, comma-joined: what a client (or
// the notifier's nats.url) is given to reach the cluster through any node.
func (c *NATSClusterServer) URLs() string {
	urls := make([]string, len(c.nodes))
	for i, node := range c.nodes {
		urls[i] = node.URL()
	}
	return strings.Join(urls, ",")
}

// Conn connects a new client to the cluster through any node (it moves to
// another node when its server stops) that reconnects forever, and closes
// it when the test ends. Extra options are applied last.
func (c *NATSClusterServer) Conn(extra ...nats.Option) *nats.Conn {
	c.t.Helper()
	opts := append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, extra...)
	nc, err := nats.Connect(c.URLs(), opts...)
	if err != nil {
		c.t.Fatalf("testenv: connect to the NATS cluster: %v", err)
	}
	c.t.Cleanup(nc.Close)
	return nc
}

// WaitForLeader waits until the running nodes have elected a JetStream meta
// leader and each of them is current with it; after a node's Start it
// means the node has rejoined. It fails the test after timeout.
func (c *NATSClusterServer) WaitForLeader(timeout time.Duration) {
	c.t.Helper()
	if err := c.waitForLeader(timeout); err != nil {
		c.t.Fatalf("testenv: NATS cluster %s: %v", c.name, err)
	}
}

func (c *NATSClusterServer) waitForLeader(timeout time.Duration) error {
	return waitFor(timeout, func() error {
		leaders, running, online := 0, 0, 0
		for _, node := range c.nodes {
			srv := node.Server()
			if srv == nil {
				continue
			}
			running++
			if !srv.JetStreamIsCurrent() {
				return fmt.Errorf("node %s is not current with the JetStream meta group", srv.Name())
			}
			if srv.JetStreamIsLeader() {
				leaders++
				// The peers the leader can place replicas on: online,
				// with JetStream, their stats received. Until every
				// running node is among them, an R3 stream is refused
				// ("no suitable peers for placement, peer offline").
				online = len(srv.JetStreamClusterPeers())
			}
		}
		switch {
		case running == 0:
			return errors.New("no node is running")
		case leaders != 1:
			return fmt.Errorf("%d JetStream meta leaders among %d running nodes", leaders, running)
		case online < running:
			return fmt.Errorf("the meta leader sees %d of %d running nodes online", online, running)
		}
		return nil
	})
}
