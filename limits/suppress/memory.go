package suppress

import (
	"context"
	"sync"
	"time"
)

// Memory is one process's list (`notifier dev`, the demo): the Store
// interface in memory, entries dropped when they expire.
type Memory struct {
	now func() time.Time

	mu sync.Mutex
	m  map[string]Entry // by channel + ":" + hash
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty list on clock now (nil: time.Now).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, m: map[string]Entry{}}
}

func (m *Memory) get(channel, hash string) (Entry, bool) {
	e, ok := m.m[channel+":"+hash]
	if ok && !m.now().Before(e.Until) {
		delete(m.m, channel+":"+hash)
		return Entry{}, false
	}
	return e, ok
}

// Add implements Store.
func (m *Memory) Add(_ context.Context, e Entry, ttl time.Duration) error {
	if err := check(e.Channel, e.Hash); err != nil {
		return err
	}
	if err := checkTTL(ttl); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e.At = m.now().UTC()
	e.Until = e.At.Add(ttl)
	m.m[e.Channel+":"+e.Hash] = e
	return nil
}

// Has implements Store: Get's ok.
func (m *Memory) Has(ctx context.Context, channel, hash string) (bool, error) {
	_, ok, err := m.Get(ctx, channel, hash)
	return ok, err
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, channel, hash string) (Entry, bool, error) {
	if err := check(channel, hash); err != nil {
		return Entry{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.get(channel, hash)
	return e, ok, nil
}

// Remove implements Store.
func (m *Memory) Remove(_ context.Context, channel, hash string) (bool, error) {
	if err := check(channel, hash); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.get(channel, hash)
	delete(m.m, channel+":"+hash)
	return ok, nil
}

// List implements Store.
func (m *Memory) List(_ context.Context, channel string, limit int) ([]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Entry
	for _, e := range m.m {
		if _, ok := m.get(e.Channel, e.Hash); ok && (channel == "" || e.Channel == channel) {
			out = append(out, e)
		}
	}
	sortNewest(out)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
