package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/internal/text"
	"github.com/notifier/notifier/testenv"
)

// devProcess is one `notifier dev` run through the binary.
type devProcess struct {
	cmd            *exec.Cmd
	stdout, stderr *lockedWriter
	done           chan struct{} // closed at exit; err is then set
	err            error
}

// startDev starts `notifier dev` with args and waits for its banner.
func startDev(t *testing.T, args ...string) *devProcess {
	t.Helper()
	p := &devProcess{
		cmd:    exec.Command(notifierBinary(t), append([]string{"dev"}, args...)...),
		stdout: &lockedWriter{w: &bytes.Buffer{}},
		stderr: &lockedWriter{w: &bytes.Buffer{}},
		done:   make(chan struct{}),
	}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("notifier dev %v:\nstdout:\n%s\nstderr:\n%s", args, tail(p.stdout.String(), 3000), tail(p.stderr.String(), 3000))
		}
	})
	testenv.WaitFor(t, 30*time.Second, "notifier dev's banner", func() bool {
		select {
		case <-p.done:
			t.Fatalf("notifier dev exited at start: %v\n%s%s", p.err, p.stdout.String(), p.stderr.String())
		default:
		}
		return strings.Contains(p.stdout.String(), "Ctrl-C stops it.")
	})
	return p
}

// stop signals the process and waits for it to exit, within 10 s.
func (p *devProcess) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("notifier dev still running 10s after %v", sig)
	}
	if p.err != nil {
		t.Fatalf("notifier dev after %v: %v, want exit 0", sig, p.err)
	}
}

// banner finds what the banner says after label ("NATS", "status").
func (p *devProcess) banner(t *testing.T, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(p.stdout.String())
	if m == nil {
		t.Fatalf("the banner has no %s:\n%s", re, p.stdout.String())
	}
	return m[1]
}

// sentLines are the lines dev printed for jobs its sandbox accepted, by
// job id.
func (p *devProcess) sentLines() map[string]int {
	got := map[string]int{}
	for _, l := range strings.Split(p.stdout.String(), "\n") {
		f := strings.Fields(l)
		if len(f) >= 5 && f[2] == "sent" && f[3] == "job" {
			got[f[4]]++
		}
	}
	return got
}

