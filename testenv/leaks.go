package testenv

import (
	"testing"

	"go.uber.org/goleak"
)

// VerifyNoLeaks runs m and then fails the binary if a goroutine is left
// (goleak), apart from go-redis's process-wide idle-pool reaper, which
// outlives every client, and extra. Call it from TestMain.
func VerifyNoLeaks(m *testing.M, extra ...goleak.Option) {
	goleak.VerifyTestMain(m, append([]goleak.Option{RedisReaper}, extra...)...)
}

// RedisReaper is go-redis's idle-pool reaper, which outlives every client.
var RedisReaper = goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper")

// DyingConnections are the goroutines a test that kills servers leaves for
// a moment: a closed go-redis client's redial of a dead server sleeps out
// its second before it sees the pool closed, and keep-alive connections to
// a test's fake provider close with its server.
var DyingConnections = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
	goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
	goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
}
