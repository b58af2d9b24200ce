package gateway

import (
	"container/list"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// FDReserve is how many file descriptors the gateway keeps for what is not
// a client's connection (the Redis pool, NATS, the listener, the logs):
// shed.max_conns is lowered at start to RLIMIT_NOFILE less this.
const FDReserve = 128

// connLimiter is the listener of Gateway.Serve: it bounds the open
// connections in total (shed.max_conns) and per peer address
// (shed.max_conns_per_ip). At a bound, the connection of that scope that
// has been idle longest (no request yet, or between two) is closed for the
// new one; with none idle the new one is refused with a short answer. An
// accept error never ends it (a client cannot stop the server): running
// out of file descriptors, it closes the longest-idle connection, answers
// one waiting connection 503 on a descriptor it keeps in reserve, and
// logs at most one line a second. Safe for concurrent use.
type connLimiter struct {
	net.Listener
	g          *Gateway
	max, perIP int

	mu      sync.Mutex
	total   int
	byIP    map[netip.Addr]*ipConns
	idle    list.List // *trackedConn, longest idle first
	reserve *os.File  // a descriptor to free when none is left
	closed  bool
	backoff time.Duration
}

// ipConns are one peer address's open connections.
type ipConns struct {
	n    int
	idle list.List // *trackedConn, longest idle first
}

// trackedConn is a connection counted by a connLimiter.
type trackedConn struct {
	net.Conn
	l        *connLimiter
	ip       netip.Addr
	idleAt   *list.Element // in l.idle while idle
	ipIdleAt *list.Element // in byIP[ip].idle while idle
	released bool          // counted out (under l.mu)
}

func newConnLimiter(ln net.Listener, g *Gateway, maxConns, perIP int) *connLimiter {
	l := &connLimiter{Listener: ln, g: g, max: maxConns, perIP: perIP, byIP: map[netip.Addr]*ipConns{}}
	l.reserve, _ = os.Open(os.DevNull) // without it, exhaustion is survived unanswered
	return l
}

// Accept returns the next connection within the bounds.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			l.acceptFailed(err)
			continue
		}
		l.backoff = 0
		if tc := l.admit(c); tc != nil {
			return tc, nil
		}
	}
}

// acceptFailed survives an accept error: out of descriptors it frees one
// (the longest-idle connection, else the reserve to answer a waiting
// client); then it waits a little, longer while errors go on (5 ms
// doubling to 1 s, as net/http does).
func (l *connLimiter) acceptFailed(err error) {
	exhausted := errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
	if exhausted {
		l.g.throttledWarn(" accept", "out of file descriptors: closing idle connections, answering 503", "err", err)
		if victim := l.evictIdle(); victim != nil {
			_ = victim.Close()
			return // a descriptor is free: accept again at once
		}
		l.answerFromReserve()
	} else {
		l.g.throttledWarn(" accept", "accept failed: retrying", "err", err)
	}
	if l.backoff == 0 {
		l.backoff = 5 * time.Millisecond
	} else {
		l.backoff = min(2*l.backoff, time.Second)
	}
	time.Sleep(l.backoff)
}

// answerFromReserve frees the reserved descriptor, accepts one waiting
// connection on it, answers it 503 and closes it, and reserves a
// descriptor again.
func (l *connLimiter) answerFromReserve() {
	l.mu.Lock()
	r := l.reserve
	l.reserve = nil
	l.mu.Unlock()
	if r == nil {
		l.reserveAgain()
		return
	}
	_ = r.Close()
	if tl, ok := l.Listener.(*net.TCPListener); ok {
		_ = tl.SetDeadline(time.Now().Add(10 * time.Millisecond))
		defer func() { _ = tl.SetDeadline(time.Time{}) }()
	}
	if c, err := l.Listener.Accept(); err == nil {
		refuseConn(c, refusedOverloaded, false)
	}
	l.reserveAgain()
}

func (l *connLimiter) reserveAgain() {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reserve != nil || l.closed {
		_ = f.Close()
		return
	}
	l.reserve = f
}

// Close closes the listener and frees the reserve.
func (l *connLimiter) Close() error {
	l.mu.Lock()
	l.closed = true
	if l.reserve != nil {
		_ = l.reserve.Close()
		l.reserve = nil
	}
	l.mu.Unlock()
	return l.Listener.Close()
}

