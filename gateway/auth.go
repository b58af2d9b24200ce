package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/notifier/notifier/internal/connlimit"
)

// authenticate finds the key of the request's bearer token, comparing its
// SHA-256 with every configured key's in constant time (no early exit, so
// the time does not say which key, or how much of one, matched).
func (g *Gateway) authenticate(c *fasthttp.RequestCtx) (*apiKey, bool) {
	auth := c.Request.Header.Peek("Authorization")
	if len(auth) <= len(authorizationBearer) || !bytes.EqualFold(auth[:len(authorizationBearer)], []byte(authorizationBearer)) {
		return nil, false
	}
	sum := sha256.Sum256(bytes.TrimSpace(auth[len(authorizationBearer):]))
	found := -1
	for i := range g.keys {
		if subtle.ConstantTimeCompare(sum[:], g.keys[i].hash) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil, false
	}
	return &g.keys[found], true
}

// clientIP is the address failed authentications and requests in flight
// are counted against: client_ip_header's last entry when configured and
// valid, else the connection's peer; an IPv6 address's /64 (addrKey).
func (g *Gateway) clientIP(c *fasthttp.RequestCtx) netip.Addr {
	if h := g.cfg.ClientIPHeader; h != "" {
		if v := c.Request.Header.PeekAll(h); len(v) > 0 {
			last := v[len(v)-1]
			if i := bytes.LastIndexByte(last, ','); i >= 0 {
				last = last[i+1:]
			}
			if ip, err := netip.ParseAddr(string(bytes.TrimSpace(last))); err == nil {
				return addrKey(ip)
			}
		}
	}
	return peerAddr(c.RemoteAddr())
}

// peerAddr is a connection's remote IP as the per-address bounds count
// it (addrKey; the zero Addr when it has none).
func peerAddr(a net.Addr) netip.Addr { return connlimit.Key(a) }

// addrKey is the address every per-address bound counts ip under (the
// connections, the requests in flight, the failed authentications and
// their block): connlimit.AddrKey, an IPv6 address's /64.
func addrKey(ip netip.Addr) netip.Addr { return connlimit.AddrKey(ip) }

// ipString is an address as the failed-authentication key names it: an
// IPv6 one as its /64 (2001:db8:1:2::/64).
func ipString(ip netip.Addr) string {
	switch {
	case !ip.IsValid():
		return "unknown"
	case ip.Is6():
		return ip.String() + "/64"
	}
	return ip.String()
}

// maxBlocked bounds the addresses an instance remembers as blocked.
const maxBlocked = 100_000

// blocklist holds the client IPs over the failed-authentication limit as
// this instance learnt it from Redis, each until its window ends. Bounded:
// at most maxBlocked addresses (full, the lapsed ones are dropped, then a
// tenth of the rest). Safe for concurrent use.
type blocklist struct {
	n  atomic.Int64 // len(m), read without the lock
	mu sync.Mutex
	m  map[netip.Addr]time.Time
}

// blockedFor is how long ip stays blocked at now (0: not blocked).
func (b *blocklist) blockedFor(ip netip.Addr, now time.Time) time.Duration {
	if b.n.Load() == 0 {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	until, ok := b.m[ip]
	if !ok {
		return 0
	}
	left := until.Sub(now)
	if left <= 0 {
		delete(b.m, ip)
		b.n.Store(int64(len(b.m)))
		return 0
	}
	return left
}

func (b *blocklist) block(ip netip.Addr, now time.Time, d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[netip.Addr]time.Time{}
	}
	if len(b.m) >= maxBlocked {
		for k, until := range b.m {
			if !until.After(now) {
				delete(b.m, k)
			}
		}
		for k := range b.m { // map order: an arbitrary tenth
			if len(b.m) < maxBlocked*9/10 {
				break
			}
			delete(b.m, k)
		}
	}
	b.m[ip] = now.Add(d)
	b.n.Store(int64(len(b.m)))
}

// refuseBlocked answers 429 too-many-auth-failures to a request from an
// address blocked for left more, with the "auth" RateLimit fields.
func (g *Gateway) refuseBlocked(c *fasthttp.RequestCtx, left time.Duration) {
	lim := g.cfg.AuthFailures
	g.setAuthHeaders(&c.Response.Header, 0, ceilSeconds(left))
	g.rejected.add(unauthenticatedLabel)
	g.write(c, unauthenticatedLabel, answer{status: http.StatusTooManyRequests, retryAfter: left,
		body: problemOf(http.StatusTooManyRequests, TypeAuthFailures, "Too many failed authentications",
			fmt.Sprintf("more than %d failed authentications from this address in %s; retry after the Retry-After seconds", lim.Limit, lim.Window))})
}

// setAuthHeaders writes the RateLimit fields of the failed-authentication
// limit: policy "auth", failures left, seconds until the window ends.
func (g *Gateway) setAuthHeaders(h *fasthttp.ResponseHeader, remaining int, reset int64) {
	lim := g.cfg.AuthFailures
	h.Set("RateLimit-Policy", g.authPolicy)
	h.Set("RateLimit", fmt.Sprintf(`"auth";r=%d;t=%d`, remaining, reset))
	if g.cfg.LegacyHeaders {
		g.setLegacyHeaders(h, fmt.Sprint(lim.Limit), int64(remaining), reset)
	}
}

// authFailed answers a request without a valid key: 401, or 429 once its
// client IP is over gateway.auth_failures (counted in Redis, so across the
// fleet; then blocked here, before any key lookup, until the window ends).
// The body is not read (see finishUnread).
func (g *Gateway) authFailed(ctx context.Context, c *fasthttp.RequestCtx, ip netip.Addr) {
	lim := g.cfg.AuthFailures
	n, left, err := failAuth(ctx, g.rdb, g.prefix, ipString(ip), lim.Window)
	if err != nil {
		g.throttledWarn(" redis", "failed authentication not counted: answered 503", "err", err)
		g.write(c, unauthenticatedLabel, answer{status: http.StatusServiceUnavailable, retryAfter: time.Second,
			body: problemOf(http.StatusServiceUnavailable, TypeUnavailable, "Service unavailable", "the limit store cannot be reached; retry later")})
		return
	}
	if n > lim.Limit {
		g.blocked.block(ip, g.now(), left)
		g.refuseBlocked(c, left)
		return
	}
	g.setAuthHeaders(&c.Response.Header, max(0, lim.Limit-n), ceilSeconds(left))
	g.rejected.add(unauthenticatedLabel)
	c.Response.Header.Set("WWW-Authenticate", `Bearer realm="notifier"`)
	g.write(c, unauthenticatedLabel, answer{status: http.StatusUnauthorized,
		body: problemOf(http.StatusUnauthorized, TypeUnauthorized, "Unauthorized", "send Authorization: Bearer <API key>")})
}
