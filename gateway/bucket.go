package gateway

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// bucket is one of the gateway's token buckets as this instance knows it:
// its Redis form, and a lower bound of when it is full again (fullAt), so
// that a request the bound already refuses is refused without Redis.
type bucket struct {
	Bucket
	kind string // KindKey, KindTenant or KindCapacity: the RateLimit policy's name
	name string // the key's or tenant's name ("" for the capacity)
	// fullAt is a lower bound of when the bucket is full again, in ns on
	// the gateway's monotonic clock (since Gateway.base); math.MinInt64
	// while unknown. The bucket's state only moves later as tokens are
	// taken, so the bound can only be early.
	fullAt atomic.Int64

	policy      string  // RateLimit-Policy
	legacyLimit string  // X-RateLimit-Limit, RateLimit-Limit
	refused     encoded // the answer body of one job refused by this bucket
}

func newBucket(prefix, kind, name string, l Limit) *bucket {
	b := &bucket{Bucket: Bucket{Key: BucketKey(prefix, kind, name), Limit: l}, kind: kind, name: name}
	b.fullAt.Store(math.MinInt64)
	b.policy = fmt.Sprintf("%q;q=%d;w=%d", kind, l.Burst, max(1, int64(math.Ceil(float64(l.Burst)/l.Rate))))
	b.legacyLimit = strconv.Itoa(l.Burst)
	b.refused = mustJSON(b.refusal(1, l.Burst))
	return b
}

// refusal is the problem of a request of n jobs this bucket refused with
// left tokens left: 429 quota-exceeded for a key's or a tenant's, 503
// over-capacity for the capacity's.
func (b *bucket) refusal(n, left int) *problem {
	var what string
	switch b.kind {
	case KindCapacity:
		return problemOf(http.StatusServiceUnavailable, TypeOverCapacity, "Over capacity",
			fmt.Sprintf("the intake is at its capacity of %g jobs per second, %d at once, shared by every key; retry after the Retry-After seconds", b.Rate, b.Burst))
	case KindTenant:
		what = "this key's tenant " + b.name + " allows"
	default:
		what = "this key allows"
	}
	if n == 1 {
		return problemOf(http.StatusTooManyRequests, TypeQuotaExceeded, "Quota exceeded",
			fmt.Sprintf("%s %g jobs per second, %d at once; retry after the Retry-After seconds", what, b.Rate, b.Burst))
	}
	return problemOf(http.StatusTooManyRequests, TypeQuotaExceeded, "Quota exceeded",
		fmt.Sprintf("%d jobs asked for, %d left: %s %g jobs per second, %d at once; a batch is taken whole or not at all", n, left, what, b.Rate, b.Burst))
}

// em is the time x tokens take to refill: globallimit's em(x) (take.lua's),
// ceil(x·10^6/rate) µs.
func (b *bucket) em(x int) time.Duration {
	return time.Duration(math.Ceil(float64(x)*1e6/b.Rate)) * time.Microsecond
}

// localRefusal reports whether the bound refuses n tokens at now (since
// Gateway.base), with the Take it implies. Its Wait is never longer than
// the bucket in Redis would say (the bucket can only be emptier than the
// bound), so Retry-After stays honest.
func (b *bucket) localRefusal(now time.Duration, n int) (Take, bool) {
	at := b.fullAt.Load()
	untilFull := time.Duration(at) - now
	if at == math.MinInt64 || untilFull <= 0 {
		return Take{}, false
	}
	wait := untilFull + b.em(n) - b.em(b.Burst)
	if wait <= 0 {
		return Take{}, false
	}
	room := b.em(b.Burst) - untilFull
	left := 0
	if room > 0 {
		left = min(b.Burst, int(math.Floor(room.Seconds()*b.Rate)))
		for left > 0 && b.em(left) > room {
			left--
		}
	}
	return Take{Remaining: left, Wait: wait, Reset: untilFull}, true
}

// learn moves the bound to what a reply of Redis says, asked at start.
func (b *bucket) learn(start time.Duration, t Take) {
	// start, not now: the bound may only be early (the reply's Redis
	// instant lies between the two).
	at := int64(start + t.Reset)
	for {
		old := b.fullAt.Load()
		if at <= old || b.fullAt.CompareAndSwap(old, at) {
			return
		}
	}
}