// publishTo publishes one sms job with id through `notifier publish --nats`.
func publishTo(t *testing.T, natsURL, id string, more ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(notifierBinary(t), append([]string{"publish", "--nats", natsURL, "--id", id,
		"--channel", "sms", "--user", "u42", "--to", "+447700900123", "--body", "Hello"}, more...)...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// TestDevNeedsNothingElse: `notifier dev` with no configuration starts a
// JetStream server on the address asked and a dispatcher on sandbox
// providers; it prints its URL and how to publish; a job published with
// `notifier publish --nats` is sent (a line for it), one for an unknown
// provider is dead-lettered; /status answers; a second dev on the same
// directory is refused; SIGTERM stops it (exit 0, no warning). Restarted
// on the same directory, the server has its streams as they were (the
// job stream's sequence goes on, the dead letter is there), and a new job
// is sent; SIGINT stops it too.
func TestDevNeedsNothingElse(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	args := []string{"--data-dir", dir, "--nats-listen", listen, "--metrics-listen", "127.0.0.1:0"}
	p := startDev(t, args...)
	url := p.banner(t, `NATS +(nats://\S+)`)
	if url != "nats://"+listen {
		t.Fatalf("the banner says NATS is at %s, want nats://%s", url, listen)
	}
	for _, want := range []string{
		"notifier publish --nats " + url + " --channel sms",
		"nats pub -s " + url + " notify.jobs.sms -H Nats-Msg-Id:hello-1 '{",
		"sms-sandbox", "push-sandbox", "email-sandbox", dir,
	} {
		if !strings.Contains(p.stdout.String(), want) {
			t.Errorf("the banner lacks %q:\n%s", want, p.stdout.String())
		}
	}
	if out, code := publishTo(t, url, "dev-1"); code != 0 || !strings.Contains(out, "job dev-1: published 1") {
		t.Fatalf("publish: exit %d\n%s", code, out)
	}
	if out, code := publishTo(t, url, "dead-1", "--provider", "carrier-pigeon"); code != 0 {
		t.Fatalf("publish: exit %d\n%s", code, out)
	}
	testenv.WaitFor(t, 20*time.Second, "dev-1 sent by the sandbox", func() bool { return p.sentLines()["dev-1"] == 1 })
	testenv.WaitFor(t, 20*time.Second, "dead-1 dead-lettered", func() bool { return streamMsgs(t, url, "NOTIFY_DEAD") == 1 })
	status := p.banner(t, `status +(http://\S+/status)`)
	resp, err := http.Get(status + ".json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"sms-sandbox"`) {
		t.Fatalf("%s.json: %d\n%s", status, resp.StatusCode, body)
	}

	// Another dev on the same directory (another port) is refused.
	other := exec.Command(notifierBinary(t), "dev", "--data-dir", dir, "--nats-listen", "127.0.0.1:0", "--metrics-listen", "off")
	out, err := other.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "in use by another notifier dev") {
		t.Fatalf("a second dev on %s: %v\n%s", dir, err, out)
	}

	p.stop(t, syscall.SIGTERM)
	if !strings.Contains(p.stdout.String(), "notifier dev stopped; the server's state is kept in "+dir) {
		t.Errorf("no stop line:\n%s", p.stdout.String())
	}
	if logs := p.stderr.String(); strings.Contains(logs, "level=WARN") || strings.Contains(logs, "level=ERROR") {
		t.Errorf("a clean stop logged a warning or an error:\n%s", logs)
	}

	p = startDev(t, args...)
	if n := streamMsgs(t, url, "NOTIFY_DEAD"); n != 1 {
		t.Errorf("after a restart NOTIFY_DEAD holds %d messages, want the dead letter from before", n)
	}
	if seq := streamLastSeq(t, url, "NOTIFY"); seq != 2 {
		t.Errorf("after a restart NOTIFY's last sequence is %d, want 2 (the two jobs from before)", seq)
	}
	if out, code := publishTo(t, url, "dev-2"); code != 0 {
		t.Fatalf("publish dev-2: exit %d\n%s", code, out)
	}
	testenv.WaitFor(t, 20*time.Second, "dev-2 sent", func() bool { return p.sentLines()["dev-2"] == 1 })
	p.stop(t, syscall.SIGINT)
	if n := p.sentLines()["dev-1"]; n != 0 {
		t.Errorf("dev-1 was sent again after the restart")
	}
}

// streamInfo reads a stream's state on the server at url.
func streamInfo(t *testing.T, url, stream string) *jetstream.StreamInfo {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	return info
}

func streamMsgs(t *testing.T, url, stream string) uint64 {
	return streamInfo(t, url, stream).State.Msgs
}

func streamLastSeq(t *testing.T, url, stream string) uint64 {
	return streamInfo(t, url, stream).State.LastSeq
}

// TestDevKeepsJobsAcrossARestart: with a configuration, dev takes its
// providers' contracts (to sandboxes of their names) and caps; jobs still
// waiting when it stops are sent after it starts again, each once (those
// a worker held at the stop after nats.ack_wait: the server restarted with
// dev does not keep a NAK's redelivery).
func TestDevKeepsJobsAcrossARestart(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "dev.yaml")
	yaml := `
nats:
  url: nats://nowhere.invalid:4222   # not used by dev
  # The jobs under way at the stop are handed back (NAK), but the server
  # stops with dev, and a restarted server redelivers what was pending
  # only after ack_wait.
  ack_wait: 3s
redis:
  addrs: ["nowhere.invalid:6379"]    # not used by dev
providers:
  - name: slow-sms
    channel: sms
    default: true
    kind: twilio                       # served by a sandbox: no secrets needed
    account_sid: AC0000
    from: "+15550000000"
    credentials_env: TWILIO_TOKEN_NOT_SET
    rate: 4
    max_queue_delay: 1s
`
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	args := []string{"--config", cfg, "--data-dir", dir, "--nats-listen", listen, "--metrics-listen", "off"}
	p := startDev(t, args...)
	if !strings.Contains(p.stdout.String(), "slow-sms sms 4/s") {
		t.Fatalf("the banner does not name the configuration's provider:\n%s", p.stdout.String())
	}
	var ids []string
	for i := range 16 {
		ids = append(ids, fmt.Sprintf("keep-%02d", i))
	}
	for _, id := range ids {
		if out, code := publishTo(t, "nats://"+listen, id); code != 0 {
			t.Fatalf("publish %s: exit %d\n%s", id, code, out)
		}
	}
	testenv.WaitFor(t, 20*time.Second, "the first jobs sent", func() bool { return len(p.sentLines()) >= 2 })
	p.stop(t, syscall.SIGTERM)
	before := p.sentLines()
	if len(before) >= len(ids) {
		t.Fatalf("all %d jobs sent before the stop: the test needs some waiting", len(before))
	}
	p = startDev(t, args...)
	testenv.WaitFor(t, 30*time.Second, "every job sent, before or after the restart", func() bool {
		return len(before)+len(p.sentLines()) >= len(ids)
	})
	after := p.sentLines()
	for _, id := range ids {
		if n := before[id] + after[id]; n != 1 {
			t.Errorf("job %s sent %d times", id, n)
		}
	}
	t.Logf("%d jobs sent before the stop, %d after the restart", len(before), len(after))
}

