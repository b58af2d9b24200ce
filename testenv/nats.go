package testenv

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/notifier/notifier/internal/localenv"
)

// NATSOption configures an embedded NATS server.
type NATSOption func(testing.TB) localenv.NATSOption

// WithNATSToken requires clients to present token.
func WithNATSToken(token string) NATSOption {
	return func(testing.TB) localenv.NATSOption { return localenv.WithNATSToken(token) }
}

// WithNATSNoSync stores without syncing every write, for a test that
// stores 100,000 messages to measure what reads them (seconds, where a
// sync a write takes half a minute); a Stop may then lose the last writes.
func WithNATSNoSync() NATSOption {
	return func(testing.TB) localenv.NATSOption { return localenv.WithoutNATSSyncAlways() }
}

// WithNATSUser requires clients to log in as user with password.
func WithNATSUser(user, password string) NATSOption {
	return func(testing.TB) localenv.NATSOption { return localenv.WithNATSUser(user, password) }
}

// WithNATSTLS serves TLS with the server certificate of certs and requires
// client certificates signed by its CA.
func WithNATSTLS(certs *Certs) NATSOption {
	return func(t testing.TB) localenv.NATSOption {
		return localenv.WithNATSTLS(certs.ServerTLS(t), certs.ClientTLS())
	}
}

// NATSServer is an embedded nats-server with JetStream on a temporary store
// (localenv.NATSServer) whose failures fail the test. Stop and Start keep
// the port and the store, so stream messages survive a restart; the store
// syncs every write (SyncAlways) so a stop loses nothing that was
// acknowledged.
type NATSServer struct {
	*localenv.NATSServer
	t testing.TB
}

// NATS starts an embedded JetStream server on a free loopback port and shuts
// it down when the test ends.
func NATS(t testing.TB, opts ...NATSOption) *NATSServer {
	t.Helper()
	lo := []localenv.NATSOption{localenv.WithNATSName("test"), localenv.WithNATSSyncAlways()}
	for _, o := range opts {
		lo = append(lo, o(t))
	}
	n, err := localenv.StartNATS(lo...)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(n.Close)
	return &NATSServer{NATSServer: n, t: t}
}

// Start starts a stopped server again on the same port and store.
func (n *NATSServer) Start() {
	n.t.Helper()
	if err := n.NATSServer.Start(); err != nil {
		n.t.Fatalf("testenv: %v", err)
	}
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
	nc, err := nats.Connect(n.URL(), append(n.ConnOptions(), extra...)...)
	if err != nil {
		n.t.Fatalf("testenv: connect to embedded NATS: %v", err)
	}
	n.t.Cleanup(nc.Close)
	return nc
}

// NATSClusterServer is n embedded nats-server instances with JetStream
// (localenv.NATSCluster), joined by routes into one cluster, whose
// failures fail the test. Each node can be stopped, started and restarted
// alone; a restarted node keeps its port and store and rejoins.
type NATSClusterServer struct {
	c     *localenv.NATSCluster
	t     testing.TB
	nodes []*NATSServer
}

// NATSCluster starts n JetStream servers joined into one cluster on free
// loopback ports, and returns once the JetStream meta leader is elected and
// every node is current with it. The servers shut down when the test ends.
func NATSCluster(t testing.TB, n int) *NATSClusterServer {
	t.Helper()
	c, err := localenv.StartNATSCluster(n, localenv.WithNATSSyncAlways())
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(c.Close)
	w := &NATSClusterServer{c: c, t: t}
	for _, node := range c.Nodes {
		w.nodes = append(w.nodes, &NATSServer{NATSServer: node, t: t})
	}
	return w
}

// Size is the number of nodes, running or not.
func (c *NATSClusterServer) Size() int { return len(c.nodes) }

// Name is the cluster's name (the servers' cluster.name).
func (c *NATSClusterServer) Name() string { return c.c.Name() }

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
func (c *NATSClusterServer) NodeIndex(name string) int { return c.c.NodeIndex(name) }

// URLs is the client URLs of every node, comma-joined: what a client (or
// the notifier's nats.url) is given to reach the cluster through any node.
func (c *NATSClusterServer) URLs() string { return c.c.URLs() }

// Conn connects a new client to the cluster through any node (it moves to
// another node when its server stops) that reconnects forever, and closes
// it when the test ends. Extra options are applied last.
func (c *NATSClusterServer) Conn(extra ...nats.Option) *nats.Conn {
	c.t.Helper()
	opts := append(c.nodes[0].ConnOptions(), extra...)
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
	if err := c.c.WaitForLeader(timeout); err != nil {
		c.t.Fatalf("testenv: %v", err)
	}
}
