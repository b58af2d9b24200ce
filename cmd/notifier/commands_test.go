package main

import (
	"bytes"
	"context"
	"fmt"
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

// TestDemoRuns runs a small demo end to end: every job accounted for, the
// late tenant's codes sent, no provider contract broken.
func TestDemoRuns(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := runCLI(t, nil, "", "demo", "--jobs", "300", "--users", "50")
	if code != 0 {
		t.Fatalf("demo: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "300 jobs, each with exactly one outcome (300 accounted for)") {
		t.Fatalf("demo report:\n%s", stdout)
	}
	// The late tenant's codes are all sent, each publish-to-provider wait
	// reported (10 codes: the fewest, for 300 jobs).
	codes := 0
	for _, line := range strings.Split(stdout, "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[0] == demoCodesTenant {
			fmt.Sscanf(f[1], "%d", &codes)
			if !strings.Contains(line, "(10 sms)") {
				t.Errorf("the codes' waits: %q", line)
			}
		}
	}
	if codes != demoCodeCount(300) || codes != 10 {
		t.Errorf("%s sent %d codes, want 10\n%s", demoCodesTenant, codes, stdout)
	}
	for _, lane := range demoLanes {
		var contract, most, n429 int
		for _, line := range strings.Split(stdout, "\n") {
			f := strings.Fields(line)
			if len(f) >= 6 && f[0] == lane.name {
				fmt.Sscanf(f[1], "%d/s", &contract)
				fmt.Sscanf(f[3], "%d", &most)
				fmt.Sscanf(f[4], "%d", &n429)
			}
		}
		// The sandbox enforces the exact contract, so its "most in 1 s"
		// counts accepted sends and cannot exceed it; its 429s are the
		// signal. One late arrival on this loaded 2-core machine (the
		// demo runs beside the package's other tests) can draw a 429
		// without the contract being broken by the dispatcher's slots;
		// a storm cannot hide under this bound (as the pacing tests).
		if contract == 0 || most > contract || n429 > 1 {
			t.Errorf("%s: contract %d, most in 1 s %d, 429s %d (at most 1 allowed)\n%s", lane.name, contract, most, n429, stdout)
		}
	}
}
