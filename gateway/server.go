package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/notifier/notifier/internal/connlimit"
)

// Server is a fasthttp server for the gateway: requests of at most
// MaxRequestBytes, read as a stream so that an oversized one gets the
// gateway's own 413; headers of at most 16 KiB; header_timeout for the
// headers (the server's ReadTimeout: from the connection's opening, or a
// kept-alive request's first byte), then read_timeout for the body (set
// by headerReceived), idle_timeout between requests; a request it cannot parse answered with a problem (400,
// 408, 413, 431) and logged without its content (method and route, size,
// reason; at most a line a second); its own errors logged the same way.
// Serve it with Gateway.Serve, which bounds its connections.
func (g *Gateway) Server() *fasthttp.Server {
	return &fasthttp.Server{
		Handler:                      g.Handle,
		HeaderReceived:               g.headerReceived,
		ErrorHandler:                 g.malformed,
		Logger:                       serverLogger{g},
		ConnState:                    g.connState,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		SecureErrorLogMessage:        true,
		MaxRequestBodySize:           MaxRequestBytes,
		ReadBufferSize:               16 << 10,
		ReadTimeout:                  g.cfg.HeaderTimeout, // the body gets read_timeout (headerReceived)
		WriteTimeout:                 g.cfg.PublishTimeout + 30*time.Second,
		IdleTimeout:                  g.cfg.IdleTimeout,
		CloseOnShutdown:              true,
		// The listener (Serve) bounds the connections; fasthttp's own
		// bound counts the goroutines serving them, which outlive a
		// connection closed for a new one by a moment: twice as many,
		// so that it is never the one reached (a connect storm of
		// 200,000 reached max_conns + 64 once).
		Concurrency: 2*g.maxConns + 64,
	}
}

// Serve serves srv (made by Server) on ln until srv shuts down, within the
// connection bounds of gateway.shed (see connLimiter): an accept error,
// out of file descriptors included, never ends it.
func (g *Gateway) Serve(srv *fasthttp.Server, ln net.Listener) error {
	l := newConnLimiter(ln, g, g.maxConns, g.cfg.Shed.MaxConnsPerIP)
	g.connsMu.Lock()
	g.conns = append(g.conns, l)
	g.connsMu.Unlock()
	return srv.Serve(l)
}

// ConnStats are the connections open on Serve's listeners and how many of
// them are idle (no request yet, or between two).
func (g *Gateway) ConnStats() (open, idle int) {
	g.connsMu.Lock()
	defer g.connsMu.Unlock()
	for _, l := range g.conns {
		o, i := l.table.Stats()
		open, idle = open+o, idle+i
	}
	return open, idle
}

// InFlight is the number of requests of POST /v1/notifications being
// handled (one with a key counts once its body is read).
func (g *Gateway) InFlight() int {
	g.inflight.mu.Lock()
	defer g.inflight.mu.Unlock()
	return g.inflight.total
}

// connState passes the server's connection states to the listeners: a
// new connection and one between requests are idle (closable for
// another), a request makes it busy.
func (g *Gateway) connState(c net.Conn, s fasthttp.ConnState) {
	cc, ok := c.(*connlimit.Conn)
	if !ok {
		return
	}
	switch s {
	case fasthttp.StateNew, fasthttp.StateIdle:
		cc.Idle()
	default:
		cc.Busy()
	}
}

// serverLogger is the fasthttp server's Logger: it writes only the
// message's constant text (never its arguments, which can quote a
// request: a header, an API key, a body), at most a line a second.
type serverLogger struct{ g *Gateway }

func (l serverLogger) Printf(format string, _ ...any) {
	what := format
	if i := strings.IndexAny(what, "%:"); i >= 0 {
		what = what[:i]
	}
	l.g.throttledWarn(" server", "http server error", "what", strings.TrimSpace(what))
}

// malformed is the server's ErrorHandler: a request it could not read is
// answered with a problem, and logged by its method, route, declared size
// and the reason in the gateway's own words; never a header or the body.
func (g *Gateway) malformed(c *fasthttp.RequestCtx, err error) {
	status, typ, reason := classify(err)
	if cl, ok := g.declared.LoadAndDelete(&c.Request.Header); ok {
		// the body's first bytes did not come within refuseWait
		status, typ, reason = http.StatusRequestEntityTooLarge, TypeTooLarge, fmt.Sprintf("the body is %d bytes, more than %d", cl, MaxRequestBytes)
	}
	g.throttledWarn(" malformed", "malformed request", "method", knownMethod(c.Method()), "path", route(c.Path()),
		"content_length", c.Request.Header.ContentLength(), "reason", reason, "status", status)
	p := problemOf(status, typ, http.StatusText(status), reason)
	c.Response.Reset()
	c.Response.Header.SetContentType(problemContentType)
	c.Response.Header.Set("Cache-Control", "no-store")
	c.SetStatusCode(status)
	c.SetBody(mustJSON(p))
}