// refusalOf returns the bucket of chain (ts[i] is chain[i]'s state) that
// refuses a request for longest, or -1 when none does.
func refusalOf(ts []Take) int {
	worst := -1
	for i, t := range ts {
		if t.Wait > 0 && (worst < 0 || t.Wait > ts[worst].Wait) {
			worst = i
		}
	}
	return worst
}

// tightest is the bucket of ts with the fewest tokens left (the last of
// equals: the most specific, a key's before its tenant's): the one the
// RateLimit fields describe.
func tightest(ts []Take) int {
	best := 0
	for i, t := range ts {
		if t.Remaining <= ts[best].Remaining {
			best = i
		}
	}
	return best
}

// localRefusal checks the bounds of every bucket of chain for n tokens:
// the index of the one refusing longest and its Take, or -1.
func localRefusal(chain []*bucket, now time.Duration, n int) (int, Take) {
	worst, wt := -1, Take{}
	for i, b := range chain {
		if t, refused := b.localRefusal(now, n); refused && (worst < 0 || t.Wait > wt.Wait) {
			worst, wt = i, t
		}
	}
	return worst, wt
}

// take takes n tokens from every bucket of k's chain: refused at once,
// without Redis, when a bound already refuses them, else by the buckets in
// Redis, whose answer moves the bounds. It returns whether they were
// taken, the bucket whose state the answer's RateLimit fields describe
// (the refusing one, else the tightest) and its state.
func (g *Gateway) take(ctx context.Context, k *apiKey, n int) (bool, *bucket, Take, error) {
	chain := k.chain
	start := time.Since(g.base)
	if i, t := localRefusal(chain, start, n); i >= 0 {
		return false, chain[i], t, nil
	}
	allowed, ts, err := g.buckets.Take(ctx, n, k.buckets...)
	if err != nil {
		return false, nil, Take{}, err
	}
	for i, b := range chain {
		b.learn(start, ts[i])
	}
	if i := refusalOf(ts); !allowed && i >= 0 {
		return false, chain[i], ts[i], nil
	}
	i := tightest(ts)
	return allowed, chain[i], ts[i], nil
}

// setBucketHeaders writes the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers for b as t left it: the policy
// (key, tenant or capacity) of quota q = burst over the window w =
// burst/rate seconds (the time an empty bucket takes to fill, rounded up),
// and r, the whole tokens left, with t, the seconds until the bucket is
// full again.
func (g *Gateway) setBucketHeaders(h *fasthttp.ResponseHeader, b *bucket, t Take) {
	reset := int64(math.Ceil(t.Reset.Seconds()))
	h.Set("RateLimit-Policy", b.policy)
	var buf [48]byte
	v := append(buf[:0], '"')
	v = append(v, b.kind...)
	v = append(v, `";r=`...)
	v = strconv.AppendInt(v, int64(t.Remaining), 10)
	v = append(v, ";t="...)
	v = strconv.AppendInt(v, reset, 10)
	h.SetBytesV("RateLimit", v)
	if g.cfg.LegacyHeaders {
		g.setLegacyHeaders(h, b.legacyLimit, int64(t.Remaining), reset)
	}
}

// setLegacyHeaders writes the fields of gateway.legacy_headers: the seed's
// RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset, and the same
// as X-RateLimit-*.
func (g *Gateway) setLegacyHeaders(h *fasthttp.ResponseHeader, limit string, remaining, reset int64) {
	var buf [20]byte
	r := strconv.AppendInt(buf[:0], remaining, 10)
	h.Set("X-RateLimit-Limit", limit)
	h.SetBytesV("X-RateLimit-Remaining", r)
	h.Set("RateLimit-Limit", limit)
	h.SetBytesV("RateLimit-Remaining", r)
	t := strconv.AppendInt(buf[:0], reset, 10)
	h.SetBytesV("X-RateLimit-Reset", t)
	h.SetBytesV("RateLimit-Reset", t)
}
