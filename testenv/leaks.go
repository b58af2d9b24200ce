package testenv

import (
	"testing"

	"go.uber.org/goleak"
)

// VerifyNoLeaks runs m and then fails the binary if a goroutine is left
// (goleak), apart from go-redis's process-wide idle-pool reaper, which
// outlives every client, fasthttp's own (FastHTTP) and extra. Call it from
// TestMain.
func VerifyNoLeaks(m *testing.M, extra ...goleak.Option) {
	goleak.VerifyTestMain(m, append(append([]goleak.Option{RedisReaper}, FastHTTP...), extra...)...)
}

// FastHTTP are fasthttp's goroutines that outlive a server: the
// process-wide updater of the Date header, started with the first server,
// and a stopped server's worker-pool cleaner, which sleeps out its
// MaxIdleWorkerDuration (10 s) before it sees the stop and returns.
var FastHTTP = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
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