// admit counts c in, closing an idle connection to make room if a bound
// is reached, or refuses it (nil).
func (l *connLimiter) admit(c net.Conn) *trackedConn {
	ip := peerAddr(c.RemoteAddr())
	var victims []net.Conn
	l.mu.Lock()
	if ic := l.byIP[ip]; ic != nil && ic.n >= l.perIP {
		if v := l.evictLocked(ic); v != nil {
			victims = append(victims, v)
		}
	}
	// Another address's idle connection is closed only for a newcomer that
	// then takes the place: not for one its own address's bound refuses.
	if ic := l.byIP[ip]; (ic == nil || ic.n < l.perIP) && l.total >= l.max {
		if v := l.evictLocked(nil); v != nil {
			victims = append(victims, v)
		}
	}
	ic := l.byIP[ip]
	perIP := ic != nil && ic.n >= l.perIP
	full := l.total >= l.max
	var tc *trackedConn
	if !perIP && !full {
		if ic == nil {
			ic = &ipConns{}
			l.byIP[ip] = ic
		}
		l.total++
		ic.n++
		tc = &trackedConn{Conn: c, l: l, ip: ip}
	}
	l.mu.Unlock()
	for _, v := range victims {
		_ = v.Close()
	}
	switch {
	case perIP:
		l.g.throttledWarn(" conns", "too many connections from one address: refused (429)")
		refuseConn(c, refusedPerIP, true)
	case full:
		l.g.throttledWarn(" conns", "too many connections: refused (503)")
		refuseConn(c, refusedOverloaded, true)
	}
	return tc
}

// evictIdle counts out the connection idle longest and returns it for the
// caller to close (nil: none is idle).
func (l *connLimiter) evictIdle() net.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.evictLocked(nil)
}

// evictLocked counts out the connection idle longest, of ic's address or
// of any (ic nil), and returns it for the caller to close once l.mu is
// released (nil: none is idle).
func (l *connLimiter) evictLocked(ic *ipConns) net.Conn {
	var e *list.Element
	if ic != nil {
		e = ic.idle.Front()
	} else {
		e = l.idle.Front()
	}
	if e == nil {
		return nil
	}
	tc := e.Value.(*trackedConn)
	l.releaseLocked(tc)
	return tc.Conn
}

// releaseLocked counts tc out once.
func (l *connLimiter) releaseLocked(tc *trackedConn) {
	if tc.released {
		return
	}
	tc.released = true
	l.setBusyLocked(tc)
	l.total--
	if ic := l.byIP[tc.ip]; ic != nil {
		ic.n--
		if ic.n <= 0 {
			delete(l.byIP, tc.ip)
		}
	}
}

func (l *connLimiter) setBusyLocked(tc *trackedConn) {
	if tc.idleAt != nil {
		l.idle.Remove(tc.idleAt)
		tc.idleAt = nil
	}
	if tc.ipIdleAt != nil {
		if ic := l.byIP[tc.ip]; ic != nil {
			ic.idle.Remove(tc.ipIdleAt)
		}
		tc.ipIdleAt = nil
	}
}

// state is the server's ConnState hook: a new connection and one between
// requests are idle (closable for another), a request makes it busy.
func (l *connLimiter) state(c net.Conn, s fasthttp.ConnState) {
	tc, ok := c.(*trackedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if tc.released {
		return
	}
	switch s {
	case fasthttp.StateNew, fasthttp.StateIdle:
		if tc.idleAt == nil {
			tc.idleAt = l.idle.PushBack(tc)
			if ic := l.byIP[tc.ip]; ic != nil {
				tc.ipIdleAt = ic.idle.PushBack(tc)
			}
		}
	default:
		l.setBusyLocked(tc)
	}
}

// Close counts the connection out and closes it.
func (tc *trackedConn) Close() error {
	tc.l.mu.Lock()
	tc.l.releaseLocked(tc)
	tc.l.mu.Unlock()
	return tc.Conn.Close()
}

// The answers of a refused connection: complete HTTP/1.1 responses with a
// problem body, written before any request is read.
var (
	refusedOverloaded = rawProblem(503, "Service Unavailable", TypeOverloaded,
		"the gateway holds as many connections as it may; retry after the Retry-After seconds")
	refusedPerIP = rawProblem(429, "Too Many Requests", TypeTooManyConnections,
		"too many connections from this address; reuse one (keep-alive) or retry after the Retry-After seconds")
)

func rawProblem(status int, reason, typ, detail string) []byte {
	body := mustJSON(problemOf(status, typ, reason, detail))
	return []byte("HTTP/1.1 " + strconv.Itoa(status) + " " + reason + "\r\nContent-Type: " + problemContentType +
		"\r\nRetry-After: 1\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + string(body))
}

// refusers bounds the goroutines that answer refused connections while
// letting the client's request drain; past it a refused connection is
// answered and closed at once.
var refusers = make(chan struct{}, 64)

// refuseConn writes answer on c and closes it. With linger (and a free
// refuser) the close waits, at most half a second, for what the client
// sends: closed with data unread, a socket resets the connection, and the
// reset can reach the client before the answer.
func refuseConn(c net.Conn, answer []byte, linger bool) {
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, err := c.Write(answer)
	if err != nil || !linger {
		_ = c.Close()
		return
	}
	select {
	case refusers <- struct{}{}:
	default:
		_ = c.Close()
		return
	}
	go func() {
		defer func() { <-refusers }()
		if tc, ok := c.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		}
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		_, _ = io.CopyN(io.Discard, c, 64<<10)
		_ = c.Close()
	}()
}
