package dispatch

import (
	"context"
	"time"

	"github.com/notifier/notifier/internal/sleep"
	"github.com/notifier/notifier/limits"
)

// currentLimits is the limit set in use now; nil while holding for an
// unreachable backend.
func (d *Dispatcher) currentLimits() *limits.Set { return d.limits.Load() }

// withBackend runs fn on the limit set in use. When the backend fails, the
// dispatcher degrades (to the fallback, or to holding) and fn runs again;
// meanwhile the job stays in its worker, heart-beaten. It returns only fn's
// success or ctx's end.
func (d *Dispatcher) withBackend(ctx context.Context, jb *job, fn func(*limits.Set) error) error {
	wait := 50 * time.Millisecond
	for {
		l := d.currentLimits()
		if l == nil {
			if err := d.waitForRecovery(ctx, jb); err != nil {
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
		d.m.Deferrals.WithLabelValues(l.Name, "unavailable").Inc()
		jb.log().Warn("limit backend failed", "backend", l.Name, "err", err)
		d.backendFailed(l, err)
		if err := d.hold(ctx, jb, wait); err != nil {
			return err
		}
		wait = min(wait*2, time.Second)
	}
}

// backendFailed switches away from a limit set whose backend failed: to the
// fallback (redis.on_failure: local) or to holding (hold). It starts the
// monitor that switches back once the primary backend answers.
func (d *Dispatcher) backendFailed(l *limits.Set, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if l != d.limits.Load() || l != d.o.Limits {
		return // already switched, or the fallback itself (in memory) failed
	}
	var fb *limits.Set
	if d.o.Fallback != nil {
		var ferr error
		if fb, ferr = d.o.Fallback(); ferr != nil {
			fb = nil
			d.log.Error("build the local limits of redis.on_failure: local; holding jobs instead", "err", ferr)
		}
	}
	if fb != nil {
		d.holdSlotsFor(d.live.Load().maxQueue + d.o.LateTolerance)
		d.limits.Store(fb)
		d.log.Warn("limit backend unreachable: continuing on local limits, each contract divided by the live instances",
			"backend", l.Name, "divisor", fb.RateDivisor, "err", err)
	} else {
		d.limits.Store(nil)
		d.log.Warn("limit backend unreachable: holding jobs in JetStream until it answers", "backend", l.Name, "err", err)
	}
	d.recover = make(chan struct{})
	mctx, cancel := context.WithCancel(context.Background())
	d.monitor = cancel
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.monitorBackend(mctx)
	}()
}

// monitorBackend checks the primary backend (Limits.Ping: for Redis, every
// server an operation may need) with backoff until it answers,
// then switches back to it. Coming from local limits, new reservations wait
// until the local queues have run dry, so slots handed out locally and slots
// from the shared queue never overlap.
func (d *Dispatcher) monitorBackend(ctx context.Context) {
	wait := 100 * time.Millisecond
	for {
		if sleep.For(ctx, wait) != nil {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := d.ping(pctx)
		cancel()
		if err == nil {
			break
		}
		wait = min(wait*2, monitorMaxInterval)
	}
	d.mu.Lock()
	if d.limits.Load() != nil {
		// Back from local limits: their slots run up to the longest
		// max_queue_delay ahead, and other processes may notice the
		// recovery up to one ping interval later and still pace locally
		// until then.
		d.holdSlotsFor(d.live.Load().maxQueue + monitorMaxInterval + d.o.LateTolerance)
	}
	d.limits.Store(d.o.Limits)
	close(d.recover)
	d.monitor = nil
	d.mu.Unlock()
	d.log.Info("limit backend answers again; back on shared limits", "backend", d.o.Limits.Name)
	if d.credsResumed.CompareAndSwap(false, true) {
		d.resumeCredentialPauses(d.o.Limits, d.live.Load().providers)
	}
}

// monitorMaxInterval caps the backoff between pings of a failed backend, so
// that the processes of a fleet notice a recovery within about this of each
// other.
const monitorMaxInterval = time.Second

// holdSlotsFor holds new slot reservations for d from now.
func (d *Dispatcher) holdSlotsFor(dur time.Duration) {
	d.notBefore.Store(d.now().Add(dur).UnixNano())
}

func (d *Dispatcher) ping(ctx context.Context) error {
	if d.o.Limits.Ping == nil {
		return nil
	}
	return d.o.Limits.Ping(ctx)
}

// waitForRecovery holds a job until the primary backend is back.
func (d *Dispatcher) waitForRecovery(ctx context.Context, jb *job) error {
	d.mu.Lock()
	ch := d.recover
	d.mu.Unlock()
	for {
		if d.currentLimits() != nil {
			return nil
		}
		t := time.NewTimer(d.o.AckWait / 3)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-ch:
			t.Stop()
		case <-t.C:
			d.keepAlive(jb)
		}
	}
}

// waitForBackend blocks the fetch loop while holding: no job is taken while
// the limit backend is unreachable.
func (d *Dispatcher) waitForBackend(ctx context.Context) error {
	for {
		d.mu.Lock()
		l, ch := d.limits.Load(), d.recover
		d.mu.Unlock()
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
func (d *Dispatcher) stopMonitor() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.monitor != nil {
		d.monitor()
		d.monitor = nil
	}
}

// LimitsName says which limits are in use: "redis" (or the primary set's
// name), "local" (the fallback), or "holding" while the backend is down and
// there is no fallback.
func (d *Dispatcher) LimitsName() string {
	l := d.currentLimits()
	if l == nil {
		return "holding"
	}
	return l.Name
}
