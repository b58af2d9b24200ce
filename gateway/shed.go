package gateway

import (
	"container/list"
	"context"
	"fmt"
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// inflight counts the requests being handled, in total and per client IP,
// against gateway.shed.max_in_flight and max_in_flight_per_ip. The map
// holds only the addresses with a request in flight, so it is never larger
// than max_in_flight. Safe for concurrent use.
type inflight struct {
	max, perIP int
	mu         sync.Mutex
	total      int
	byIP       map[netip.Addr]int
}

// enter counts a request of ip in, unless a bound is reached: then it
// reports which ("total" or "per_ip") and counts nothing.
func (f *inflight) enter(ip netip.Addr) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.total >= f.max {
		return "total", false
	}
	n := f.byIP[ip]
	if n >= f.perIP {
		return "per_ip", false
	}
	f.total++
	f.byIP[ip] = n + 1
	return "", true
}

// leave counts out a request enter let in.
func (f *inflight) leave(ip netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.total--
	if n := f.byIP[ip]; n <= 1 {
		delete(f.byIP, ip)
	} else {
		f.byIP[ip] = n - 1
	}
}

// ackTau is the time constant of the moving average of JetStream's
// acknowledgement latency: a sample weighs 1-exp(-Δt/τ), Δt the time since
// the previous one, and without samples the average decays toward 0 at the
// same pace (so that, shedding, the gateway lets requests probe again).
const ackTau = time.Second

// ackMeter measures how long JetStream takes to acknowledge the gateway's
// publishes: a moving average of the acknowledgements (a publish that timed
// out counts as the timeout), and the age of the oldest publish still
// waiting, which a stalled server makes grow although no ack arrives.
// Latency is the larger of the two. Reads are lock-free. Safe for
// concurrent use.
type ackMeter struct {
	base time.Time

	mu      sync.Mutex
	pending list.List // start of each publish waiting, ns since base, oldest first
	avg     float64   // ns, as of last
	last    time.Duration

	oldest atomic.Int64  // start of the oldest publish waiting; -1 none
	avgNs  atomic.Uint64 // math.Float64bits(avg)
	avgAt  atomic.Int64  // last
}

func newAckMeter(base time.Time) *ackMeter {
	m := &ackMeter{base: base}
	m.oldest.Store(-1)
	return m
}

// start records a publish beginning now; done must be called with its
// element once it is acknowledged or given up.
func (m *ackMeter) start() *list.Element {
	now := time.Since(m.base)
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.pending.PushBack(now)
	if m.pending.Len() == 1 {
		m.oldest.Store(int64(now))
	}
	return e
}

// done ends a publish started with e: acked (or timed out, with the
// timeout as its latency) counts as a sample; a publish refused at once
// (NATS unreachable) is no measure of JetStream and only leaves.
func (m *ackMeter) done(e *list.Element, sample bool, timeout time.Duration) {
	now := time.Since(m.base)
	m.mu.Lock()
	defer m.mu.Unlock()
	began := e.Value.(time.Duration)
	m.pending.Remove(e)
	if f := m.pending.Front(); f != nil {
		m.oldest.Store(int64(f.Value.(time.Duration)))
	} else {
		m.oldest.Store(-1)
	}
	if !sample {
		return
	}
	x := now - began
	if timeout > 0 {
		x = max(x, timeout)
	}
	w := math.Exp(-float64(now-m.last) / float64(ackTau))
	m.avg = w*m.avg + (1-w)*float64(x)
	m.last = now
	m.avgNs.Store(math.Float64bits(m.avg))
	m.avgAt.Store(int64(now))
}

// latency is the measure shedding compares with max_publish_latency: the
// larger of the decayed average and the oldest waiting publish's age.
func (m *ackMeter) latency() time.Duration {
	now := time.Since(m.base)
	avg := math.Float64frombits(m.avgNs.Load()) * math.Exp(-float64(now-time.Duration(m.avgAt.Load()))/float64(ackTau))
	l := time.Duration(avg)
	if o := m.oldest.Load(); o >= 0 {
		l = max(l, now-time.Duration(o))
	}
	return l
}

// shedding says why the platform behind the gateway is too slow to take
// more jobs ("" when it is not): JetStream's acknowledgements or the
// stream's depth past gateway.shed's thresholds.
func (g *Gateway) shedding() string {
	s := g.cfg.Shed
	if l := g.acks.latency(); l > s.MaxPublishLatency {
		return fmt.Sprintf("JetStream acknowledges in %s, more than %s", l.Round(time.Millisecond), s.MaxPublishLatency)
	}
	if s.MaxStreamDepth > 0 {
		if d := g.depth.Load(); d > s.MaxStreamDepth {
			return fmt.Sprintf("the job stream holds %d jobs, more than %d", d, s.MaxStreamDepth)
		}
	}
	return ""
}

// depthEvery is how often Run reads the job stream's depth.
const depthEvery = time.Second

// readDepth reads the stream's depth into g.depth (kept on failure, which
// is logged).
func (g *Gateway) readDepth(ctx context.Context) {
	if g.streamDepth == nil {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, depthEvery)
	defer cancel()
	d, err := g.streamDepth(dctx)
	if err != nil {
		if ctx.Err() == nil {
			g.throttledWarn(" depth", "job stream depth not read", "err", err)
		}
		return
	}
	g.depth.Store(d)
}
