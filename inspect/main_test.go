package inspect_test

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/notifier/notifier/internal/localenv"
	"github.com/notifier/notifier/testenv"
)

// exampleRedis is a private redis-server for the Example functions, which
// have no *testing.T to start one with.
var exampleRedis *redis.Client

func TestMain(m *testing.M) {
	srv, err := localenv.StartRedis()
	if err != nil {
		fmt.Fprintln(os.Stderr, "inspect tests:", err)
		os.Exit(1)
	}
	exampleRedis = redis.NewClient(srv.Options())
	code := m.Run()
	_ = exampleRedis.Close()
	srv.Close()
	if code == 0 {
		if err := goleak.Find(testenv.RedisReaper); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var prefixes atomic.Int64

// newPrefix returns a key prefix nothing else in this test binary uses.
func newPrefix(name string) string {
	return fmt.Sprintf("test:%s:%d:", name, prefixes.Add(1))
}
