package inspect_test

import (
	"fmt"
	"log"
	"os"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/notifier/notifier/testenv"
)

// exampleRedis is a private redis-server for the Example functions, which
// have no *testing.T to start one with.
var exampleRedis *redis.Client

func TestMain(m *testing.M) {
	tb := &mainTB{}
	srv := testenv.Redis(tb)
	exampleRedis = srv.Client()
	code := m.Run()
	tb.cleanup()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// mainTB is the testing.TB of TestMain's server: what testenv calls of it,
// outside any test. The methods it does not define are never called.
type mainTB struct {
	testing.TB
	cleanups []func()
	dirs     []string
}

func (*mainTB) Helper()                           {}
func (*mainTB) Logf(string, ...any)               {}
func (*mainTB) Name() string                      { return "inspect-TestMain" }
func (*mainTB) Fatalf(format string, args ...any) { log.Fatalf(format, args...) }
func (*mainTB) Errorf(format string, args ...any) { log.Printf(format, args...) }
func (tb *mainTB) Cleanup(f func())               { tb.cleanups = append(tb.cleanups, f) }
func (tb *mainTB) TempDir() string {
	d, err := os.MkdirTemp("", "inspect-test-")
	if err != nil {
		log.Fatalf("temp dir: %v", err)
	}
	tb.dirs = append(tb.dirs, d)
	return d
}

func (tb *mainTB) cleanup() {
	for i := len(tb.cleanups) - 1; i >= 0; i-- {
		tb.cleanups[i]()
	}
	for _, d := range tb.dirs {
		_ = os.RemoveAll(d)
	}
}

var prefixes atomic.Int64

// newPrefix returns a key prefix nothing else in this test binary uses.
func newPrefix(name string) string {
	return fmt.Sprintf("test:%s:%d:", name, prefixes.Add(1))
}
