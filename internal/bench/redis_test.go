package bench

import (
	"testing"

	"github.com/notifier/notifier/testenv"
)

// TestRedisStatsDiff: the commands between two snapshots, less the
// snapshot's own INFO calls, largest first.
func TestRedisStatsDiff(t *testing.T) {
	t.Parallel()
	before := redisStats{calls: map[string]int64{"evalsha": 10, "info": 4, "ping": 1}, cpu: 1.5, masters: 1}
	after := redisStats{calls: map[string]int64{"evalsha": 30, "info": 6, "ping": 1, "hset": 20, "time": 5}, cpu: 2.0, masters: 1}
	total, by, cpu := after.diff(before)
	if total != 45 || cpu != 0.5 {
		t.Fatalf("total %d, cpu %v; want 45 (evalsha 20, hset 20, time 5; the 2 INFO are the bench's own), 0.5", total, cpu)
	}
	want := []CommandCount{{Command: "evalsha", Calls: 20}, {Command: "hset", Calls: 20}, {Command: "time", Calls: 5}}
	if len(by) != len(want) {
		t.Fatalf("by command %+v, want %+v", by, want)
	}
	for i := range want {
		if by[i] != want[i] {
			t.Fatalf("by command %+v, want %+v", by, want)
		}
	}
}

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }
