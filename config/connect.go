package config

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/queue"
)

// ConnectJetStream connects to NATS (cfg.NATS) as name and opens JetStream; with
// ensure it also creates or updates the streams. The caller closes the
// connection.
func ConnectJetStream(ctx context.Context, cfg Config, name string, ensure bool, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := queue.Connect(ctx, cfg.NATS, name, opts...)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	if ensure {
		if err := queue.EnsureStreams(ctx, js, cfg.NATS, cfg.NATS.Replicas); err != nil {
			nc.Close()
			return nil, nil, err
		}
	}
	return nc, js, nil
}

// Limits is the part of the configuration the limit sets need, as
// `notifier run` builds them and every operator read (inspect) does too.
func (cfg Config) Limits() limits.Config {
	maxCost := 1
	for _, p := range cfg.Providers {
		if p.Unit == "segments" {
			maxCost = max(maxCost, SegmentsMaxCost)
		}
	}
	return limits.Config{Prefix: cfg.Redis.KeyPrefix, DedupTTL: cfg.DedupTTL, Global: cfg.Global, MaxCost: maxCost}
}

// SegmentsMaxCost is the cost a segment-metered provider's cold start leaves
// room for (leaky.WithMaxCost): a 10-segment SMS. A longer message reserved
// just before Redis loses its state may overlap the first slot after it.
const SegmentsMaxCost = 10
