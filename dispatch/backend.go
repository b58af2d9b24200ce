package dispatch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/notifier/notifier/internal/sleep"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/ledger"
)

// backendSwitch keeps the limit set the pipeline runs on: the primary one
// (Options.Limits, Redis for a fleet), the local fallback of
// redis.on_failure: local while the primary is unreachable, or none while
// holding for it; and the monitor that switches back once the primary
// answers. It also keeps the limit backend's clock on this process's
// (clockSync), which places every send slot.
type backendSwitch struct {
	*core
	wg *sync.WaitGroup // the dispatcher's background loops: the monitor is one

	// limits is the set in use now, nil while holding for an unreachable
	// backend. Read without a lock (every job reads it several times);
	// switched only under mu.
	limits  atomic.Pointer[limits.Set]
	mu      sync.Mutex    // guards the switches of limits, recover and monitor
	recover chan struct{} // closed when the primary backend answers again
	monitor context.CancelFunc
	// credsResumed: the start's lifting of credential pauses was done
	// (deferred to the backend's recovery when it was away at start).
	credsResumed atomic.Bool
	// notBefore (Unix ns) holds every new slot reservation after a switch
	// of limit sets, until the slots the previous set handed out have run
	// dry: the shared queue and a local one must never overlap.
	notBefore atomic.Int64
	clock     clockSync // the limit backend's clock on ours, for send slots
}

func newBackendSwitch(c *core, wg *sync.WaitGroup) *backendSwitch {
	b := &backendSwitch{core: c, wg: wg}
	b.limits.Store(c.o.Limits)
	return b
}

// currentLimits is the limit set in use now; nil while holding for an
// unreachable backend.
func (b *backendSwitch) currentLimits() *limits.Set { return b.limits.Load() }

// backendFailed switches away from a limit set whose backend failed: to the
// fallback (redis.on_failure: local) or to holding (hold). It starts the
// monitor that switches back once the primary backend answers.
func (b *backendSwitch) backendFailed(l *limits.Set, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if l != b.limits.Load() || l != b.o.Limits {
		return // already switched, or the fallback itself (in memory) failed
	}
	var fb *limits.Set
	if b.o.Fallback != nil {
		var ferr error
		if fb, ferr = b.o.Fallback(); ferr != nil {
			fb = nil
			b.log.Error("build the local limits of redis.on_failure: local; holding jobs instead", "err", ferr)
		}
	}
	if fb != nil {
		b.holdSlotsFor(b.live.Load().maxQueue + b.o.LateTolerance)
		b.limits.Store(fb)
		b.log.Warn("limit backend unreachable: continuing on local limits, each contract divided by the live instances",
			"backend", l.Name, "divisor", fb.RateDivisor, "err", err)
	} else {
		b.limits.Store(nil)
		b.log.Warn("limit backend unreachable: holding jobs in JetStream until it answers", "backend", l.Name, "err", err)
	}
	b.recover = make(chan struct{})
	mctx, cancel := context.WithCancel(context.Background())
	b.monitor = cancel
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.monitorBackend(mctx)
	}()
}

// monitorBackend checks the primary backend (Limits.Ping: for Redis, every
// server an operation may need) with backoff until it answers,
// then switches back to it. Coming from local limits, new reservations wait
// until the local queues have run dry, so slots handed out locally and slots
// from the shared queue never overlap.
func (b *backendSwitch) monitorBackend(ctx context.Context) {
	wait := 100 * time.Millisecond
	for {
		if sleep.For(ctx, wait) != nil {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := b.ping(pctx)
		cancel()
		if err == nil {
			break
		}
		wait = min(wait*2, monitorMaxInterval)
	}
	b.mu.Lock()
	if b.limits.Load() != nil {
		// Back from local limits: their slots run up to the longest
		// max_queue_delay ahead, and other processes may notice the
		// recovery up to one ping interval later and still pace locally
		// until then.
		b.holdSlotsFor(b.live.Load().maxQueue + monitorMaxInterval + b.o.LateTolerance)
	}
	b.limits.Store(b.o.Limits)
	close(b.recover)
	b.monitor = nil
	b.mu.Unlock()
	b.log.Info("limit backend answers again; back on shared limits", "backend", b.o.Limits.Name)
	if b.credsResumed.CompareAndSwap(false, true) {
		b.resumeCredentialPauses(b.o.Limits, b.live.Load().providers)
	}
}

// monitorMaxInterval caps the backoff between pings of a failed backend, so
// that the processes of a fleet notice a recovery within about this of each
// other.
const monitorMaxInterval = time.Second

// holdSlotsFor holds new slot reservations for d from now.
func (b *backendSwitch) holdSlotsFor(dur time.Duration) {
	b.notBefore.Store(b.now().Add(dur).UnixNano())
}

func (b *backendSwitch) ping(ctx context.Context) error {
	if b.o.Limits.Ping == nil {
		return nil
	}
	return b.o.Limits.Ping(ctx)
}

// waitForRecovery holds a job until the primary backend is back, calling
// keepAlive every AckWait/3 meanwhile.
func (b *backendSwitch) waitForRecovery(ctx context.Context, keepAlive func()) error {
	b.mu.Lock()
	ch := b.recover
	b.mu.Unlock()
	for {
		if b.currentLimits() != nil {
			return nil
		}
		t := time.NewTimer(b.o.AckWait / 3)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-ch:
			t.Stop()
		case <-t.C:
			keepAlive()
		}
	}
}

// waitForBackend blocks the fetch loop while holding: no job is taken while
// the limit backend is unreachable.
func (b *backendSwitch) waitForBackend(ctx context.Context) error {
	for {
		b.mu.Lock()
		l, ch := b.limits.Load(), b.recover
		b.mu.Unlock()
		if l != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// stopMonitor ends a running backend monitor (on a stop).
func (b *backendSwitch) stopMonitor() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.monitor != nil {
		b.monitor()
		b.monitor = nil
	}
}

// LimitsName says which limits are in use: "redis" (or the primary set's
// name), "local" (the fallback), or "holding" while the backend is down and
// there is no fallback.
func (d *Dispatcher) LimitsName() string {
	l := d.be.currentLimits()
	if l == nil {
		return "holding"
	}
	return l.Name
}

// with runs fn on the limit set in use for jb. When the backend fails, the
// dispatcher degrades (to the fallback, or to holding) and fn runs again;
// meanwhile the job stays in its worker, heart-beaten. It returns only fn's
// success or ctx's end.
func (b *backendSwitch) with(ctx context.Context, jb *job, fn func(*limits.Set) error) error {
	wait := 50 * time.Millisecond
	for {
		l := b.currentLimits()
		if l == nil {
			if err := b.waitForRecovery(ctx, func() { b.keepAlive(jb) }); err != nil {
				return err
			}
			continue
		}
		err := fn(l)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if limits.Refused(err) {
			// The server answered: the job's own data (a record, a key,
			// an argument) is what it refused. Not the backend failing:
			// the job is handed back (stopped), the fleet goes on.
			b.m.Deferrals.WithLabelValues(l.Name, ledger.DeferRefused).Inc()
			jb.log().Error("the limit backend refused this job's data; handing the job back to JetStream", "backend", l.Name, "err", err)
			return err
		}
		b.m.Deferrals.WithLabelValues(l.Name, "unavailable").Inc()
		jb.log().Warn("limit backend failed", "backend", l.Name, "err", err)
		b.backendFailed(l, err)
		if err := b.hold(ctx, jb, wait); err != nil {
			return err
		}
		wait = min(wait*2, time.Second)
	}
}
