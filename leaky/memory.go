package leaky

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Memory is a Queue kept in this process. It does exactly the arithmetic of
// the Redis scripts, but starts a provider at now rather than cold (it
// cannot lose its state while the process lives) and never expires a
// provider's state (a few words per provider). It is safe for concurrent
// use; the zero value is not usable, call NewMemory.
type Memory struct {
	o   options
	now func() time.Time

	mu sync.Mutex
	q  map[string]*memState
}

type memState struct {
	tat   int64 // µs; 0: no state
	seq   int64
	pause int64 // pause end, µs; 0: none
}

var _ Queue = (*Memory)(nil)

// NewMemory returns an in-process queue reading now (nil: time.Now).
func NewMemory(now func() time.Time, opts ...Option) *Memory {
	o := buildOptions(opts)
	if o.now != nil {
		now = o.now
	}
	if now == nil {
		now = time.Now
	}
	return &Memory{o: o, now: now, q: make(map[string]*memState)}
}

func (m *Memory) state(provider string) *memState {
	s := m.q[provider]
	if s == nil {
		s = &memState{}
		m.q[provider] = s
	}
	return s
}

// Reserve implements Queue.
func (m *Memory) Reserve(_ context.Context, provider string, c Contract, cost int) (Reservation, error) {
	p, err := m.o.plan(c, cost)
	if err != nil {
		return Reservation{}, fmt.Errorf("reserve slot %s: %w", provider, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now().UnixMicro()
	s := m.state(provider)
	slot := max(now, s.tat, s.pause)
	if slot-now > p.mqd {
		return Reservation{RetryAfter: micros(slot - now - p.mqd)}, nil
	}
	s.seq++
	s.tat = slot + p.inc
	return Reservation{OK: true, Delay: micros(slot - now), Slot: slot, seq: s.seq}, nil
}

// Cancel implements Queue.
func (m *Memory) Cancel(_ context.Context, provider string, c Contract, r Reservation, cost int) error {
	p, err := m.o.plan(c, cost)
	if err != nil {
		return fmt.Errorf("cancel slot %s: %w", provider, err)
	}
	if !r.OK {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.q[provider]
	if s != nil && s.tat == r.Slot+p.inc && s.seq == r.seq {
		s.tat = r.Slot
		s.seq++
	}
	return nil
}

// Pause implements Queue.
func (m *Memory) Pause(_ context.Context, provider string, d time.Duration) error {
	us := d.Microseconds()
	if us <= 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	until := m.now().UnixMicro() + us
	s := m.state(provider)
	s.pause = max(s.pause, until)
	if s.tat != 0 && s.tat < s.pause {
		s.tat = s.pause
		s.seq++
	}
	return nil
}

// Resume implements Queue.
func (m *Memory) Resume(_ context.Context, provider string, c Contract) (time.Duration, error) {
	p, err := m.o.plan(c, 1)
	if err != nil {
		return 0, fmt.Errorf("resume provider %s: %w", provider, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.q[provider]
	if s == nil {
		return 0, nil
	}
	now := m.now().UnixMicro()
	left := max(0, s.pause-now)
	s.pause = 0
	if s.tat > now+p.cold {
		s.tat = now + p.cold
		s.seq++
	}
	return micros(left), nil
}

// PausedFor implements Queue.
func (m *Memory) PausedFor(_ context.Context, provider string) (time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.q[provider]
	if s == nil {
		return 0, nil
	}
	return micros(max(0, s.pause-m.now().UnixMicro())), nil
}

// Depth implements Queue.
func (m *Memory) Depth(_ context.Context, provider string, c Contract) (float64, error) {
	if err := c.validate(); err != nil {
		return 0, fmt.Errorf("read queue depth %s: %w", provider, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.q[provider]
	if s == nil || s.tat == 0 {
		return 0, nil
	}
	return depthUnits(s.tat-max(m.now().UnixMicro(), s.pause), c, m.o.headroomOf(c)), nil
}
