package suppress_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/limits/suppress"
	"github.com/notifier/notifier/testenv"
)

// fill lists n recipients of sms in rdb under prefix, straight (a
// pipeline of SETs), listed from at on, per of them in each second.
func fill(tb testing.TB, rdb redis.UniversalClient, prefix string, n, per int, at time.Time) {
	tb.Helper()
	ctx := context.Background()
	s := suppress.NewRedis(rdb, prefix)
	for i := 0; i < n; i += 1000 {
		pipe := rdb.Pipeline() // a Cluster's split by slot
		for j := i; j < min(n, i+1000); j++ {
			e := suppress.Entry{Channel: "sms", Hash: suppress.Hash("sms", fmt.Sprintf("+1415%07d", j)), Provider: "twilio",
				Detail: "21610 replied STOP", At: at.Add(time.Duration(j/per) * time.Second)}
			e.Until = e.At.Add(time.Hour)
			data, _ := json.Marshal(e)
			pipe.Set(ctx, s.Key(e.Channel, e.Hash), data, time.Hour)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkList is `notifier suppression list --limit 100` over 100,000
// listed recipients.
//
//	go test -run '^$' -bench List -benchtime 3x ./suppress
func BenchmarkList(b *testing.B) {
	const n = 100000
	rdb := testenv.Redis(b).Client()
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	fill(b, rdb, "bench:", n, 1, at)
	s := suppress.NewRedis(rdb, "bench:")
	b.ResetTimer()
	for range b.N {
		es, err := s.List(context.Background(), "", 100)
		if err != nil || len(es) != 100 || !es[0].At.Equal(at.Add((n-1)*time.Second)) {
			b.Fatalf("list: %d, %v", len(es), err)
		}
	}
}