// headerReceived is the server's HeaderReceived, called once a request's
// headers are in, within header_timeout (the server's ReadTimeout): the
// body gets read_timeout from here. A request declaring a body over
// MaxRequestBytes is answered 413 whatever follows, so the server waits
// at most refuseWait for the first bytes of that body (which it reads
// before the handler runs) rather than read_timeout: a client that sent
// the headers alone, waiting, gets the 413 at once (from malformed, which
// finds the size in g.declared: the server forgets the request's headers
// when it fails to read its body).
func (g *Gateway) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if cl := h.ContentLength(); cl > MaxRequestBytes {
		g.declared.Store(h, cl)
		return fasthttp.RequestConfig{ReadTimeout: refuseWait}
	}
	g.declared.Delete(h)
	return fasthttp.RequestConfig{ReadTimeout: g.cfg.ReadTimeout}
}

// refuseWait is how long the server waits for the body of a request it
// will refuse for its declared size.
const refuseWait = 100 * time.Millisecond

// classify maps a parse error of the server to an answer and a reason,
// from the error's kind only.
func classify(err error) (int, string, string) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		return http.StatusRequestHeaderFieldsTooLarge, TypeMalformed, "the request headers are larger than 16 KiB"
	case errors.As(err, &ne) && ne.Timeout():
		return http.StatusRequestTimeout, TypeRequestTimeout, "the request did not arrive whole in time"
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return http.StatusRequestEntityTooLarge, TypeTooLarge, "the body is larger than 4 MiB"
	}
	msg := strings.ToLower(err.Error()) // matched, never written
	for _, r := range []struct{ in, reason string }{
		{"transfer-encoding", "an unsupported Transfer-Encoding"},
		{"content-length", "an invalid Content-Length"},
		{"chunk", "a malformed chunked body"},
		{"http version", "an unsupported HTTP version"},
		{"protocol", "an unsupported HTTP version"},
		{"host", "a missing or invalid Host"},
		{"uri", "an invalid request target"},
		{"method", "an invalid method"},
		{"header", "a malformed header"},
		{"eof", "the request ended early"},
	} {
		if strings.Contains(msg, r.in) {
			return http.StatusBadRequest, TypeMalformed, r.reason
		}
	}
	return http.StatusBadRequest, TypeMalformed, "not an HTTP/1.1 request"
}

// knownMethod is a method as logged: one of HTTP's, else "other".
func knownMethod(m []byte) string {
	switch string(m) {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return string(m)
	}
	return "other"
}

// route is a path as logged: one of the gateway's, else "other" (a path
// is the client's text and may carry anything).
func route(p []byte) string {
	for _, r := range []string{"/v1/notifications", "/healthz", "/readyz", "/metrics", "/openapi.json"} {
		if bytes.Equal(p, []byte(r)) {
			return r
		}
	}
	return "other"
}

// How much of a body left unread the server drops itself to keep the
// connection (fasthttp's own limit), how much more finishUnread does, and
// for how long.
const (
	serverDrains = 256 << 10
	drainBytes   = 2 * MaxRequestBytes
	drainTime    = 2 * time.Second
)

// finishUnread is called once an answer was given without reading the
// whole body (a 401, a 429 from the bound, a 413, a 415). Up to
// serverDrains the server drops the rest and keeps the connection. Past
// that, or of unknown length, the answer is written at once and the
// connection closed after it; up to drainBytes the rest is read and
// dropped first, for at most drainTime: closed with data unread, a socket
// resets the connection, and the reset can reach the client before the
// answer it should read. The answer is sent before that wait, so a client
// that declared a large body and waits to send it gets it at once.
func finishUnread(c *fasthttp.RequestCtx) {
	cl := c.Request.Header.ContentLength()
	if cl >= 0 && cl <= serverDrains {
		return
	}
	c.Response.SetConnectionClose()
	var answer bytes.Buffer
	if _, err := c.Response.WriteTo(&answer); err != nil {
		return // the server writes it, and closes
	}
	// The server writes nothing; the hijacked connection gets the answer,
	// then the drain, then the close.
	c.HijackSetNoResponse(true)
	drain := cl <= drainBytes
	c.Hijack(func(conn net.Conn) {
		_ = conn.SetWriteDeadline(time.Now().Add(drainTime))
		if _, err := conn.Write(answer.Bytes()); err != nil || !drain {
			return
		}
		_ = conn.SetReadDeadline(time.Now().Add(drainTime))
		_, _ = io.CopyN(io.Discard, conn, drainBytes)
	})
}
