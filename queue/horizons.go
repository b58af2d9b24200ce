package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// HorizonBucket is the JetStream key-value bucket in which every process
// keeps how far ahead it handed out each provider's send slots: the end of
// the latest slot it reserved. It lives in JetStream, not Redis, so that a
// Redis that lost its state can be told from a provider never started (see
// dispatch: the cold start).
const HorizonBucket = "NOTIFY_HORIZON"

// horizonTTL is how long a process's horizon is kept after its last write:
// longer than the longest max_queue_delay (24 h), so a horizon still ahead
// is never forgotten.
const horizonTTL = 25 * time.Hour

// Horizons is the horizon bucket. It is safe for concurrent use.
type Horizons struct {
	kv jetstream.KeyValue
}

// OpenHorizons opens the horizon bucket, creating it (with replicas) when
// it does not exist; like the streams, its set-up is retried while a fresh
// cluster is busy.
func OpenHorizons(ctx context.Context, js jetstream.JetStream, replicas int) (*Horizons, error) {
	var h *Horizons
	err := retryStart(ctx, "key-value bucket "+HorizonBucket, func(ctx context.Context) error {
		kv, err := apiCall(ctx, func(ctx context.Context) (jetstream.KeyValue, error) { return js.KeyValue(ctx, HorizonBucket) })
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = apiCall(ctx, func(ctx context.Context) (jetstream.KeyValue, error) {
				return js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
					Bucket: HorizonBucket, Description: "notifier: how far ahead each process handed out each provider's send slots",
					History: 1, TTL: horizonTTL, Replicas: max(1, replicas),
				})
			})
			if errors.Is(err, jetstream.ErrBucketExists) {
				kv, err = apiCall(ctx, func(ctx context.Context) (jetstream.KeyValue, error) { return js.KeyValue(ctx, HorizonBucket) })
			}
		}
		if err != nil {
			return err
		}
		h = &Horizons{kv: kv}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", HorizonBucket, err)
	}
	return h, nil
}

// horizonToken makes s a key token: the characters a key allows other than
// '.', with '.' written '=' and anything else '_'. Provider names
// ([A-Za-z0-9._-]) map one to one.
func horizonToken(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '.':
			return '='
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, s)
}

// Note records that instance handed out provider's slots up to end.
func (h *Horizons) Note(ctx context.Context, provider, instance string, end time.Time) error {
	key := horizonToken(provider) + "." + horizonToken(instance)
	if _, err := h.kv.PutString(ctx, key, strconv.FormatInt(end.UnixMicro(), 10)); err != nil {
		return fmt.Errorf("note the slot horizon of %s: %w", provider, err)
	}
	return nil
}

// Read is provider's horizon over every process: the end of the latest
// slot any of them noted, and when the latest note was written (the
// server's time). found is false when no process ever noted one (within
// the bucket's 25 h).
func (h *Horizons) Read(ctx context.Context, provider string) (end, written time.Time, found bool, err error) {
	lister, err := h.kv.ListKeysFiltered(ctx, horizonToken(provider)+".*")
	if err != nil {
		return end, written, false, fmt.Errorf("read the slot horizon of %s: %w", provider, err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	for _, k := range keys {
		e, err := h.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // expired or deleted meanwhile
		}
		if err != nil {
			return end, written, false, fmt.Errorf("read the slot horizon of %s: %w", provider, err)
		}
		us, err := strconv.ParseInt(string(e.Value()), 10, 64)
		if err != nil {
			continue // not ours
		}
		found = true
		if t := time.UnixMicro(us); t.After(end) {
			end = t
		}
		if e.Created().After(written) {
			written = e.Created()
		}
	}
	return end, written, found, nil
}
