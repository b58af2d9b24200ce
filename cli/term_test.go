package cli

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/internal/text"
	"github.com/notifier/notifier/testenv"
)

// widest is the widest line of s, in columns, and that line.
func widest(s string) (int, string) {
	n, line := 0, ""
	for _, l := range strings.Split(s, "\n") {
		if c := text.Columns(l); c > n {
			n, line = c, l
		}
	}
	return n, line
}

// busyStatus is a fleet at its busiest for `status`: long provider and
// tenant names, a pause, a breaker open on some instances, many instances.
func busyStatus() inspect.FleetStatus {
	at := time.Date(2026, 12, 2, 11, 50, 1, 0, time.UTC)
	st := inspect.FleetStatus{At: at}
	for i, name := range []string{"sms-gateway-eu-west", "push-fcm", "email-ses-primary", "webhook-partner-acme"} {
		p := inspect.ProviderStatus{Name: name, Channel: []string{"sms", "push", "email", "sms"}[i], Contract: []float64{100, 2500, 50, 12.5}[i],
			SentPerSec: 98.4, QueueDepth: 212, QueueDelay: 2.12, MaxDelay: 2, Breakers: []string{"closed", "closed", "closed"}}
		if i == 1 {
			p.PausedFor, p.PausedUntil = 2.9, at.Add(2900*time.Millisecond).Format(time.RFC3339)
		}
		if i == 2 {
			p.Breakers = []string{"open", "half-open", "closed"}
		}
		if i == 0 {
			p.Tenants = []inspect.TenantStatus{
				{Tenant: "default", Queued: 12, Sent10s: 300, Share: 0.3},
				{Tenant: "a-tenant-with-a-very-long-name.example", Queued: 1_234_567, Sent10s: 700, Share: 0.7},
			}
		}
		st.Providers = append(st.Providers, p)
	}
	for _, ch := range []string{"sms", "push", "email"} {
		st.Channels = append(st.Channels, inspect.ChannelStatus{Channel: ch, Sent: 18660, Suppressed: 804, Dead: 3})
	}
	for i := range 3 {
		st.Instances = append(st.Instances, inspect.InstanceStatus{
			ID: fmt.Sprintf("web-%d.eu-west-1.compute.internal-4412-9f1a", i), Host: "web", Version: "v1.4.0-rc.1+dirty",
			InFlight: 32, Workers: 32, Limits: "holding", Seen: 0.4, Up: "3h12m",
		})
	}
	return st
}

// TestStatusFitsTheWidth: status prints no line wider than the terminal,
// from 40 columns to 200, and keeps what matters: every provider with its
// contract and sent rate, the pause and the open breaker while they are
// in force; a wide terminal shows every column.
func TestStatusFitsTheWidth(t *testing.T) {
	t.Parallel()
	st := busyStatus()
	for _, width := range []int{40, 60, 72, 80, 100, 120, 200} {
		for _, live := range []bool{false, true} {
			var b bytes.Buffer
			printStatus(&b, st, live, width)
			if n, line := widest(b.String()); n > width {
				t.Errorf("width %d: a line of %d columns:\n%q\n%s", width, n, line, b.String())
			}
			if width < 80 {
				continue
			}
			for _, p := range st.Providers {
				row := lineStarting(b.String(), p.Name+" ")
				if row == "" || !strings.Contains(row, fmt.Sprintf("%g/s", p.Contract)) || !strings.Contains(row, "98.4/s") {
					t.Errorf("width %d: provider %s: %q\n%s", width, p.Name, row, b.String())
				}
			}
			// A pause and a breaker not closed are shown with their
			// provider, in its row or under it.
			if !strings.Contains(section(b.String(), "push-fcm "), "2.9s, until 11:50:03") {
				t.Errorf("width %d: the pause in force is not shown:\n%s", width, b.String())
			}
			if !strings.Contains(section(b.String(), "email-ses-primary "), "open on 1 of 3") {
				t.Errorf("width %d: the open breaker is not shown:\n%s", width, b.String())
			}
			if !strings.Contains(section(b.String(), "sms-gateway-eu-west "), "  tenant a-tenant-with-a-very-long-name.example") {
				t.Errorf("width %d: the tenant line:\n%s", width, b.String())
			}
		}
	}
	var wide bytes.Buffer
	printStatus(&wide, st, true, 200)
	for _, head := range []string{"(every second; Ctrl-C to quit)", "queued", "delay", "pause", "breakers", "version", "in flight", "limits", "up", "seen"} {
		if !strings.Contains(wide.String(), head) {
			t.Errorf("200 columns: no %q:\n%s", head, wide.String())
		}
	}
	t.Logf("80 columns:\n%s", func() string { var b bytes.Buffer; printStatus(&b, st, true, 80); return b.String() }())
}

