package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/limits/suppress"
)

// TestSuppressionCommands: `suppression list` shows the listed recipients
// by their hash, never an address; `show --to` finds one by its address
// (masked in the answer); `remove --to` takes it off at once and says so,
// and again says it was not listed; a bad channel or a missing --to
// exits 2.
func TestSuppressionCommands(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 100, "")
	list := suppress.NewRedis(w.redis.Client(), "notifier:")
	h := suppress.Hash("sms", "+447700900123")
	if err := list.Add(context.Background(), suppress.Entry{Channel: "sms", Hash: h, Provider: "sms-gw", Detail: "410 Gone", Job: "j-1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLI(t, nil, "", "suppression", "list", "--config", w.config, "--json")
	var es []suppress.Entry
	if code != 0 || json.Unmarshal([]byte(stdout), &es) != nil || len(es) != 1 || es[0].Hash != h || strings.Contains(stdout, "447700900123") {
		t.Fatalf("list: exit %d\n%s%s", code, stdout, stderr)
	}
	stdout, _, code = runCLI(t, nil, "", "suppression", "list", "--config", w.config)
	if code != 0 || !strings.Contains(stdout, "#"+h[:12]) || !strings.Contains(stdout, "sms-gw") || strings.Contains(stdout, "447700900123") {
		t.Fatalf("list: exit %d\n%s", code, stdout)
	}
	stdout, _, code = runCLI(t, nil, "", "suppression", "show", "--config", w.config, "--channel", "sms", "--to", "+447700900123")
	if code != 0 || !strings.Contains(stdout, "+4477•••••23") || !strings.Contains(stdout, "410 Gone") || strings.Contains(stdout, "447700900123") {
		t.Fatalf("show: exit %d\n%s", code, stdout)
	}
	stdout, _, code = runCLI(t, nil, "", "suppression", "remove", "--config", w.config, "--channel", "sms", "--to", "+447700900123")
	if code != 0 || !strings.Contains(stdout, "removed from the suppression list") {
		t.Fatalf("remove: exit %d\n%s", code, stdout)
	}
	if ok, _ := list.Has(context.Background(), "sms", h); ok {
		t.Fatal("still listed after remove")
	}
	stdout, _, code = runCLI(t, nil, "", "suppression", "remove", "--config", w.config, "--channel", "sms", "--to", "+447700900123")
	if code != 0 || !strings.Contains(stdout, "was not on the suppression list") {
		t.Fatalf("remove again: exit %d\n%s", code, stdout)
	}
	for _, args := range [][]string{
		{"suppression", "show", "--config", w.config, "--channel", "fax", "--to", "x"},
		{"suppression", "remove", "--config", w.config, "--channel", "sms"},
		{"suppression", "list", "--config", w.config, "--channel", "fax"},
	} {
		if _, stderr, code := runCLI(t, nil, "", args...); code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", args, code, stderr)
		}
	}
}

// TestSuppressionToIsChecked: a --to that is no address of its channel
// exits 2 saying what it must be, without echoing it, instead of "not on
// the list"; an email address is found whatever its case.
func TestSuppressionToIsChecked(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 100, "")
	for _, bad := range []struct{ channel, to, want string }{
		{"sms", "+44 7700 900123", "E.164"},
		{"sms", "07700900123", "E.164"},
		{"email", "Bob <bob@example.com>", "plain email address"},
		{"push", "short", "device token"},
	} {
		for _, cmd := range []string{"show", "remove"} {
			stdout, stderr, code := runCLI(t, nil, "", "suppression", cmd, "--config", w.config, "--channel", bad.channel, "--to", bad.to)
			if code != 2 || !strings.Contains(stderr, "--to is no "+bad.channel+" address") || !strings.Contains(stderr, bad.want) || strings.Contains(stdout+stderr, bad.to) {
				t.Errorf("%s --to %q: exit %d\n%s%s", cmd, bad.to, code, stdout, stderr)
			}
		}
	}
	list := suppress.NewRedis(w.redis.Client(), "notifier:")
	if err := list.Add(context.Background(), suppress.Entry{Channel: "email", Hash: suppress.Hash("email", "Bob@Example.com"), Provider: "smtp", Detail: "550 5.1.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLI(t, nil, "", "suppression", "remove", "--config", w.config, "--channel", "email", "--to", "bob@example.com")
	if code != 0 || !strings.Contains(stdout, "removed from the suppression list") {
		t.Fatalf("remove in another case: exit %d\n%s%s", code, stdout, stderr)
	}
}
