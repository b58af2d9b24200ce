package queue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// TestFleetStartsAtOnceOnAFreshCluster: processes started at the same
// moment on a fresh 3-node JetStream cluster (a Deployment of replicas, a
// unit on several hosts) all come up: creating the R3 streams and the
// queue consumers races without failing anyone.
func TestFleetStartsAtOnceOnAFreshCluster(t *testing.T) {
	t.Parallel()
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			c := testenv.NATSCluster(t, 3)
			cfg := queue.Config{URL: c.URLs()}.WithDefaults()
			start := make(chan struct{})
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := 0; i < n; i++ {
				nc := c.Conn()
				wg.Go(func() {
					js, err := jetstream.New(nc)
					if err != nil {
						errs <- err
						return
					}
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					<-start
					if err := queue.EnsureStreams(ctx, js, cfg, 3); err != nil {
						errs <- fmt.Errorf("ensure streams: %w", err)
						return
					}
					if _, err := queue.NewConsumer(ctx, js, cfg, queue.ConsumerConfig{}); err != nil {
						errs <- fmt.Errorf("consumer: %w", err)
					}
				})
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("a process failed to start: %v", err)
			}
		})
	}
}
