package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// serveGateway serves a gateway with cfg (one key, "secret-key-1", when it
// names none) on a free port until the test ends, and returns it with its
// address.
func serveGateway(t *testing.T, cfg Config) (*Gateway, string) {
	t.Helper()
	js, err := jetstream.New(testenv.NATS(t).Conn())
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Keys) == 0 {
		cfg.Keys = []Key{{Name: "k", SHA256: HashKey("secret-key-1"), Rate: 100, Burst: 100}}
	}
	g, err := New(cfg, Deps{Redis: testenv.Redis(t).Client(), KeyPrefix: "declared:", Publisher: queue.NewPublisher(js)})
	if err != nil {
		t.Fatal(err)
	}
	srv := g.Server()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Serve(srv, ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(); <-done })
	return g, ln.Addr().String()
}

// exchange sends req on a connection of its own and reads the answer.
func exchange(t *testing.T, addr, req string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestDeclaredSizesAreForgottenOnEveryRoute: the size a request declares
// over MaxRequestBytes is kept (headerReceived) only until its answer, on
// every route: a GET of /healthz, an unknown path or a wrong method with a
// large Content-Length left it behind for good (the map holds the pooled
// request's address), and the server's next request read into those
// headers was answered the earlier one's 413 when it failed to parse.
func TestDeclaredSizesAreForgottenOnEveryRoute(t *testing.T) {
	g, addr := serveGateway(t, Config{})
	for i := range 30 {
		target := []string{"/healthz", "/nope", "/v1/notifications"}[i%3]
		exchange(t, addr, "GET "+target+" HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n\r\n"+strings.Repeat("x", 8192))
	}
	n := 0
	g.declared.Range(func(any, any) bool { n++; return true })
	if n != 0 {
		t.Errorf("after 30 answered requests declaring 5 MB: %d declared sizes kept, want none", n)
	}
	for i := range 10 {
		exchange(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n\r\n"+strings.Repeat("x", 8192))
		status, body := exchange(t, addr, "POST /v1/notifications HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\nTransfer-Encoding: gzip\r\n\r\n")
		if status != http.StatusBadRequest || !strings.Contains(body, TypeMalformed) {
			t.Fatalf("try %d: an unsupported Transfer-Encoding after another client's 5 MB GET: %d %s, want 400 %s", i, status, body, TypeMalformed)
		}
	}
}