// TestDevRefusesATakenPort: a NATS port already taken (as 4222 is where a
// NATS server runs) fails at once, naming the address and the flag.
func TestDevRefusesATakenPort(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	cmd := exec.Command(notifierBinary(t), "dev", "--data-dir", t.TempDir(), "--nats-listen", addr, "--metrics-listen", "off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 {
		t.Fatalf("dev on a taken port: %v, want exit 1\n%s%s", err, stdout.String(), stderr.String())
	}
	want := "notifier: the NATS port " + addr + " is already in use (another process listens there); stop it, or give --nats-listen another address"
	if lines := strings.Split(strings.TrimSpace(stderr.String()), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], want) {
		t.Fatalf("stderr:\n%s\nwant one line starting %q", stderr.String(), want)
	}

	_, stderrS, code := runCLI(t, nil, "", "dev", "--sandbox=false")
	if code != 2 || !strings.Contains(stderrS, "--sandbox=false needs --config") {
		t.Fatalf("dev --sandbox=false with no configuration: exit %d\n%s", code, stderrS)
	}
}

// TestPublishNATSFlagNeedsNoFile: publish --nats reads no file; the nats
// keys still come from the environment, named in a problem.
func TestPublishNATSFlagNeedsNoFile(t *testing.T) {
	t.Parallel()
	cfg, err := config.NATSOnly("nats://127.0.0.1:4333", envOf(map[string]string{"NOTIFIER_NATS_TOKEN": "s3cret", "NOTIFIER_NATS_STREAM": "JOBS"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NATS.URL != "nats://127.0.0.1:4333" || cfg.NATS.Token != "s3cret" || cfg.NATS.Stream != "JOBS" || cfg.NATS.DeadStream != "NOTIFY_DEAD" {
		t.Fatalf("nats: %+v", cfg.NATS)
	}
	_, err = config.NATSOnly("nats://127.0.0.1:4333", envOf(map[string]string{"NOTIFIER_NATS_ACK_WAIT": "30"}))
	if err == nil || !strings.Contains(err.Error(), "nats.ack_wait") {
		t.Fatalf("a bare-number ack_wait: %v", err)
	}
}

// TestDevPrinterPrintsNoControlCharacters: the line a sandbox prints for
// a job carries no control character of the body's id, user_id or tenant
// (any client of its port could drive the operator's terminal with an
// escape sequence; found in review).
func TestDevPrinterPrintsNoControlCharacters(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	p := &devPrinter{w: &b, names: map[string]string{"/sms": "sms-sandbox"}}
	p.answered("/sms", []byte(`{"id":"x\u001b]0;owned\u0007\u001b[2J","user_id":"u\u001b[31m","tenant":"t\u009b1m"}`), http.StatusOK)
	p.flush()
	if s := b.String(); strings.ContainsAny(s, "\x1b\x07\u009b") || !strings.Contains(s, "job x ]0;owned") {
		t.Errorf("the line holds a client's control characters: %q", s)
	}
}

// TestDevPrinterLimitsItsLines: dev prints a line a job up to 10 a second,
// then counts the rest in one line; on a terminal no line is wider than it.
func TestDevPrinterLimitsItsLines(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	p := &devPrinter{w: &b, names: map[string]string{"/sms": "sms-sandbox"}, width: func() int { return 50 }}
	for i := range 25 {
		p.answered("/sms", []byte(fmt.Sprintf(`{"id":"job-%02d","user_id":"u%d"}`, i, i)), http.StatusOK)
	}
	p.answered("/sms", []byte(`{"id":"over-1","user_id":"u1"}`), http.StatusTooManyRequests)
	p.flush()
	jobs, more := 0, 0
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if c := text.Columns(l); c > 49 {
			t.Errorf("a line of %d columns on a 50-column terminal: %q", c, l)
		}
		if m := regexp.MustCompile(`… and (\d+) more`).FindStringSubmatch(l); m != nil {
			n := 0
			fmt.Sscan(m[1], &n)
			more += n
		} else if strings.Contains(l, " job ") {
			jobs++
		}
	}
	// The 26 calls take well under a second, but may straddle two.
	if jobs+more != 26 || jobs < 10 || jobs > 20 {
		t.Errorf("%d job lines and %d counted, want 26 in all, 10 lines a second:\n%s", jobs, more, b.String())
	}
}
