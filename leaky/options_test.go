package leaky_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/testenv"
)

// TestOptionsOutOfRange: an option out of its range is an error from
// either constructor, naming every problem, never a panic.
func TestOptionsOutOfRange(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t).Client()
	cases := []struct {
		opts []leaky.Option
		want []string
	}{
		{[]leaky.Option{leaky.WithHeadroom(0.5)}, []string{"headroom must be in [0, 0.5), got 0.5"}},
		{[]leaky.Option{leaky.WithHeadroom(-0.01)}, []string{"headroom must be in [0, 0.5), got -0.01"}},
		{[]leaky.Option{leaky.WithHeadroom(math.NaN())}, []string{"headroom must be in [0, 0.5), got NaN"}},
		{[]leaky.Option{leaky.WithMaxCost(0)}, []string{"max cost must be at least 1, got 0"}},
		{[]leaky.Option{leaky.WithIdleTTL(-time.Second)}, []string{"idle TTL must not be negative, got -1s"}},
		{[]leaky.Option{leaky.WithIdleTTL(800 * 24 * time.Hour)}, []string{"idle TTL must be at most 735 days (luapre.MaxTTL: no script writes a longer expiry), got 19200h0m0s"}},
		{[]leaky.Option{leaky.WithHeadroom(1), leaky.WithMaxCost(-1)}, []string{"headroom must be in [0, 0.5), got 1", "max cost must be at least 1, got -1"}},
	}
	for _, tc := range cases {
		_, merr := leaky.NewMemory(tc.opts...)
		_, rerr := leaky.NewRedis(rdb, newPrefix("options"), tc.opts...)
		for name, err := range map[string]error{"NewMemory": merr, "NewRedis": rerr} {
			if err == nil {
				t.Errorf("%s: no error, want %q", name, tc.want)
				continue
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: %q, want it to say %q", name, err, w)
				}
			}
		}
	}
	if _, err := leaky.NewMemory(leaky.WithHeadroom(0), leaky.WithMaxCost(1), leaky.WithIdleTTL(0)); err != nil {
		t.Errorf("the edges of the ranges: %v", err)
	}
}
