package leaky

import (
	"context"
	"strings"
	"testing"

	"github.com/notifier/notifier/testenv"
)

// TestKeysShareOneSlot asks a Redis Cluster where each provider's keys live:
// every key a script touches must hash to one slot, or the script fails with
// CROSSSLOT.
func TestKeysShareOneSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster := testenv.RedisCluster(t)
	rdb := cluster.Client()
	slots := map[int64]bool{}
	for _, prefix := range []string{"notifier:", "", "a{b", "x}y:"} {
		for _, provider := range []string{"sms-gateway", "push", "p{1}", "}", "{", "a b", "émoji-☎"} {
			state, pause := stateKey(prefix, provider), pauseKey(prefix, provider)
			s1, err := rdb.ClusterKeySlot(ctx, state).Result()
			if err != nil {
				t.Fatalf("cluster keyslot %q: %v", state, err)
			}
			s2, err := rdb.ClusterKeySlot(ctx, pause).Result()
			if err != nil {
				t.Fatalf("cluster keyslot %q: %v", pause, err)
			}
			if s1 != s2 {
				t.Errorf("prefix %q provider %q: %q in slot %d, %q in slot %d", prefix, provider, state, s1, pause, s2)
			}
			slots[s1] = true
			if !strings.HasPrefix(state, "{"+prefix+"p:") {
				t.Errorf("state key %q does not start with the hash tag", state)
			}
		}
	}
	if len(slots) < 5 {
		t.Errorf("providers spread over only %d slots", len(slots))
	}
	if got := stateKey("notifier:", "sms"); got != "{notifier:p:sms}:tat" {
		t.Errorf("state key %q, want {notifier:p:sms}:tat", got)
	}
	if got := pauseKey("notifier:", "sms"); got != "{notifier:p:sms}:pause" {
		t.Errorf("pause key %q, want {notifier:p:sms}:pause", got)
	}
}
