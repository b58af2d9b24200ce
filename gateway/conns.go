package gateway

import (
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/notifier/notifier/internal/connlimit"
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
	g     *Gateway
	table *connlimit.Table

	mu      sync.Mutex
	reserve *os.File // a descriptor to free when none is left
	closed  bool
	backoff time.Duration
}

func newConnLimiter(ln net.Listener, g *Gateway, maxConns, perIP int) *connLimiter {
	l := &connLimiter{Listener: ln, g: g, table: connlimit.New(maxConns, perIP)}
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
		if cc := l.admit(c); cc != nil {
			return cc, nil
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
		if victim := l.table.EvictIdle(); victim != nil {
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
func (l *connLimiter) admit(c net.Conn) *connlimit.Conn {
	counted, victims, why := l.table.Admit(c)
	for _, v := range victims {
		_ = v.Close()
	}
	switch why {
	case connlimit.PerAddr:
		l.g.throttledWarn(" conns", "too many connections from one address: refused (429)")
		refuseConn(c, refusedPerIP, true)
	case connlimit.Full:
		l.g.throttledWarn(" conns", "too many connections: refused (503)")
		refuseConn(c, refusedOverloaded, true)
	}
	return counted
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
