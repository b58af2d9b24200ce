package gateway_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// stallProxy forwards TCP connections to target. Stall withholds what the
// server sends (it receives and stores, its answers wait in the proxy),
// Resume lets it through: a JetStream that takes a publish and does not
// acknowledge it. It stops when the test ends.
type stallProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cond   *sync.Cond
	stall  bool
	closed bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: target}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Go(p.serve)
	t.Cleanup(p.close)
	return p
}

// URL is the proxy's nats:// URL.
func (p *stallProxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *stallProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(s, c, false) })
		p.wg.Go(func() { p.pipe(c, s, true) })
	}
}

// pipe copies src to dst, waiting out a stall first when stallable.
func (p *stallProxy) pipe(dst, src net.Conn, stallable bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if stallable {
				p.mu.Lock()
				for p.stall && !p.closed {
					p.cond.Wait()
				}
				p.mu.Unlock()
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
}

func (p *stallProxy) setStall(on bool) {
	p.mu.Lock()
	p.stall = on
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *stallProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	conns := p.conns
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}

// rawResponse is an answer read from a raw connection.
type rawResponse struct {
	status int
	header http.Header
	body   string
	err    error
}

// rawExchange sends req, as is, on a new connection to addr (host:port)
// and reads one answer within timeout.
func rawExchange(addr, req string, timeout time.Duration) rawResponse {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return rawResponse{err: err}
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, req); err != nil {
		return rawResponse{err: err}
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return rawResponse{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return rawResponse{status: resp.StatusCode, header: resp.Header, body: string(b), err: err}
}

// rawHalfClose sends req, as is, on a new connection to addr, ends its
// sending side (the server reads the end of the request there) and reads
// one answer within 5 s.
func rawHalfClose(t *testing.T, addr, req string) rawResponse {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return rawResponse{err: err}
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		return rawResponse{err: err}
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return rawResponse{err: err}
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return rawResponse{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return rawResponse{status: resp.StatusCode, header: resp.Header, body: string(b), err: err}
}

// hostOf is a server URL's host:port.
func hostOf(url string) string { return strings.TrimPrefix(url, "http://") }

// rawConn is a client connection for requests written as they are.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

// dialFrom connects to addr from the local address from (127.0.0.x).
func dialFrom(from, addr string) (*rawConn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &rawConn{Conn: c, br: bufio.NewReader(c)}, nil
}

// exchange sends req and reads its answer (10 s at most).
func (c *rawConn) exchange(req string) rawResponse {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		return rawResponse{err: err}
	}
	return c.read()
}

// read reads an answer (10 s at most).
func (c *rawConn) read() rawResponse {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return rawResponse{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return rawResponse{status: resp.StatusCode, header: resp.Header, body: string(b), err: err}
}

// closedByServer reports whether the server closed the connection
// (within 2 s).
func (c *rawConn) closedByServer() bool {
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := c.br.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// validRequest is a POST of one valid job with key, kept alive.
func validRequest(key string) string {
	body := `{"user_id":"u1","channel":"sms","to":"+14155550123","body":"hi"}`
	return "POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}
