package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the commands run in process (runCLI) leave no
// goroutine behind: every server, client and sampler they start stops with
// them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"),
		// A closed client's redial of a dead server sleeps out its second
		// before it sees the pool closed.
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
		// Keep-alive connections to the tests' fakes close with their servers.
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}
