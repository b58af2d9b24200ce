package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/dispatch"
	"github.com/notifier/notifier/leaky"
)

// TestStatusNamesACredentialsPause: a provider paused because it refused
// the sender's credentials shows so in `notifier status` (and /status),
// read from the fleet's Redis; a 429's pause shows as before.
func TestStatusNamesACredentialsPause(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 100, "")
	ctx := context.Background()
	rdb := w.redis.Client()
	if err := dispatch.RedisPauseReasons(rdb, "notifier:").SetCredentials(ctx, "sms-gw", 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := leaky.NewRedis(rdb, "notifier:").Pause(ctx, "sms-gw", 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(w.config, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	st, err := readStatus(ctx, rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Providers) == 0 || st.Providers[0].PauseReason != dispatch.PauseCredentials {
		t.Fatalf("status providers %+v, want sms-gw paused for its credentials", st.Providers)
	}
	var out strings.Builder
	st.print(&out, false, 120)
	if !strings.Contains(out.String(), "credentials refused: 3") && !strings.Contains(out.String(), "credentials refused: 2") {
		t.Errorf("status printed\n%s\nwant the pause named as refused credentials", out.String())
	}
}
