package leaky

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// A shaped contract (Adaptive or Quotas) in integers, computed once in Go;
// Memory runs the arithmetic below, the scripts run the same in Lua (see
// reserve.lua, pause.lua), so that the two agree exactly. Rates are kept
// in rate quanta, millionths of a unit per second (rateQuanta per unit/s).
//
// Every value stays an integer below 2^53, which a Lua number holds
// exactly; a quotient of integers is floored exactly (Lua's idiv corrects
// the float quotient, which can round up to the next integer). The only
// float operations, eff × (1 − headroom), limit × Decrease and limit ×
// AdaptiveKeep, are one IEEE-754 multiplication of two doubles each,
// correctly rounded in Go and in Lua alike, then floored.
//
// The adaptive rate (see Adaptive for the why): the state is the last
// backoff, (r0, t0, tg): the rate it set, its time, and the target, just
// under where the provider's limit was found. From t0 the rate holds r0 for
// Quiet, then climbs by IncreasePerS a second up to tg (the ramp), holds
// there, and from AdaptiveHold after Quiet climbs again by IncreasePerS a
// second (the probe) up to Rate. A state written before targets existed
// (tg 0) climbs to Rate without a hold, as AIMD did.
type shapePlan struct {
	adaptive bool
	rateQ    int64   // Rate in quanta (adaptive only)
	minQ     int64   // MinRate in quanta, <= rateQ
	incQ     int64   // IncreasePerS in quanta per second, >= 1
	quiet    int64   // µs
	dcap     int64   // µs: a climb this long reaches rateQ from minQ (<= 2^53)
	hold     int64   // µs: AdaptiveHold
	lag      int64   // µs: AdaptiveLag
	convex   int64   // ms: AdaptiveConvex
	pace     float64 // 1 − headroom
	dec      float64 // Decrease
	keep     float64 // AdaptiveKeep
	ease     float64 // AdaptiveEase
	quotas   []quotaPlan
}

// Adaptive shaping's fixed parts, the same for every contract (see
// Adaptive).
const (
	// AdaptiveKeep is the share of the rate at which the provider throttled
	// that the fleet returns to and holds: just under it. The pacing's
	// headroom comes on top (the send rate is Keep × (1 − headroom) of that
	// rate), so the jitter of sends arriving at the provider stays under
	// its limit as it does under a contract.
	AdaptiveKeep = 0.98
	// AdaptiveHold is how long after Quiet the fleet holds the target
	// before it probes above it, climbing by IncreasePerS a second until
	// the provider throttles again (then back to the target) or the
	// contract's Rate is reached. A probe that meets the same limit costs
	// the 429's pause (the Retry-After, a second or so): once per Quiet +
	// AdaptiveHold at most, about 4 % of the time at a 1 s pause; a limit
	// that rose is found by the first probe after it rose.
	AdaptiveHold = 22 * time.Second
	// AdaptiveLag is what Backoff adds to the queue's depth when it dates
	// the sends that met the limit: the requests a provider counts in a
	// trailing second were paced, on average, half a second before the
	// 429 came, and the one at the head of the queue was reserved the
	// queue's depth (tat − now) before it was sent.
	AdaptiveLag = 500 * time.Millisecond
	// AdaptiveEase is the decrease of a 429 met while holding a target a
	// ramp or a probe found (the limit moved, likely not far: a drift),
	// when it is gentler than Decrease; a second 429 before the ramp back
	// finds the limit again decreases by Decrease.
	AdaptiveEase = 0.9
	// AdaptiveConvex is how fast the probe's climb steepens: after d of
	// probing it climbs IncreasePerS × (1 + 2d/AdaptiveConvex) a second, so
	// it crosses a limit just above the target about as slowly as a
	// straight climb would (the 429 then dates the limit well), and reaches
	// one 50 % higher in a third of the time.
	AdaptiveConvex = 4 * time.Second
)

