package config

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the clients the tests connect (Redis over TLS, a
// Sentinel's failover client) are closed with their goroutines.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"))
}
