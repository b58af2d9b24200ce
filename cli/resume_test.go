package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits/fleet"
)

// TestResumeLiftsAPause: `notifier resume <provider>` lifts a 429 pause (or
// a pause for the provider's credentials, whose reason it forgets)
// fleet-wide (the pause key gone, what was left reported) and logs who did
// it; a provider not paused is said so; an unknown one is a configuration
// problem (exit 2).
func TestResumeLiftsAPause(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 100, "")
	q, err := leaky.NewRedis(w.redis.Client(), "notifier:")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := q.Pause(ctx, "sms-gw", 30*time.Minute); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, nil, "", "resume", "sms-gw", "--config", w.config)
	if code != 0 {
		t.Fatalf("resume: exit %d: %s %s", code, out, errOut)
	}
	if !strings.Contains(out, "sms-gw: pause (rate_limited) lifted (30m0s of it were left)") {
		t.Errorf("resume said %q", out)
	}
	if !strings.Contains(errOut, "provider pause lifted by an operator") || !strings.Contains(errOut, `"by":"`) && !strings.Contains(errOut, "by=") {
		t.Errorf("resume logged %q, want who lifted it", errOut)
	}
	if d, err := q.PausedFor(ctx, "sms-gw"); err != nil || d != 0 {
		t.Fatalf("paused for %v after resume (%v)", d, err)
	}
	out, _, code = runCLI(t, nil, "", "resume", "sms-gw", "--config", w.config)
	if code != 0 || !strings.Contains(out, "was not paused") {
		t.Errorf("resume of a provider not paused: exit %d %q", code, out)
	}
	// A pause for the provider's credentials: named, and its reason
	// forgotten with it.
	reasons := fleet.RedisPauseReasons(w.redis.Client(), "notifier:")
	if err := reasons.SetCredentials(ctx, "sms-gw", 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := q.Pause(ctx, "sms-gw", 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	out, _, code = runCLI(t, nil, "", "resume", "sms-gw", "--config", w.config)
	if code != 0 || !strings.Contains(out, "sms-gw: pause (credentials) lifted") {
		t.Errorf("resume of a credentials pause: exit %d %q", code, out)
	}
	if why, err := reasons.Reason(ctx, "sms-gw"); err != nil || why != fleet.PauseRateLimited {
		t.Errorf("pause reason after resume: %q (%v), want none recorded", why, err)
	}
	_, errOut, code = runCLI(t, nil, "", "resume", "fax-gw", "--config", w.config)
	if code != 2 || !strings.Contains(errOut, `no provider named "fax-gw"`) {
		t.Errorf("resume of an unknown provider: exit %d %q, want 2 naming it", code, errOut)
	}
}
