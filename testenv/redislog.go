package testenv

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// go-redis writes its own notices (a pool's "connection refused" while a
// test has stopped a server on purpose, a cluster's slot-map reloads) to
// stderr through one process-wide logger. In a test binary they are noise
// around the failures that matter: the suite printed about 120 such lines.
// testenv is imported only by tests, so its init quiets that logger for
// every test binary; a test that starts `notifier run` in process still
// routes them into its own log (service.RouteRedisLogs sets the logger
// again).
func init() { redis.SetLogger(quietRedis{}) }

// quietRedis drops go-redis's log lines.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}