type quotaPlan struct {
	per   int64 // µs, a whole number of seconds
	limit int64 // units per window
}

// quotaState is a quota's window: the one the latest slots counted in.
type quotaState struct {
	start int64 // the window's start, µs since the epoch; 0: none
	used  int64 // units given slots in it
}

const rateQuanta = 1_000_000 // rate quanta per unit/s

func newShapePlan(c *Contract, headroom float64, cost int) (*shapePlan, error) {
	sp := &shapePlan{}
	for i, q := range c.Quotas {
		if int64(cost) > q.Limit {
			return nil, fmt.Errorf("cost %d is more than quotas[%d]'s limit %d: it could never be reserved", cost, i, q.Limit)
		}
		sp.quotas = append(sp.quotas, quotaPlan{per: q.Per.Microseconds(), limit: q.Limit})
	}
	a := c.Adaptive
	if a == nil {
		return sp, nil
	}
	if cost > MaxAdaptiveCost {
		return nil, fmt.Errorf("cost %d is more than %d, the most an adaptive contract takes at once", cost, MaxAdaptiveCost)
	}
	h := 1 - headroom
	if inc := costMicros(cost, a.MinRate*h); inc > maxLuaMicros/4 {
		return nil, fmt.Errorf("cost %d at the adaptive min rate %v/s: a send interval of %d µs is too long to keep in microseconds", cost, a.MinRate, inc)
	}
	sp.adaptive = true
	sp.rateQ = int64(math.Round(c.Rate * rateQuanta))
	sp.minQ = min(int64(math.Round(a.MinRate*rateQuanta)), sp.rateQ)
	sp.incQ = max(1, int64(math.Round(a.IncreasePerS*rateQuanta)))
	sp.quiet = a.Quiet.Microseconds()
	secs := (sp.rateQ - sp.minQ + sp.incQ - 1) / sp.incQ
	sp.dcap = maxLuaMicros
	if secs < maxLuaMicros/1_000_000 {
		sp.dcap = secs * 1_000_000
	}
	sp.pace = h
	sp.dec = a.Decrease
	sp.keep = AdaptiveKeep
	sp.ease = AdaptiveEase
	sp.hold = AdaptiveHold.Microseconds()
	sp.lag = AdaptiveLag.Microseconds()
	sp.convex = AdaptiveConvex.Milliseconds()
	return sp, nil
}

// climb is the rise of the rate over d µs of climbing: increase × d/1e6,
// floored to whole quanta, d at most dcap (which reaches rate from min).
func (sp *shapePlan) climb(d int64) int64 {
	d = min(max(d, 0), sp.dcap)
	secs := d / 1_000_000
	return sp.incQ*secs + sp.incQ*(d-secs*1_000_000)/1_000_000
}

// Phases of the adaptive rate after a backoff.
const (
	held    = iota // quiet, the hold at the target, at min or at rate
	ramping        // climbing back to the target
	probing        // climbing above the target after the hold
)

// probe is the rise over d µs of probing: the climb, times 1 + d/AdaptiveConvex
// (the climb's slope grows as the probe goes on: slow past the target,
// where the limit was, fast beyond it, where a raised limit lies), d in
// the factor at most maxProbeMs. climb(d)/convex is floored before it is
// multiplied, so that every value stays below 2^53 (climb ≤ 1e13, /2000,
// × 1e6).
func (sp *shapePlan) probe(d int64) int64 {
	c := sp.climb(d)
	return c + c/sp.convex*min(max(d, 0)/1000, maxProbeMs)
}

// maxDepth bounds the queue depth Backoff dates the throttled sends by,
// µs: a minute (a deeper queue's sends are dated a minute back; te is never
// before the last backoff anyway), and the depth scaled by the rates (see
// backoff) likewise.
const maxDepth = 60_000_000

// maxProbeMs bounds the convex factor's time, ms: past it the probe climbs
// at a constant slope (by then it has reached any rate).
const maxProbeMs = 1_000_000

