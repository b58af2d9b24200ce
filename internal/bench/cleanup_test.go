package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/notifier/notifier/testenv"
)

// TestCleanupDeletesOnlyTheBenchKeys: on a server the user pointed the
// bench at, cleanup deletes every key of the bench's prefix, in both of
// its forms (hash-tagged or not), and nothing else, however many pages
// the scan takes.
func TestCleanupDeletesOnlyTheBenchKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testenv.Redis(t)
	rdb := srv.Client()
	const prefix = "bench-x:"
	pipe := rdb.Pipeline()
	for i := range 2500 {
		pipe.Set(ctx, fmt.Sprintf("%sj:%d", prefix, i), "v", 0)
		pipe.Set(ctx, fmt.Sprintf("{%sp:sink}:%d", prefix, i), "v", 0)
	}
	pipe.Set(ctx, "other:keep", "v", 0)
	pipe.Set(ctx, "{other}:bench-x:keep", "v", 0)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	r := &benchRedis{client: rdb}
	r.cleanup(ctx, prefix)
	left, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 {
		t.Fatalf("%d keys left, want the 2 not the bench's: %v", len(left), left[:min(len(left), 5)])
	}
}
