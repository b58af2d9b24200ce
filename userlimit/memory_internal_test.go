package userlimit

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestMemoryStateBoundedPerKey: one busy key keeps O(limit) log entries
// (sliding_log: limit; token_bucket: the admissions of one window, at most
// 2·limit) and O(admissions per window) job markers, however many jobs it
// has seen.
func TestMemoryStateBoundedPerKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mem := NewMemory(WithNow(func() time.Time { return now }))
	key := Key{Channel: "push", User: "busy"}
	for _, alg := range algorithms {
		rule := Rule{Limit: 10, Window: time.Second, Algorithm: alg}
		for i := range 20_000 {
			if _, err := mem.Allow(ctx, key, fmt.Sprintf("job-%d", i), rule); err != nil {
				t.Fatal(err)
			}
			now = now.Add(10 * time.Millisecond) // 100 attempts per window, at most ~20 admitted
			mk := memKey{key: key, alg: alg}
			sh := &mem.shards[0]
			for i := range mem.shards {
				if mem.shards[i].m[mk] != nil {
					sh = &mem.shards[i]
				}
			}
			st := sh.m[mk]
			if st == nil {
				continue
			}
			most := rule.Limit
			if alg == TokenBucket {
				most = 2 * rule.Limit
			}
			if len(st.log) > most || len(st.ids) != len(st.log) {
				t.Fatalf("%s: %d log entries and %d ids for a limit of %d", alg, len(st.log), len(st.ids), rule.Limit)
			}
			if len(st.jobs) > 64 {
				t.Fatalf("%s: %d job markers after %d jobs: lapsed markers are not pruned", alg, len(st.jobs), i+1)
			}
		}
	}
}
