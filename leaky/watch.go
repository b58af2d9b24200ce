package leaky

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// PauseChannel is the Redis pub/sub channel on which Redis.Pause announces
// every pause of a provider, for the keys under prefix.
func PauseChannel(prefix string) string { return prefix + "leaky:pauses" }

// PauseWatcher is one process's view of its providers' pauses, kept without
// a round trip per job: it hears every pause the fleet sets through Redis
// pub/sub (PauseChannel), and reads each provider's pause again whenever
// its subscription (re)starts, so a pause set while it was disconnected is
// not missed. A pause announced while the subscription is down for a
// moment is seen at the resubscription; a send in between may meet the
// provider's 429, which pauses it again.
//
// A PauseWatcher is safe for concurrent use. Its zero value is not usable;
// call NewPauseWatcher.
type PauseWatcher struct {
	now func() time.Time

	mu    sync.Mutex
	until map[string]time.Time
}

// NewPauseWatcher returns an empty view; now nil means time.Now.
func NewPauseWatcher(now func() time.Time) *PauseWatcher {
	if now == nil {
		now = time.Now
	}
	return &PauseWatcher{now: now, until: map[string]time.Time{}}
}

// PausedFor is how long the provider's pause still lasts, as far as this
// process knows; 0 when none.
func (w *PauseWatcher) PausedFor(provider string) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if d := w.until[provider].Sub(w.now()); d > 0 {
		return d
	}
	return 0
}

// Note records a pause of d from now (a 429 this process saw itself, or an
// announcement). A pause only grows.
func (w *PauseWatcher) Note(provider string, d time.Duration) {
	if d <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if end := w.now().Add(d); end.After(w.until[provider]) {
		w.until[provider] = end
	}
}

// Subscriber is what Run needs of a Redis client: *redis.Client and
// *redis.ClusterClient have it.
type Subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// Run listens to the announcements of q's pauses until ctx ends. Each time
// the subscription starts (and after every reconnection) it reads the
// pauses of providers from q. It returns nil when ctx ends.
func (w *PauseWatcher) Run(ctx context.Context, sub Subscriber, q *Redis, providers []string) error {
	ps := sub.Subscribe(ctx, PauseChannel(q.prefix))
	defer ps.Close()
	ch := ps.ChannelWithSubscriptions(redis.WithChannelHealthCheckInterval(5 * time.Second))
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-ch:
			if !ok {
				return nil
			}
			switch m := m.(type) {
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					w.resync(ctx, q, providers)
				}
			case *redis.Message:
				w.apply(m.Payload)
			}
		}
	}
}

// resync reads every provider's pause (at a (re)subscription).
func (w *PauseWatcher) resync(ctx context.Context, q *Redis, providers []string) {
	for _, p := range providers {
		d, err := q.PausedFor(ctx, p)
		switch {
		case err != nil:
		case d > 0:
			w.Note(p, d)
		default:
			// Lifted while the subscription was down (a resume whose
			// announcement was missed): Redis holds no pause, so neither
			// does this process.
			w.Clear(p)
		}
	}
}

// apply reads an announcement "<µs> <provider>" ("0 <provider>": the
// pause was lifted); a malformed one is ignored.
func (w *PauseWatcher) apply(payload string) {
	us, provider, ok := strings.Cut(payload, " ")
	if !ok || provider == "" {
		return
	}
	n, err := strconv.ParseInt(us, 10, 64)
	switch {
	case err != nil || n < 0:
		return
	case n == 0:
		w.Clear(provider)
	default:
		w.Note(provider, time.Duration(n)*time.Microsecond)
	}
}

// Clear forgets the provider's pause (it was lifted: Queue.Resume).
func (w *PauseWatcher) Clear(provider string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.until, provider)
}
