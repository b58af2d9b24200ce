package main

import (
	"strings"
	"testing"
)

// TestPublishFileSkipsAnOversizedLine: a 2 MB line is reported with its
// number and size and skipped; the lines after it are still published and
// the summary printed (it used to end the run with exit 1, lines 4-7 never
// published).
func TestPublishFileSkipsAnOversizedLine(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 100, "")
	job := func(id string) string {
		return `{"id":"` + id + `","user_id":"u1","channel":"sms","to":"+447700900123","body":"hello"}`
	}
	lines := strings.Join([]string{
		job("f1"), job("f2"),
		`{"id":"big","user_id":"u1","channel":"sms","to":"+447700900123","body":"` + strings.Repeat("x", 2<<20) + `"}`,
		job("f4"), job("f5"), job("f6"), job("f7"),
	}, "\n")
	stdout, stderr, code := runCLI(t, nil, lines, "publish", "--config", w.config, "--file", "-", "--quiet")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "published 6, duplicates 0 (dropped by JetStream), failed 0, skipped 1 invalid lines") {
		t.Fatalf("summary: %s", stdout)
	}
	if !strings.Contains(stderr, "line 3: 2097") || !strings.Contains(stderr, "longer than a job may be") {
		t.Errorf("stderr does not name line 3 and its size:\n%.300s", stderr)
	}
	if got := strings.Join(w.streamIDs(), ","); got != "f1,f2,f4,f5,f6,f7" {
		t.Fatalf("stream holds %s", got)
	}
}

// TestPublishLoadsGetUniqueIDs: two generated loads started in the same
// second publish all their jobs (ids used to be load-<second>-N, so the
// second load was 0 published, 300 duplicates, and still exit 0); a
// publish that stores nothing exits non-zero.
func TestPublishLoadsGetUniqueIDs(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 100, "")
	for i := range 2 {
		stdout, stderr, code := runCLI(t, nil, "", "publish", "--config", w.config, "--count", "300", "--users", "10", "--channel", "sms", "--quiet")
		if code != 0 || !strings.Contains(stdout, "published 300, duplicates 0") {
			t.Fatalf("load %d: exit %d\n%s\n%s", i+1, code, stdout, stderr)
		}
	}
	if n := len(w.streamIDs()); n != 600 {
		t.Fatalf("stream holds %d jobs, want 600", n)
	}
	one := `{"id":"same","user_id":"u1","channel":"sms","to":"+447700900123","body":"hi"}`
	if _, _, code := runCLI(t, nil, one, "publish", "--config", w.config, "--file", "-", "--quiet"); code != 0 {
		t.Fatalf("first publish of a job: exit %d", code)
	}
	stdout, stderr, code := runCLI(t, nil, one, "publish", "--config", w.config, "--file", "-", "--quiet")
	if code == 0 || !strings.Contains(stdout, "published 0, duplicates 1") || !strings.Contains(stderr, "nothing was published") {
		t.Fatalf("a publish of a duplicate only: exit %d\n%s\n%s; want a non-zero exit saying nothing was published", code, stdout, stderr)
	}
}
