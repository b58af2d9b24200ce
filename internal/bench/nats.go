package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/internal/localenv"
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
		c, err := localenv.StartNATSCluster(3)
		if err != nil {
			return nil, err
		}
		return &benchNATS{url: c.URLs(), replicas: 3, close: c.Close,
			desc: fmt.Sprintf("embedded 3-node JetStream cluster, nats-server %s, joined by routes, streams at 3 replicas (R3)", server.VERSION)}, nil
	default:
		srv, err := localenv.StartNATS()
		if err != nil {
			return nil, err
		}
		return &benchNATS{url: srv.URL(), replicas: 1, close: srv.Close,
			desc: fmt.Sprintf("embedded nats-server %s, JetStream file store", server.VERSION)}, nil
	}
}

// connect opens a client connection named name.
func (n *benchNATS) connect(ctx context.Context, name string) (*nats.Conn, jetstream.JetStream, error) {
	return config.ConnectJetStream(ctx, config.Config{NATS: queue.Config{URL: n.url}}, name, false)
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
