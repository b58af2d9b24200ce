package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/gateway"
	"github.com/notifier/notifier/internal/localenv"
	"github.com/notifier/notifier/queue"
)

// The test binary, run again with childRoleEnv set, is one of the
// processes of TestIdleConnectionsCannotStopTheGateway: a gateway, or a
// holder of idle connections to one. The variables of the role:
const (
	childRoleEnv  = "GWTEST_ROLE"        // "gateway" or "holder"
	childNATSEnv  = "GWTEST_NATS_URL"    // gateway: NATS
	childRedisEnv = "GWTEST_REDIS"       // gateway: Redis host:port
	childNoFile   = "GWTEST_NOFILE"      // gateway: RLIMIT_NOFILE to set first (soft and hard), "" none
	childLieEnv   = "GWTEST_LIE"         // gateway: "1": tell the gateway it may open 1<<20 files (no lowered bound)
	childConnsCap = "GWTEST_MAX_CONNS"   // gateway: shed.max_conns and max_conns_per_ip ("": the defaults; for experiments)
	childAddrEnv  = "GWTEST_ADDR"        // holder: the gateway's host:port
	childConnsEnv = "GWTEST_CONNS"       // holder: how many connections to open
	childFromEnv  = "GWTEST_LOCAL_IPS"   // holder: the local addresses to connect from, comma-separated, in turn
	childPrefix   = "gwchild:"           // gateway: redis.key_prefix
	idleConnsEnv  = "GATEWAY_IDLE_CONNS" // the test: idle connections to open (default 20,000)
)

// runChild runs the role and returns the exit code.
func runChild(role string) int {
	var err error
	switch role {
	case "gateway":
		err = childGateway()
	case "holder":
		err = childHolder()
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// childGateway serves a gateway (keys(1000, 1000)) on a free loopback port
// until its stdin closes, printing "listening <addr> <max_conns>" first.
// Its log is JSON on stderr.
func childGateway() error {
	if v := os.Getenv(childNoFile); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return err
		}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
			return fmt.Errorf("setrlimit: %w", err)
		}
	}
	nc, err := nats.Connect(os.Getenv(childNATSEnv), nats.ReconnectBufSize(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(childRedisEnv)})
	defer rdb.Close()
	deps := gateway.Deps{Redis: rdb, KeyPrefix: childPrefix, Publisher: queue.NewPublisher(js),
		Logger: slog.New(slog.NewJSONHandler(os.Stderr, nil))}
	if os.Getenv(childLieEnv) == "1" {
		deps.NoFile = func() (int, error) { return 1 << 20, nil }
	}
	cfg := gateway.Config{Keys: keys(1000, 1000)}
	if v := os.Getenv(childConnsCap); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return err
		}
		cfg.Shed.MaxConns, cfg.Shed.MaxConnsPerIP = n, n
	}
	gw, err := gateway.New(cfg, deps)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := gw.Server()
	done := make(chan error, 1)
	go func() { done <- gw.Serve(srv, ln) }()
	fmt.Printf("listening %s %d\n", ln.Addr(), gw.MaxConns())
	stdin := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // until the test closes it
		close(stdin)
	}()
	select {
	case err := <-done: // as `notifier gateway` does, the process ends with its server
		return fmt.Errorf("gateway server ended: %v", err)
	case <-stdin:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.ShutdownWithContext(ctx); err != nil {
		return err
	}
	return <-done
}

// childHolder opens GWTEST_CONNS connections to the gateway, 256 at a
// time, from each of GWTEST_LOCAL_IPS in turn, sends nothing on them,
// prints "held <opened> <failed>" and keeps them until its stdin closes.
func childHolder() error {
	n, err := strconv.Atoi(os.Getenv(childConnsEnv))
	if err != nil {
		return err
	}
	var dialers []net.Dialer
	for _, ip := range strings.Split(os.Getenv(childFromEnv), ",") {
		d := net.Dialer{Timeout: 20 * time.Second}
		if ip != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(ip)}
		}
		dialers = append(dialers, d)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var failed atomic.Int64
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 256 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				c, err := dialers[i%int64(len(dialers))].Dial("tcp", os.Getenv(childAddrEnv))
				if err != nil {
					failed.Add(1)
					continue
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	fmt.Printf("held %d %d\n", len(conns), failed.Load())
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		_ = c.Close()
	}
	return nil
}

// child is a running child process of the test binary.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // its stdout, line by line
	stderr *localenv.Buffer
	exited chan struct{}
	err    error // after exited
}

// startChild starts the test binary in role with env, ending it (stdin
// closed, then killed) when the test ends.
func startChild(t *testing.T, role string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childRoleEnv+"="+role), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 16), stderr: &localenv.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		_ = c.stdin.Close()
		select {
		case <-c.exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-c.exited
		}
	})
	return c
}

// line waits for the child's next line of output.
func (c *child) line(t *testing.T, timeout time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			<-c.exited
			t.Fatalf("child ended (%v) without its line; stderr:\n%s", c.err, tail(c.stderr.String(), 3000))
		}
		return l
	case <-time.After(timeout):
		t.Fatalf("no line from the child within %s; stderr:\n%s", timeout, tail(c.stderr.String(), 3000))
	}
	return ""
}

// stop closes the child's stdin and waits for it to exit.
func (c *child) stop(t *testing.T, timeout time.Duration) error {
	t.Helper()
	_ = c.stdin.Close()
	select {
	case <-c.exited:
		return c.err
	case <-time.After(timeout):
		return errors.New("did not exit in time")
	}
}

// usage is the child's resident memory and open descriptors, from /proc.
func (c *child) usage() string {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		return "unknown"
	}
	rss := "?"
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			rss = strings.TrimSpace(v)
		}
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", c.cmd.Process.Pid))
	return fmt.Sprintf("RSS %s, %d descriptors open", rss, len(fds))
}

// running reports whether the child has not exited.
func (c *child) running() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
