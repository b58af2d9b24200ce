package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/testenv"
)

// TestMetricsPortClientsCannotStarveTheDispatcher: clients of the metrics
// port (scraped by Prometheus, and the public end of Twilio's status
// callbacks) each send one GET /healthz on a kept-alive connection and
// then go quiet. A `notifier run` limited to 256 descriptors must still
// send a job published after them: the port must close idle connections
// (or bound them) rather than hold them, and the descriptors, forever.
func TestMetricsPortClientsCannotStarveTheDispatcher(t *testing.T) {
	t.Parallel()
	port := testenv.FreePort(t)
	w := newWorld(t, 100, "")
	setMetricsPort(t, w, port)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command("sh", "-c", `ulimit -n 256 && exec "$0" "$@"`, notifierBinary(t), "run", "--config", w.config)
	var logs lockedWriter
	logs.w = &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("logs:\n%s", tail(logs.String(), 3000))
		}
	})
	testenv.WaitFor(t, 30*time.Second, "/readyz 200", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	// 300 clients: one request each, then quiet on the open connection.
	held, refused := 0, 0
	for i := 0; i < 300 && refused < 3; i++ { // past the port's bound: a connection past it waits in the backlog
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			break
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			refused++ // accepted by the kernel, not by the server: out of descriptors
			continue
		}
		resp.Body.Close()
		held, refused = held+1, 0
	}
	t.Logf("%d idle connections held by the metrics port", held)
	time.Sleep(time.Second)
	ids := w.publish(1)
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && len(w.fake.AcceptedIDs()) == 0 {
		time.Sleep(100 * time.Millisecond)
	}
	if len(w.fake.AcceptedIDs()) == 0 {
		t.Errorf("job %v not sent within 15 s while %d quiet clients hold the metrics port's connections; logs say:\n%s",
			ids, held, grepLines(logs.String(), "too many open files", 5))
	}
}

func grepLines(s, sub string, n int) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && len(out) < n {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
