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
	// the adaptive rate's last backoff: to r0 quanta at t0 µs, with the
	// target tg quanta; r0 0: none (see shapePlan)
	r0, t0, tg int64
	quotas     [MaxQuotas]quotaState
}

var _ Queue = (*Memory)(nil)

// NewMemory returns an in-process queue; its clock is WithNow's, else
// time.Now. It returns an error when an option is out of its range.
func NewMemory(opts ...Option) (*Memory, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("new leaky queue in memory: %w", err)
	}
	now := o.now
	if now == nil {
		now = time.Now
	}
	return &Memory{o: o, now: now, q: make(map[string]*memState)}, nil
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
	p, sp, err := m.o.plan(&c, cost)
	if err != nil {
		return Reservation{}, fmt.Errorf("reserve slot %s: %w", provider, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now().UnixMicro()
	s := m.state(provider)
	slot := max(now, s.tat, s.pause)
	if sp != nil {
		return m.reserveShaped(s, sp, p, cost, now, slot), nil
	}
	if slot-now > p.mqd {
		return Reservation{RetryAfter: micros(slot - now - p.mqd), Paused: micros(max(0, s.pause-now)), Quota: -1}, nil
	}
	s.seq++
	s.tat = slot + p.inc
	return Reservation{OK: true, Delay: micros(slot - now), Slot: slot, Quota: -1, seq: s.seq}, nil
}

// reserveShaped is Reserve under a contract with Adaptive or Quotas, as
// reserve.lua's shaped part.
func (m *Memory) reserveShaped(s *memState, sp *shapePlan, p plan, cost int, now, slot int64) Reservation {
	qs := s.quotas[:len(sp.quotas)]
	slot, hit := sp.place(slot, cost, qs)
	if slot-now > p.mqd {
		return Reservation{RetryAfter: micros(slot - now - p.mqd), Paused: micros(max(0, s.pause-now)), Quota: hit}
	}
	sp.count(slot, cost, qs)
	inc := sp.incAt(sp.eff(s.r0, s.t0, s.tg, now), cost, p.inc)
	s.seq++
	s.tat = slot + inc
	return Reservation{OK: true, Delay: micros(slot - now), Slot: slot, Quota: -1, seq: s.seq, shaped: &shapedRes{inc: inc, cost: cost}}
}

// Cancel implements Queue.
func (m *Memory) Cancel(_ context.Context, provider string, c Contract, r Reservation, cost int) error {
	p, sp, err := m.o.plan(&c, cost)
	if err != nil {
		return fmt.Errorf("cancel slot %s: %w", provider, err)
	}
	if !r.OK {
		return nil
	}
	inc := p.inc
	if r.shaped != nil {
		if r.shaped.cost != cost {
			return nil
		}
		inc = r.shaped.inc
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.q[provider]
	if s == nil {
		return nil
	}
	rolled := s.tat == r.Slot+inc && s.seq == r.seq
	if rolled {
		s.tat = r.Slot
		s.seq++
	}
	if r.shaped != nil && sp != nil {
		// Rolled back, nothing followed: its units leave every window.
		// Otherwise (cancel.lua) only each window that is the slot's own
		// and still the state's.
		for i, qp := range sp.quotas {
			if i >= len(s.quotas) {
				break // the state predates these quotas (a reload)
			}
			q := &s.quotas[i]
			if (rolled || q.start == r.Slot-r.Slot%qp.per) && q.used >= int64(cost) {
				q.used -= int64(cost)
			}
		}
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
	m.pauseLocked(m.state(provider), m.now().UnixMicro(), us)
	return nil
}

// pauseLocked pauses s until now + us, as pause.lua.
func (m *Memory) pauseLocked(s *memState, now, us int64) {
	s.pause = max(s.pause, now+us)
	if s.tat != 0 && s.tat < s.pause {
		s.tat = s.pause
		s.seq++
	}
}

// Backoff implements Queue.
func (m *Memory) Backoff(_ context.Context, provider string, c Contract, d time.Duration) (bool, error) {
	_, sp, err := m.o.plan(&c, 1)
	if err != nil {
		return false, fmt.Errorf("back off provider %s: %w", provider, err)
	}
	us := d.Microseconds()
	if us <= 0 {
		return false, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now().UnixMicro()
	s := m.state(provider)
	inForce, tat := s.pause > now, s.tat
	m.pauseLocked(s, now, us)
	if sp == nil || !sp.adaptive || inForce {
		return false, nil
	}
	r0, tg, before := sp.backoff(s.r0, s.t0, s.tg, tat, now)
	s.r0, s.t0, s.tg = r0, now, tg
	return r0 < before, nil
}

// Shape implements Queue.
func (m *Memory) Shape(_ context.Context, provider string, c Contract) (Shape, error) {
	_, sp, err := m.o.plan(&c, 1)
	if err != nil {
		return Shape{}, fmt.Errorf("read shape %s: %w", provider, err)
	}
	if sp == nil {
		return Shape{EffectiveRate: c.Rate}, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.q[provider]
	if s == nil {
		s = &memState{}
	}
	return sp.shapeOf(c, s.r0, s.t0, s.tg, m.now().UnixMicro(), s.quotas[:len(sp.quotas)]), nil
}

// Resume implements Queue.
func (m *Memory) Resume(_ context.Context, provider string, c Contract) (time.Duration, error) {
	p, _, err := m.o.plan(&c, 1)
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
	return depthUnits(s.tat-max(m.now().UnixMicro(), s.pause), c, m.o.headroomOf(&c)), nil
}
