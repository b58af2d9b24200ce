package testenv_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/testenv"
)

// TestNATSClusterR3SurvivesNodeStop: an R3 stream on a three-node cluster
// keeps every message and takes new ones when its leader's node stops, and
// the node rejoins and catches up when it starts again.
func TestNATSClusterR3SurvivesNodeStop(t *testing.T) {
	t.Parallel()
	c := testenv.NATSCluster(t, 3)
	if got := strings.Count(c.URLs(), ","); got != 2 || c.Size() != 3 {
		t.Fatalf("URLs() = %q for %d nodes, want three comma-joined URLs", c.URLs(), c.Size())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3, Storage: jetstream.FileStorage,
	})
	if err != nil {
		t.Fatalf("create R3 stream: %v", err)
	}
	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			// A publish during the election after a stop may fail or time
			// out; it is retried (the stream's dedup makes a retry safe).
			var err error
			deadline := time.Now().Add(30 * time.Second)
			for {
				pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
				_, err = js.Publish(pctx, "r3.m", []byte(fmt.Sprintf("m-%d", i)), jetstream.WithMsgID(fmt.Sprintf("id-%d", i)))
				pcancel()
				if err == nil || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
	}
	publish(0, 50)

	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("stream cluster info %+v, want a leader and two replicas", info.Cluster)
	}
	leader := c.NodeIndex(info.Cluster.Leader)
	if leader < 0 {
		t.Fatalf("stream leader %q is not a node of the cluster", info.Cluster.Leader)
	}
	c.Node(leader).Stop()
	if c.Node(leader).Server() != nil {
		t.Fatal("a stopped node still has a server")
	}

	publish(50, 100)
	testenv.WaitFor(t, 30*time.Second, "a new stream leader", func() bool {
		info, err := s.Info(ctx)
		return err == nil && info.Cluster != nil && info.Cluster.Leader != "" && c.NodeIndex(info.Cluster.Leader) != leader
	})
	readAll := func() {
		t.Helper()
		for i := 0; i < 100; i++ {
			m, err := s.GetMsg(ctx, uint64(i+1))
			if err != nil {
				t.Fatalf("get message %d: %v", i+1, err)
			}
			if want := fmt.Sprintf("m-%d", i); string(m.Data) != want {
				t.Fatalf("message %d = %q, want %q", i+1, m.Data, want)
			}
		}
		info, err := s.Info(ctx)
		if err != nil || info.State.Msgs != 100 {
			t.Fatalf("stream holds %v messages (%v), want 100", info.State.Msgs, err)
		}
	}
	readAll()

	c.Node(leader).Start()
	c.WaitForLeader(30 * time.Second)
	testenv.WaitFor(t, 30*time.Second, "the restarted node current as a replica", func() bool {
		info, err := s.Info(ctx)
		if err != nil || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			return false
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Offline {
				return false
			}
		}
		return true
	})
	readAll()
}

// TestNATSClusterNodeConn: a connection to each node alone reaches the
// cluster's JetStream; the nodes are named n0..n2; a stream with more
// replicas than nodes is refused by the servers.
func TestNATSClusterNodeConn(t *testing.T) {
	t.Parallel()
	c := testenv.NATSCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; i < c.Size(); i++ {
		if c.NodeIndex(fmt.Sprintf("n%d", i)) != i {
			t.Fatalf("NodeIndex(n%d) = %d", i, c.NodeIndex(fmt.Sprintf("n%d", i)))
		}
		nc := c.Node(i).Conn()
		if got := nc.ConnectedUrl(); got != c.Node(i).URL() {
			t.Fatalf("node %d connection went to %s, want %s", i, got, c.Node(i).URL())
		}
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.AccountInfo(ctx); err != nil {
			t.Fatalf("node %d: JetStream account info: %v", i, err)
		}
	}
	if c.NodeIndex("nope") != -1 {
		t.Fatal("NodeIndex of an unknown name")
	}
	js, err := jetstream.New(c.Node(0).Conn())
	if err != nil {
		t.Fatal(err)
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "TOO_MANY", Subjects: []string{"x.>"}, Replicas: 5})
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an R5 stream on 3 nodes: %v, want the server's refusal", err)
	}
}