// section is the provider row of s starting with prefix and the lines
// under it, up to the next provider's row or the blank line.
func section(s, prefix string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, prefix) {
			continue
		}
		j := i + 1
		for j < len(lines) && strings.HasPrefix(lines[j], "  ") {
			j++
		}
		return strings.Join(lines[i:j], "\n")
	}
	return ""
}

// lineStarting is the first line of s that starts with prefix (leading
// spaces aside), or "".
func lineStarting(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), prefix) {
			return l
		}
	}
	return ""
}

// TestPublishBarFitsTheWidth: publish's bar on a terminal (here drawn into
// a buffer) is never wider than the terminal, counts of a million and
// hours left included.
func TestPublishBarFitsTheWidth(t *testing.T) {
	t.Parallel()
	for _, width := range []int{40, 60, 80, 100, 120} {
		var b bytes.Buffer
		bar := newProgressBar(&b, 1_000_000, "publishing", width)
		_ = bar.Add(1)
		time.Sleep(150 * time.Millisecond) // drawn at most every 100 ms
		_ = bar.Add(1)                     // a slow start: hours left
		time.Sleep(150 * time.Millisecond)
		_ = bar.Add(500_000)
		time.Sleep(150 * time.Millisecond)
		_ = bar.Add(499_998)
		_ = bar.Finish()
		most, line := 0, ""
		for _, l := range strings.FieldsFunc(b.String(), func(r rune) bool { return r == '\r' || r == '\n' }) {
			if c := text.Columns(l); c > most {
				most, line = c, l
			}
		}
		if most >= width || !strings.Contains(b.String(), "1000000/1000000") {
			t.Errorf("width %d: a line of %d columns: %q", width, most, line)
		}
	}
}

// TestPublishIntoAPipe: a generated load published into a pipe (this
// test's stderr) draws no progress bar (no \r redraws): a plain line at
// each quarter, then the summary on stdout.
func TestPublishIntoAPipe(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	cmd := exec.Command(notifierBinary(t), "publish", "--nats", srv.URL(), "--count", "2000", "--users", "10", "--channel", "push")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("publish: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	if strings.ContainsAny(stderr.String(), "\r\033") {
		t.Errorf("publish drew on a pipe: %q", stderr.String())
	}
	want := "publishing: 500 of 2000 jobs (25%)\npublishing: 1000 of 2000 jobs (50%)\npublishing: 1500 of 2000 jobs (75%)\n"
	if stderr.String() != want {
		t.Errorf("stderr:\n%q\nwant\n%q", stderr.String(), want)
	}
	if stdout.String() != "published 2000, duplicates 0 (dropped by JetStream), failed 0\n" {
		t.Errorf("stdout: %q", stdout.String())
	}
}

// TestUsageErrorIsOneLine: a bad command line is one line "Error: ..."
// and where to read the help, exit 2; not the help itself.
func TestUsageErrorIsOneLine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"top"}, "Error: --channel is required: sms, push or email\nRun 'notifier top --help' for usage.\n"},
		{[]string{"top", "--channel"}, "Error: flag needs an argument: --channel\nRun 'notifier top --help' for usage.\n"},
		{[]string{"status", "--bogus"}, "Error: unknown flag: --bogus\nRun 'notifier status --help' for usage.\n"},
		{[]string{"resume"}, "Error: accepts 1 arg(s), received 0\nRun 'notifier resume --help' for usage.\n"},
		{[]string{"frobnicate"}, "Error: unknown command \"frobnicate\" for \"notifier\"\nRun 'notifier --help' for usage.\n"},
		{[]string{"dead", "list", "--since", "x"}, "Error: --since: \"x\" is neither a duration (90m, 2h, 7d) nor an RFC 3339 time (2026-01-02T15:04:05Z)\nRun 'notifier dead list --help' for usage.\n"},
	} {
		stdout, stderr, code := runCLI(t, nil, "", c.args...)
		if code != 2 || stderr != c.want || stdout != "" {
			t.Errorf("%v: exit %d\nstderr %q\nwant   %q\nstdout %q", c.args, code, stderr, c.want, stdout)
		}
	}
}
