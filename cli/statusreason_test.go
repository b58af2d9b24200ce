package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/inspect/statuspage"
	"github.com/notifier/notifier/internal/service"
	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/fleet"
	"github.com/notifier/notifier/providers"
)

// TestStatusNamesACredentialsPause: a provider paused because it refused
// the sender's credentials shows so in `notifier status` (and /status),
// read from the fleet's Redis; a 429's pause shows as before.
func TestStatusNamesACredentialsPause(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 100, "")
	ctx := context.Background()
	rdb := w.redis.Client()
	if err := fleet.RedisPauseReasons(rdb, "notifier:").SetCredentials(ctx, "sms-gw", 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	q, err := leaky.NewRedis(rdb, "notifier:")
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Pause(ctx, "sms-gw", 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(w.config, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	st, err := service.ReadStatus(ctx, rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Providers) == 0 || st.Providers[0].PauseReason != fleet.PauseCredentials {
		t.Fatalf("status providers %+v, want sms-gw paused for its credentials", st.Providers)
	}
	var out strings.Builder
	printStatus(&out, st, false, 120)
	if !strings.Contains(out.String(), "credentials refused: 3") && !strings.Contains(out.String(), "credentials refused: 2") {
		t.Errorf("status printed\n%s\nwant the pause named as refused credentials", out.String())
	}
}

// TestStatusShowsAdaptiveRateAndQuotas: a provider with an adaptive
// contract and a quota shows, in `notifier status` and /status, the rate
// the fleet paces at now and what is left of each quota's window, read
// from the fleet's Redis.
func TestStatusShowsAdaptiveRateAndQuotas(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 100, "")
	cfg, err := config.Load(w.config, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.Providers[0].Adaptive = &providers.AdaptiveConfig{Decrease: 0.5, Quiet: time.Hour}
	cfg.Providers[0].Quotas = []providers.QuotaConfig{{Limit: 500, Per: time.Hour}}
	cfg.Providers[0] = cfg.Providers[0].WithDefaults()
	ctx := context.Background()
	rdb := w.redis.Client()
	q, err := leaky.NewRedis(rdb, "notifier:")
	if err != nil {
		t.Fatal(err)
	}
	c := limits.Contract(cfg.Providers[0])
	var now time.Duration
	c.ColdStart = &now // a first start: the queue begins at now, not full
	for range 3 {
		if _, err := q.Reserve(ctx, "sms-gw", c, 1); err != nil {
			t.Fatal(err)
		}
	}
	if lowered, err := q.Backoff(ctx, "sms-gw", c, time.Millisecond); err != nil || !lowered {
		t.Fatalf("backoff: lowered %v, %v", lowered, err)
	}
	st, err := service.ReadStatus(ctx, rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := st.Providers[0]
	if !p.Adaptive || p.EffectiveRate != 50 || len(p.Quotas) != 1 || p.Quotas[0].Used != 3 || p.Quotas[0].Left != 497 {
		t.Fatalf("status %+v, want adaptive at 50/s and 3 of the quota's 500 used", p)
	}
	var out strings.Builder
	printStatus(&out, st, false, 120)
	for _, want := range []string{"adaptive rate: 50.0/s of 100/s", "quota 500/1h: 3 used, 497 left, resets in"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status printed\n%s\nwant %q", out.String(), want)
		}
	}
	if tab := statuspage.NewTable(st); len(tab.Shaping) != 2 {
		t.Errorf("/status shaping rows %+v, want the adaptive rate and the quota", tab.Shaping)
	}
}
