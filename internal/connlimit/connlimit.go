// Package connlimit counts a listener's open connections in total and per
// peer address and keeps the idle ones in the order they fell idle, so that
// a server can bound its connections without letting one client hold them:
// at a bound, the connection of that scope idle longest (no request read
// yet, or between two) is closed for the newcomer, and only with none idle
// is the newcomer refused. The gateway (fasthttp) and the metrics port
// (net/http) share it; each adds what it answers a refused connection and
// reports its server's connection states through Conn.Idle and Conn.Busy.
package connlimit

import (
	"container/list"
	"net"
	"net/netip"
	"sync"
)

// Refusal says why Admit refused a connection.
type Refusal int

const (
	// Admitted: the connection is counted in.
	Admitted Refusal = iota
	// PerAddr: its address holds its bound, none of them idle.
	PerAddr
	// Full: the total bound is held, none idle.
	Full
)

// Table is the count. Safe for concurrent use.
type Table struct {
	max, perAddr int

	mu    sync.Mutex
	total int
	byIP  map[netip.Addr]*addrConns
	idle  list.List // *Conn, idle longest first
}

// addrConns are one peer address's open connections.
type addrConns struct {
	n    int
	idle list.List // *Conn, idle longest first
}

// Conn is a connection counted by a Table; closing it counts it out.
type Conn struct {
	net.Conn
	t        *Table
	ip       netip.Addr
	idleAt   *list.Element // in t.idle while idle
	ipIdleAt *list.Element // in t.byIP[ip].idle while idle
	released bool          // counted out (under t.mu)
}

// New is a Table of at most maxConns connections, perAddr of one address
// (Key).
func New(maxConns, perAddr int) *Table {
	return &Table{max: maxConns, perAddr: perAddr, byIP: map[netip.Addr]*addrConns{}}
}

// Admit counts c in, or says why not (then c is not counted, and the
// caller answers and closes it). To make room it counts out the
// connections idle longest: of c's address when that holds its bound,
// else of any address when the total is held (never another address's for
// a newcomer its own bound refuses). It returns them in victims, for the
// caller to close.
func (t *Table) Admit(c net.Conn) (counted *Conn, victims []net.Conn, why Refusal) {
	ip := Key(c.RemoteAddr())
	t.mu.Lock()
	if ac := t.byIP[ip]; ac != nil && ac.n >= t.perAddr {
		if v := t.evictLocked(ac); v != nil {
			victims = append(victims, v)
		}
	}
	if ac := t.byIP[ip]; (ac == nil || ac.n < t.perAddr) && t.total >= t.max {
		if v := t.evictLocked(nil); v != nil {
			victims = append(victims, v)
		}
	}
	ac := t.byIP[ip]
	switch {
	case ac != nil && ac.n >= t.perAddr:
		why = PerAddr
	case t.total >= t.max:
		why = Full
	default:
		if ac == nil {
			ac = &addrConns{}
			t.byIP[ip] = ac
		}
		t.total++
		ac.n++
		counted = &Conn{Conn: c, t: t, ip: ip}
	}
	t.mu.Unlock()
	return counted, victims, why
}

// Stats are the connections counted and how many of them are idle.
func (t *Table) Stats() (open, idle int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total, t.idle.Len()
}

// EvictIdle counts out the connection idle longest and returns it for the
// caller to close (nil: none is idle).
func (t *Table) EvictIdle() net.Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.evictLocked(nil)
}

// Idle notes c idle: closable for a newcomer. A new connection is idle
// until its first request is read.
func (c *Conn) Idle() {
	t := c.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.released || c.idleAt != nil {
		return
	}
	c.idleAt = t.idle.PushBack(c)
	if ac := t.byIP[c.ip]; ac != nil {
		c.ipIdleAt = ac.idle.PushBack(c)
	}
}

// Busy notes c busy with a request.
func (c *Conn) Busy() {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	c.t.busyLocked(c)
}

// Close counts the connection out and closes it.
func (c *Conn) Close() error {
	c.t.mu.Lock()
	c.t.releaseLocked(c)
	c.t.mu.Unlock()
	return c.Conn.Close()
}

// evictLocked counts out the connection idle longest, of ac's address or
// of any (ac nil), and returns it for the caller to close once t.mu is
// released (nil: none is idle).
func (t *Table) evictLocked(ac *addrConns) net.Conn {
	var e *list.Element
	if ac != nil {
		e = ac.idle.Front()
	} else {
		e = t.idle.Front()
	}
	if e == nil {
		return nil
	}
	c := e.Value.(*Conn)
	t.releaseLocked(c)
	return c.Conn
}

// releaseLocked counts c out once.
func (t *Table) releaseLocked(c *Conn) {
	if c.released {
		return
	}
	c.released = true
	t.busyLocked(c)
	t.total--
	if ac := t.byIP[c.ip]; ac != nil {
		if ac.n--; ac.n <= 0 {
			delete(t.byIP, c.ip)
		}
	}
}

func (t *Table) busyLocked(c *Conn) {
	if c.idleAt != nil {
		t.idle.Remove(c.idleAt)
		c.idleAt = nil
	}
	if c.ipIdleAt != nil {
		if ac := t.byIP[c.ip]; ac != nil {
			ac.idle.Remove(c.ipIdleAt)
		}
		c.ipIdleAt = nil
	}
}

// Key is the address a connection from a is counted under (the zero Addr
// when a is not TCP's): AddrKey of its IP.
func Key(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		return AddrKey(ta.AddrPort().Addr())
	}
	return netip.Addr{}
}

// AddrKey is the address every per-address bound counts ip under: an IPv4
// address (or an IPv4-mapped IPv6 one) itself, an IPv6 address's /64, the
// least a subscriber is given: keyed per /128, anyone with a /64 had 2^64
// addresses to spread over and passed every per-address bound.
func AddrKey(ip netip.Addr) netip.Addr {
	ip = ip.Unmap().WithZone("")
	if !ip.Is6() {
		return ip
	}
	return netip.PrefixFrom(ip, 64).Masked().Addr()
}
