package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Why a provider is paused: the reason label of notifier_provider_paused.
const (
	// PauseRateLimited: the provider answered 429 (or its protocol's
	// equivalent) for the whole provider; the pause lasts its Retry-After,
	// at most max_pause.
	PauseRateLimited = "rate_limited"
	// PauseCredentials: the provider refused the sender (its credentials,
	// the account, the sender id). The pause lasts max_pause, after which
	// one send probes again; a reload of the configuration or `notifier
	// resume` lifts it at once.
	PauseCredentials = "credentials"
)

// AllPauseReasons are the reasons the gauge knows, in a fixed order.
func AllPauseReasons() []string { return []string{PauseRateLimited, PauseCredentials} }

// PauseReasons keeps, fleet-wide, which providers' pauses are for their
// credentials. A pause without a reason recorded is a rate limit's. The
// pause itself lives in the provider's leaky queue; the reason outlives it
// by a second at most.
type PauseReasons interface {
	// SetCredentials records that provider's pause, for d, is for its
	// credentials.
	SetCredentials(ctx context.Context, provider string, d time.Duration) error
	// Reason is PauseCredentials while that is recorded, else
	// PauseRateLimited.
	Reason(ctx context.Context, provider string) (string, error)
	// Clear forgets the reason (the pause was lifted).
	Clear(ctx context.Context, provider string) error
	// TryProbe takes the fleet's one probe of provider for interval: true
	// for the one caller that gets it (SPEC §6: a provider paused for its
	// credentials is probed once per probe_interval, fleet-wide).
	TryProbe(ctx context.Context, provider string, interval time.Duration) (bool, error)
}

// RedisPauseReasons keeps the reasons in Redis, beside each provider's
// leaky queue (the key shares its hash tag), under prefix.
func RedisPauseReasons(rdb redis.UniversalClient, prefix string) PauseReasons {
	return redisReasons{rdb: rdb, prefix: prefix}
}

type redisReasons struct {
	rdb    redis.UniversalClient
	prefix string
}

// pauseReasonKey is {<prefix>p:<provider>}:pause_reason, in the slot of the
// leaky queue's keys ({<prefix>p:<provider>}:tat and :pause).
func pauseReasonKey(prefix, provider string) string {
	return "{" + prefix + "p:" + provider + "}:pause_reason"
}

func (r redisReasons) SetCredentials(ctx context.Context, provider string, d time.Duration) error {
	if err := r.rdb.Set(ctx, pauseReasonKey(r.prefix, provider), PauseCredentials, d+time.Second).Err(); err != nil {
		return fmt.Errorf("record pause reason of %s: %w", provider, err)
	}
	return nil
}

func (r redisReasons) Reason(ctx context.Context, provider string) (string, error) {
	v, err := r.rdb.Get(ctx, pauseReasonKey(r.prefix, provider)).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return PauseRateLimited, nil
	case err != nil:
		return "", fmt.Errorf("read pause reason of %s: %w", provider, err)
	case v == PauseCredentials:
		return PauseCredentials, nil
	}
	return PauseRateLimited, nil
}

func (r redisReasons) TryProbe(ctx context.Context, provider string, interval time.Duration) (bool, error) {
	ok, err := r.rdb.SetNX(ctx, "{"+r.prefix+"p:"+provider+"}:probe", "1", interval).Result()
	if err != nil {
		return false, fmt.Errorf("take the probe of %s: %w", provider, err)
	}
	return ok, nil
}

func (r redisReasons) Clear(ctx context.Context, provider string) error {
	if err := r.rdb.Del(ctx, pauseReasonKey(r.prefix, provider)).Err(); err != nil {
		return fmt.Errorf("clear pause reason of %s: %w", provider, err)
	}
	return nil
}

// MemoryPauseReasons keeps the reasons in this process (local limits, the
// demo); now nil means time.Now.
func MemoryPauseReasons(now func() time.Time) PauseReasons {
	if now == nil {
		now = time.Now
	}
	return &memoryReasons{now: now, until: map[string]time.Time{}}
}

type memoryReasons struct {
	now    func() time.Time
	mu     sync.Mutex
	until  map[string]time.Time
	probes map[string]time.Time // provider → the probe taken until
}

func (m *memoryReasons) TryProbe(_ context.Context, provider string, interval time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.probes == nil {
		m.probes = map[string]time.Time{}
	}
	if now := m.now(); now.Before(m.probes[provider]) {
		return false, nil
	} else {
		m.probes[provider] = now.Add(interval)
	}
	return true, nil
}

func (m *memoryReasons) SetCredentials(_ context.Context, provider string, d time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.until[provider] = m.now().Add(d + time.Second)
	return nil
}

func (m *memoryReasons) Reason(_ context.Context, provider string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if until, ok := m.until[provider]; ok {
		if m.now().Before(until) {
			return PauseCredentials, nil
		}
		delete(m.until, provider)
	}
	return PauseRateLimited, nil
}

func (m *memoryReasons) Clear(_ context.Context, provider string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.until, provider)
	return nil
}
