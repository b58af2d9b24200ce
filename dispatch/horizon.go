package dispatch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/providers"
)

// Horizons keeps, outside Redis, how far ahead each process handed out each
// provider's send slots (queue.Horizons: a JetStream key-value bucket, which
// a Redis wiped or failed over does not lose).
//
// A provider queue that finds no trusted state in Redis starts cold, as if
// full (leaky: max_queue_delay ahead), because slots handed out before the
// loss may still be pending. That wait is needed only when such slots can
// exist, and Redis alone cannot tell a wiped state from a provider never
// started. With the horizons the dispatcher can: no horizon at all (none
// noted by any process within the bucket's 25 h) is a first start, with
// nothing pending, and its queue starts at once; any horizon gets the full
// cold start. (A horizon written long ago would allow a shorter one too,
// but a fleet waking from idle notes its first slots up to a second late,
// and a Redis lost in that second would then let two sets of slots
// overlap: the contract comes first.)
type Horizons interface {
	// Note records that instance handed out provider's slots up to end.
	Note(ctx context.Context, provider, instance string, end time.Time) error
	// Read is provider's horizon over every instance: the latest end
	// noted, when the latest note was written, and whether there is any.
	Read(ctx context.Context, provider string) (end, written time.Time, found bool, err error)
}

// horizonEvery is how often a process writes the horizons it moved and
// reads the fleet's.
const horizonEvery = time.Second

// horizonKeeper notes this process's slots and keeps, per provider, the
// cold start its reservations may use (none: the safe default).
type horizonKeeper struct {
	store    Horizons
	instance string
	now      func() time.Time

	mu   sync.Mutex
	ends map[string]time.Time // the latest slot end per provider since the last write
	// started: providers known to have a horizon (this process reserved
	// a slot of them, or found one noted): never a first start again, so
	// their horizons are not read again.
	started map[string]bool

	cold atomic.Pointer[map[string]time.Duration] // per provider; absent: the full cold start
}

func newHorizonKeeper(store Horizons, instance string, now func() time.Time) *horizonKeeper {
	return &horizonKeeper{store: store, instance: instance, now: now, ends: map[string]time.Time{}, started: map[string]bool{}}
}

// note records a slot reserved for provider, ending at end.
func (h *horizonKeeper) note(provider string, end time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if end.After(h.ends[provider]) {
		h.ends[provider] = end
	}
	if !h.started[provider] {
		h.started[provider] = true
		if m := h.cold.Load(); m != nil {
			if _, ok := (*m)[provider]; ok { // no longer a first start
				cold := map[string]time.Duration{}
				for p, d := range *m {
					if p != provider {
						cold[p] = d
					}
				}
				h.cold.Store(&cold)
			}
		}
	}
}

// coldStart is the cold start provider's reservations may use; nil: the
// full one (leaky's default).
func (h *horizonKeeper) coldStart(provider string) *time.Duration {
	m := h.cold.Load()
	if m == nil {
		return nil
	}
	if d, ok := (*m)[provider]; ok {
		return &d
	}
	return nil
}

// flush writes the horizons this process moved since the last flush.
func (h *horizonKeeper) flush(ctx context.Context) error {
	h.mu.Lock()
	ends := h.ends
	h.ends = map[string]time.Time{}
	h.mu.Unlock()
	for p, end := range ends {
		if err := h.store.Note(ctx, p, h.instance, end); err != nil {
			h.mu.Lock()
			if end.After(h.ends[p]) {
				h.ends[p] = end // kept for the next flush
			}
			h.mu.Unlock()
			return err
		}
	}
	return nil
}

// refresh reads the fleet's horizons of provs and sets the cold starts
// their reservations may use. A provider whose horizon cannot be read gets
// the full cold start.
func (h *horizonKeeper) refresh(ctx context.Context, provs []providers.Config) {
	cold := map[string]time.Duration{}
	for _, p := range provs {
		h.mu.Lock()
		started := h.started[p.Name]
		h.mu.Unlock()
		if started {
			continue // this process handed out its slots: not a first start
		}
		_, _, found, err := h.store.Read(ctx, p.Name)
		switch {
		case err == nil && !found:
			cold[p.Name] = 0 // a first start: nothing pending
		case found:
			h.mu.Lock()
			h.started[p.Name] = true
			h.mu.Unlock()
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for p := range cold {
		if h.started[p] { // a slot reserved while the horizons were read
			delete(cold, p)
		}
	}
	h.cold.Store(&cold)
}

// run flushes and refreshes every horizonEvery until ctx ends.
func (h *horizonKeeper) run(ctx context.Context, live func() []providers.Config) {
	t := time.NewTicker(horizonEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = h.flush(fctx) // the last slots handed out, for whoever starts next
			cancel()
			return
		case <-t.C:
		}
		wctx, cancel := context.WithTimeout(ctx, horizonEvery)
		_ = h.flush(wctx)
		h.refresh(wctx, live())
		cancel()
	}
}

// reserveContract is the contract a reservation in p's queue uses: l's,
// with the cold start the horizons allow.
func (pl *pipeline) reserveContract(l *limits.Set, p providers.Config) leaky.Contract {
	c := l.ContractOf(p)
	if pl.horizons != nil {
		c.ColdStart = pl.horizons.coldStart(p.Name)
	}
	return c
}

// noteSlot records a reserved slot of jb's in the horizons.
func (pl *pipeline) noteSlot(jb *job) {
	if pl.horizons == nil || jb.pcfg.Rate <= 0 {
		return
	}
	pl.horizons.note(jb.provider, jb.slotAt.Add(time.Duration(float64(jb.cost)/jb.pcfg.Rate*float64(time.Second))))
}
