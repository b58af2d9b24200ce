package leaky

import (
	"fmt"
	"math"
	"strconv"
)

// A shaped contract (Adaptive or Quotas) in integers, computed once in Go;
// Memory runs the arithmetic below, the scripts run the same in Lua (see
// reserve.lua, pause.lua), so that the two agree exactly. Rates are kept
// in rate quanta, millionths of a unit per second (rateQuanta per unit/s).
//
// Every value stays an integer below 2^53, which a Lua number holds
// exactly; a quotient of integers is floored exactly (Lua's idiv corrects
// the float quotient, which can round up to the next integer). The only
// two float operations, eff × (1 − headroom) and eff × Decrease, are one
// IEEE-754 multiplication of two doubles each, correctly rounded in Go and
// in Lua alike, then floored.
type shapePlan struct {
	adaptive bool
	rateQ    int64   // Rate in quanta (adaptive only)
	minQ     int64   // MinRate in quanta, <= rateQ
	incQ     int64   // IncreasePerS in quanta per second, >= 1
	quiet    int64   // µs
	dcap     int64   // µs: a climb this long reaches rateQ from minQ (<= 2^53)
	pace     float64 // 1 − headroom
	dec      float64 // Decrease
	quotas   []quotaPlan
}

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
	return sp, nil
}

// eff is the effective rate in quanta at now, from the state (r0, t0) of
// the last decrease (r0 == 0: none): min(rate, max(min, r0 + increase ×
// max(0, now − t0 − quiet)/1e6)), the climb floored to whole quanta.
func (sp *shapePlan) eff(r0, t0, now int64) int64 {
	if r0 <= 0 {
		return sp.rateQ
	}
	dt := min(max(now-t0-sp.quiet, 0), sp.dcap)
	secs := dt / 1_000_000
	climb := sp.incQ*secs + sp.incQ*(dt-secs*1_000_000)/1_000_000
	return min(sp.rateQ, max(sp.minQ, r0+climb))
}

// lower is the effective rate after a decrease from eff.
func (sp *shapePlan) lower(eff int64) int64 {
	return max(sp.minQ, int64(math.Floor(float64(eff)*sp.dec)))
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
func (sp *shapePlan) shapeOf(c Contract, r0, t0, now int64, qs []quotaState) Shape {
	s := Shape{EffectiveRate: c.Rate}
	if sp.adaptive {
		if eff := sp.eff(r0, t0, now); eff < sp.rateQ {
			s.EffectiveRate = float64(eff) / rateQuanta
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
// rate, min, pace, increase, quiet, dcap (rate 0: not adaptive), the
// number of quotas, then per and limit of each.
func (sp *shapePlan) args(dst []any) []any {
	dst = append(dst, 7+2*len(sp.quotas))
	dst = append(dst, sp.rateQ, sp.minQ, strconv.FormatFloat(sp.pace, 'g', -1, 64), sp.incQ, sp.quiet, sp.dcap, len(sp.quotas))
	for _, q := range sp.quotas {
		dst = append(dst, q.per, q.limit)
	}
	return dst
}

// adaptiveArgs are the adaptive arguments of pause.lua: rate, min,
// decrease, increase, quiet, dcap.
func (sp *shapePlan) adaptiveArgs(dst []any) []any {
	return append(dst, sp.rateQ, sp.minQ, strconv.FormatFloat(sp.dec, 'g', -1, 64), sp.incQ, sp.quiet, sp.dcap)
}
