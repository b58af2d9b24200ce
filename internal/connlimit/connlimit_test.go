package connlimit_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/notifier/notifier/internal/connlimit"
)

// conn is a connection whose peer is ip (only RemoteAddr is asked).
type conn struct {
	net.Conn
	ip     string
	closed bool
}

func (c *conn) RemoteAddr() net.Addr { return &net.TCPAddr{IP: net.ParseIP(c.ip), Port: 4711} }
func (c *conn) Close() error         { c.closed = true; return nil }

// TestBoundsCloseTheIdleLongest: at the total bound the connection idle
// longest of any address is counted out for a newcomer; at an address's
// bound only that address's idle longest, never another's; with none idle
// the newcomer is refused, saying which bound; a busy connection is never
// chosen; closing a connection counts it out once.
func TestBoundsCloseTheIdleLongest(t *testing.T) {
	tb := connlimit.New(3, 2)
	admit := func(ip string) (*connlimit.Conn, []net.Conn, connlimit.Refusal) {
		t.Helper()
		return tb.Admit(&conn{ip: ip})
	}
	a1, v, why := admit("10.0.0.1")
	if a1 == nil || len(v) != 0 || why != connlimit.Admitted {
		t.Fatalf("first connection: %v, %v, %v", a1, v, why)
	}
	a2, _, _ := admit("10.0.0.1")
	b1, _, _ := admit("10.0.0.2")
	a1.Idle()
	b1.Idle()
	a2.Busy()
	// Address 10.0.0.1 at its bound of 2: its own idle one (a1) goes.
	a3, v, why := admit("10.0.0.1")
	if a3 == nil || why != connlimit.Admitted || len(v) != 1 || v[0].(*conn) != a1.Conn.(*conn) {
		t.Fatalf("a third of one address: %v, victims %v, %v; want a1 closed for it", a3, v, why)
	}
	// 10.0.0.1 at its bound, both busy: refused, b1 (another's) kept.
	a3.Busy()
	if c, v, why := admit("10.0.0.1"); c != nil || len(v) != 0 || why != connlimit.PerAddr {
		t.Fatalf("an address at its bound, none idle: %v, victims %v, %v; want refused PerAddr, no victim", c, v, why)
	}
	// The total of 3 held: another address takes b1's place, idle longest.
	c1, v, why := admit("10.0.0.3")
	if c1 == nil || len(v) != 1 || v[0].(*conn) != b1.Conn.(*conn) {
		t.Fatalf("a newcomer at the total bound: %v, victims %v, %v; want b1 closed for it", c1, v, why)
	}
	c1.Busy()
	if c, v, why := admit("10.0.0.4"); c != nil || len(v) != 0 || why != connlimit.Full {
		t.Fatalf("the total held, none idle: %v, victims %v, %v; want refused Full", c, v, why)
	}
	if open, idle := tb.Stats(); open != 3 || idle != 0 {
		t.Fatalf("stats %d open, %d idle; want 3, 0", open, idle)
	}
	_ = c1.Close()
	_ = c1.Close() // counted out once
	if open, _ := tb.Stats(); open != 2 {
		t.Fatalf("%d open after a close, want 2", open)
	}
	if c, _, why := admit("10.0.0.4"); c == nil || why != connlimit.Admitted {
		t.Fatalf("after a close: %v, %v; want admitted", c, why)
	}
}

// TestAddrKeyCountsAnIPv6SubscriberOnce: an IPv6 address counts by its
// /64, an IPv4-mapped one as the IPv4 address.
func TestAddrKeyCountsAnIPv6SubscriberOnce(t *testing.T) {
	for in, want := range map[string]string{
		"2001:db8:1:2:aaaa::1": "2001:db8:1:2::",
		"2001:db8:1:2:bbbb::9": "2001:db8:1:2::",
		"::ffff:192.0.2.7":     "192.0.2.7",
		"192.0.2.7":            "192.0.2.7",
	} {
		if got := connlimit.AddrKey(netip.MustParseAddr(in)); got != netip.MustParseAddr(want) {
			t.Errorf("AddrKey(%s) = %s, want %s", in, got, want)
		}
	}
}
