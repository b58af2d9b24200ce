package localenv

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSCluster is n embedded nats-server instances with JetStream, joined
// by routes into one cluster (a JetStream cluster for n >= 3: R3 streams,
// a meta leader elected by Raft). Each node is a *NATSServer of its own,
// with its own client port, cluster port and store directory, that can be
// stopped, started and restarted alone; a restarted node keeps its port
// and store and rejoins. Its methods are safe for concurrent use.
type NATSCluster struct {
	name  string
	dir   string
	Nodes []*NATSServer
}

// StartNATSCluster starts n JetStream servers joined into one cluster on
// free loopback ports (each configured further by opts), and returns once
// the JetStream meta leader is elected and every node is current with it.
// Node i is named "n<i>". Close shuts every node down.
func StartNATSCluster(n int, opts ...NATSOption) (*NATSCluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("a NATS cluster needs at least 1 node, got %d", n)
	}
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var c *NATSCluster
		if c, err = startNATSCluster(n, opts); err == nil {
			return c, nil
		}
	}
	return nil, fmt.Errorf("start a %d-node NATS cluster: %w", n, err)
}

// startNATSCluster configures and starts every node, then waits for the
// meta leader. On failure (a port taken meanwhile) it stops what it
// started.
func startNATSCluster(n int, opts []NATSOption) (*NATSCluster, error) {
	dir, err := os.MkdirTemp("", "notifier-nats-cluster-*")
	if err != nil {
		return nil, fmt.Errorf("NATS cluster store: %w", err)
	}
	c := &NATSCluster{dir: dir}
	clientPorts, clusterPorts := make([]int, n), make([]int, n)
	for i := range n {
		if clientPorts[i], err = FreePort(); err == nil {
			clusterPorts[i], err = FreePort()
		}
		if err != nil {
			c.Close()
			return nil, err
		}
	}
	c.name = "notifier-" + strconv.Itoa(clusterPorts[0])
	for i := range n {
		var routes []*url.URL
		for j := range n {
			if j != i {
				routes = append(routes, &url.URL{Scheme: "nats", Host: "127.0.0.1:" + strconv.Itoa(clusterPorts[j])})
			}
		}
		node := newNATS(opts...)
		node.opts.ServerName = "n" + strconv.Itoa(i)
		node.opts.Port = clientPorts[i]
		node.opts.StoreDir = filepath.Join(dir, strconv.Itoa(i))
		node.opts.Cluster = server.ClusterOpts{Name: c.name, Host: "127.0.0.1", Port: clusterPorts[i]}
		node.opts.Routes = routes
		c.Nodes = append(c.Nodes, node)
	}
	for i, node := range c.Nodes {
		if err := node.start(); err != nil {
			c.Close()
			return nil, fmt.Errorf("node %d: %w", i, err)
		}
	}
	if err := c.WaitForLeader(30 * time.Second); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close shuts every node down and removes their stores.
func (c *NATSCluster) Close() {
	for _, node := range c.Nodes {
		node.Stop()
	}
	_ = os.RemoveAll(c.dir)
}

// Name is the cluster's name (the servers' cluster.name).
func (c *NATSCluster) Name() string { return c.name }

// NodeIndex returns the index of the node whose server name is name ("n2"
// is 2), or -1.
func (c *NATSCluster) NodeIndex(name string) int {
	for i, node := range c.Nodes {
		if node.opts.ServerName == name {
			return i
		}
	}
	return -1
}

// URLs is the client URLs of every node, comma-joined: what a client (or
// the notifier's nats.url) is given to reach the cluster through any node.
func (c *NATSCluster) URLs() string {
	urls := make([]string, len(c.Nodes))
	for i, node := range c.Nodes {
		urls[i] = node.URL()
	}
	return strings.Join(urls, ",")
}

// WaitForLeader waits until the running nodes have elected a JetStream
// meta leader, each of them is current with it, and the leader sees every
// running node online; after a node's Start it means the node has
// rejoined.
func (c *NATSCluster) WaitForLeader(timeout time.Duration) error {
	err := WaitFor(timeout, func() error {
		leaders, running, online := 0, 0, 0
		for _, node := range c.Nodes {
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
	if err != nil {
		return fmt.Errorf("NATS cluster %s: %w", c.name, err)
	}
	return nil
}
