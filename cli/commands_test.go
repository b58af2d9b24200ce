package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// runCLI runs the command line in-process with the given environment.
func runCLI(t *testing.T, env map[string]string, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := run(ctx, args, strings.NewReader(stdin), &out, &errb, envOf(env))
	code = exitCode(err, &errb)
	return out.String(), errb.String(), code
}

// TestPublishNDJSON: valid lines are published (a repeated id is reported
// as a duplicate), a bad line is reported with its number and skipped.
func TestPublishNDJSON(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 100, "")
	lines := strings.Join([]string{
		`{"id":"n1","user_id":"u1","channel":"sms","to":"+447700900123","body":"one"}`,
		`{"id":"n2","user_id":"u1","channel":"push","to":"tok_abcdefgh12345678","body":"two"}`,
		`{"id":"n3","user_id":"u1","channel":"sms","body":"no recipient"}`,
		``,
		`not json at all`,
		`{"id":"n1","user_id":"u1","channel":"sms","to":"+447700900123","body":"one again"}`,
		`{"id":"n4","user_id":"u2","channel":"email","to":"a@example.com","body":"four"}`,
	}, "\n")
	stdout, stderr, code := runCLI(t, nil, lines, "publish", "--config", w.config, "--file", "-", "--quiet")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "published 3, duplicates 1 (dropped by JetStream), failed 0, skipped 2 invalid lines") {
		t.Fatalf("summary: %s", stdout)
	}
	for _, want := range []string{"line 3: to: required", "line 5: not JSON"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "no recipient") {
		t.Errorf("an error echoes a message body:\n%s", stderr)
	}
	ids := w.streamIDs()
	if strings.Join(ids, ",") != "n1,n2,n4" {
		t.Fatalf("stream holds %v, want n1,n2,n4", ids)
	}
}

func TestPublishOneAndHighLane(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 100, "")
	stdout, stderr, code := runCLI(t, nil, "", "publish", "--config", w.config,
		"--id", "otp-1", "--channel", "sms", "--user", "u9", "--to", "+447700900123", "--body", "Your code is 123456", "--high")
	if code != 0 || !strings.Contains(stdout, "job otp-1: published 1") {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	js, err := jetstream.New(w.nats.Conn())
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(context.Background(), "NOTIFY")
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(context.Background(), "notify.jobs.sms.high")
	if err != nil || m.Header.Get("Nats-Msg-Id") != "otp-1" {
		t.Fatalf("--high: the job is not on the priority lane with its Nats-Msg-Id: %v %v", m, err)
	}
	_, stderr, code = runCLI(t, nil, "", "publish", "--config", w.config, "--channel", "sms", "--user", "u9", "--to", "12", "--body", "x")
	if code != 2 || !strings.Contains(stderr, "to:") {
		t.Fatalf("a bad job from flags: exit %d, %s", code, stderr)
	}
	_, stderr, code = runCLI(t, nil, "", "publish", "--config", w.config, "--count", "5", "--file", "x")
	if code != 2 || !strings.Contains(stderr, "give one of") {
		t.Fatalf("two modes at once: exit %d, %s", code, stderr)
	}
}

// TestDemoCommand runs `notifier demo` small: the banner, the report, every
// job accounted for (demo's TestDemoRuns checks the run itself).
func TestDemoCommand(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := runCLI(t, nil, "", "demo", "--jobs", "300", "--users", "50")
	if code != 0 {
		t.Fatalf("demo: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"notifier demo — 300 jobs for 50 users", "published ", "300 jobs, each with exactly one outcome (300 accounted for)"} {
		if !strings.Contains(stdout, want) {
			t.Fatalf("demo output lacks %q:\n%s", want, stdout)
		}
	}
}