// at is the effective rate in quanta at now from the state of the last
// backoff (r0 == 0: none, the contract's rate), and its phase there: r0
// during quiet, then min(tg, r0 + climb) (the ramp) plus, from hold after
// quiet, a second climb (the probe: a phase of its own once the ramp has
// reached the target; before, it only speeds the ramp); never below min
// nor above rate. tg == 0 (a state of before targets): min(rate, r0 +
// climb), with no hold.
func (sp *shapePlan) at(r0, t0, tg, now int64) (int64, int) {
	if r0 <= 0 {
		return sp.rateQ, held
	}
	d := now - t0 - sp.quiet
	eff, phase := r0, held
	if d > 0 {
		target := sp.rateQ
		if tg > 0 {
			target = tg
		}
		if eff = r0 + sp.climb(d); eff < target {
			phase = ramping
		}
		eff = min(eff, target)
		if tg > 0 && d > sp.hold {
			eff += sp.probe(d - sp.hold)
			if phase != ramping { // a probe before the ramp reached the target only speeds the ramp
				phase = probing
			}
		}
	}
	switch {
	case eff >= sp.rateQ:
		return sp.rateQ, held
	case eff <= sp.minQ:
		return sp.minQ, held
	}
	return eff, phase
}

// eff is the effective rate in quanta at now (see at).
func (sp *shapePlan) eff(r0, t0, tg, now int64) int64 {
	eff, _ := sp.at(r0, t0, tg, now)
	return eff
}

// backoff is the state a Backoff at now writes over (r0, t0, tg), tat
// being the queue's next free slot (0: none), and the effective rate before
// it. The throttled sends were paced at e, the effective rate at te = now −
// AdaptiveLag − the queue's depth (not before t0):
//
//   - in a probe (at te or now): the provider let the target through for
//     the whole hold and stopped the climb above it, so its limit lies
//     between: hold max(tg, e × keep) again from now;
//   - in a ramp: the limit lies about e: hold e × keep from now;
//   - else (a rate held, or none yet) the limit fell somewhere below e:
//     drop to e × decrease and ramp back up to e × keep, which finds it
//     from below.
func (sp *shapePlan) backoff(r0, t0, tg, tat, now int64) (nr0, ntg, before int64) {
	before, nowPhase := sp.at(r0, t0, tg, now)
	depth := min(max(tat-now, 0), maxDepth)
	te := now - sp.lag - depth
	if r0 > 0 {
		te = max(te, t0)
	}
	e, phase := sp.at(r0, t0, tg, te)
	if e < before && depth > 0 {
		// The queue holds as many slots as it did when those sends were
		// reserved, spaced at e then, at before now: it was that much
		// longer in time.
		scaled := int64(maxDepth)
		if f := math.Floor(float64(depth) * float64(before) / float64(e)); f < maxDepth {
			scaled = int64(f)
		}
		te = now - sp.lag - scaled
		if r0 > 0 {
			te = max(te, t0)
		}
		e, phase = sp.at(r0, t0, tg, te)
	}
	keep := max(sp.minQ, int64(math.Floor(float64(e)*sp.keep)))
	switch {
	case phase == probing || nowPhase == probing:
		keep = max(keep, tg)
		return keep, keep, before
	case phase == ramping || nowPhase == ramping:
		return keep, keep, before
	}
	dec := sp.dec
	if tg > 0 && r0 == tg {
		dec = max(dec, sp.ease) // the limit found moved, likely not far
	}
	nr0 = max(sp.minQ, int64(math.Floor(float64(e)*dec)))
	return nr0, max(nr0, keep), before
}

