package userlimit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
	"github.com/notifier/notifier/userlimit/userlimittest"
)

// pipelineRound queues, for every algorithm, 4 decisions of a limit of 3 on
// one pipeline and checks them after one Exec: the same answers Allow gives.
func pipelineRound(t *testing.T, rdb redis.UniversalClient, lim *userlimit.Redis, user string) {
	t.Helper()
	ctx := context.Background()
	pipe := rdb.Pipeline()
	key := userlimit.Key{Channel: "push", User: user}
	var ds [][]*userlimit.Decision
	for _, alg := range userlimittest.Algorithms {
		rule := userlimit.Rule{Limit: 3, Window: time.Hour, Algorithm: alg}
		var row []*userlimit.Decision
		for _, job := range []string{"a", "b", "a", "c", "d"} {
			row = append(row, lim.AllowCmd(ctx, pipe, key, job, rule))
		}
		ds = append(ds, row)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("exec: %v", err)
	}
	want := []userlimit.Result{
		{Allowed: true, Remaining: 2},
		{Allowed: true, Remaining: 1},
		{Allowed: true, Remaining: 1}, // a again: counted once
		{Allowed: true, Remaining: 0},
		{Allowed: false},
	}
	for i, alg := range userlimittest.Algorithms {
		for j, d := range ds[i] {
			got, err := d.Result()
			if err != nil {
				t.Fatalf("%s decision %d: %v", alg, j, err)
			}
			got.RetryAfter, got.At = 0, time.Time{} // the server's clock; the conformance suite checks them
			if got != want[j] {
				t.Fatalf("%s decision %d: got %+v, want %+v", alg, j, got, want[j])
			}
		}
	}
}

// TestAllowCmdPipeline: decisions queued on a pipeline after Load; after a
// restart empties the script cache they fail with ErrNotLoaded (no EVAL
// fallback in a pipeline) until Load runs again.
func TestAllowCmdPipeline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testenv.Redis(t)
	rdb := srv.Client()
	lim := userlimit.NewRedis(rdb, newPrefix("pipeline"))
	if err := lim.Load(ctx); err != nil {
		t.Fatalf("load: %v", err)
	}
	pipelineRound(t, rdb, lim, "before")

	srv.Restart()
	testenv.WaitFor(t, 10*time.Second, "Redis to answer after the restart", func() bool {
		return rdb.Ping(ctx).Err() == nil
	})
	pipe := rdb.Pipeline()
	d := lim.AllowCmd(ctx, pipe, userlimit.Key{Channel: "push", User: "x"}, "a", userlimit.Rule{Limit: 3, Window: time.Hour})
	if _, err := pipe.Exec(ctx); err == nil {
		t.Fatal("exec after the restart: no error, want NOSCRIPT")
	}
	if _, err := d.Result(); !errors.Is(err, userlimit.ErrNotLoaded) {
		t.Fatalf("decision after the restart: got %v, want an error wrapping ErrNotLoaded", err)
	}

	if err := lim.Load(ctx); err != nil {
		t.Fatalf("load after the restart: %v", err)
	}
	pipelineRound(t, rdb, lim, "after")
}

func TestAllowCmdPipelineCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.RedisCluster(t).Client()
	lim := userlimit.NewRedis(rdb, newPrefix("pipeline-cluster"))
	if err := lim.Load(ctx); err != nil { // on every master
		t.Fatalf("load: %v", err)
	}
	for i := range 8 { // users in different slots, on different masters
		pipelineRound(t, rdb, lim, fmt.Sprintf("user-%d", i))
	}
}

func TestAllowCmdInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	lim := userlimit.NewRedis(rdb, newPrefix("pipeline-invalid"))
	pipe := rdb.Pipeline()
	d := lim.AllowCmd(ctx, pipe, userlimit.Key{Channel: "push", User: "x"}, "a", userlimit.Rule{Limit: 0, Window: time.Hour})
	if pipe.Len() != 0 {
		t.Fatalf("an invalid decision was queued (%d commands)", pipe.Len())
	}
	if _, err := d.Result(); err == nil {
		t.Fatal("invalid rule: no error")
	}
}