// incAt is the µs a reservation of cost units adds to tat at the effective
// rate eff: the contract's own ⌈cost × interval⌉ (plain) at the full rate,
// else ⌈cost × 1e12 / pace⌉ with pace = max(1, ⌊eff × (1 − headroom)⌋)
// quanta, never less than plain.
func (sp *shapePlan) incAt(eff int64, cost int, plain int64) int64 {
	if !sp.adaptive || eff >= sp.rateQ {
		return plain
	}
	pace := max(1, int64(math.Floor(float64(eff)*sp.pace)))
	inc := min((int64(cost)*1_000_000_000_000+pace-1)/pace, maxLuaMicros/4)
	return max(plain, inc)
}

// window is the start of quota q's window that a slot counts in: its own,
// or a later one the state already counts in (slots never go back, so
// this only guards a state whose clock went back).
func (q quotaPlan) window(slot int64, st quotaState) int64 {
	return max(slot/q.per*q.per, st.start)
}

// place moves slot past every spent quota window (to the next window's
// start, then checks every quota again) and returns it with the index of
// the last quota that moved it, -1 when none did.
func (sp *shapePlan) place(slot int64, cost int, qs []quotaState) (int64, int) {
	hit := -1
	for moved := true; moved; {
		moved = false
		for i, q := range sp.quotas {
			start := q.window(slot, qs[i])
			used := int64(0)
			if qs[i].start == start {
				used = qs[i].used
			}
			if used+int64(cost) > q.limit {
				slot, hit, moved = start+q.per, i, true
			}
		}
	}
	return slot, hit
}

// count counts cost units at slot in every quota's window.
func (sp *shapePlan) count(slot int64, cost int, qs []quotaState) {
	for i, q := range sp.quotas {
		start := q.window(slot, qs[i])
		if qs[i].start == start {
			qs[i].used += int64(cost)
		} else {
			qs[i] = quotaState{start: start, used: int64(cost)}
		}
	}
}

// shapeOf builds a Shape from the state read at now.
func (sp *shapePlan) shapeOf(c Contract, r0, t0, tg, now int64, qs []quotaState) Shape {
	s := Shape{EffectiveRate: c.Rate}
	if sp.adaptive {
		if eff := sp.eff(r0, t0, tg, now); eff < sp.rateQ {
			s.EffectiveRate = float64(eff) / rateQuanta
		}
		if r0 > 0 && tg > 0 && tg < sp.rateQ {
			s.Target = float64(tg) / rateQuanta
		}
	}
	for i, q := range sp.quotas {
		start := q.window(now, qs[i])
		st := QuotaState{Limit: q.limit, Per: c.Quotas[i].Per, ResetsIn: micros(start + q.per - now)}
		if qs[i].start == start {
			st.Used = qs[i].used
		}
		s.Quotas = append(s.Quotas, st)
	}
	return s
}

// args are the shape arguments of reserve.lua, after their count:
// rate, min, pace, increase, quiet, dcap, hold, convex (rate 0: not
// adaptive), the number of quotas, then per and limit of each.
func (sp *shapePlan) args(dst []any) []any {
	dst = append(dst, 9+2*len(sp.quotas))
	dst = append(dst, sp.rateQ, sp.minQ, strconv.FormatFloat(sp.pace, 'g', -1, 64), sp.incQ, sp.quiet, sp.dcap, sp.hold, sp.convex, len(sp.quotas))
	for _, q := range sp.quotas {
		dst = append(dst, q.per, q.limit)
	}
	return dst
}

// adaptiveArgs are the adaptive arguments of pause.lua: rate, min,
// decrease, increase, quiet, dcap, hold, keep, lag, ease, convex.
func (sp *shapePlan) adaptiveArgs(dst []any) []any {
	return append(dst, sp.rateQ, sp.minQ, strconv.FormatFloat(sp.dec, 'g', -1, 64), sp.incQ, sp.quiet, sp.dcap,
		sp.hold, strconv.FormatFloat(sp.keep, 'g', -1, 64), sp.lag, strconv.FormatFloat(sp.ease, 'g', -1, 64), sp.convex)
}
