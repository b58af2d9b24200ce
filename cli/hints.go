package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/limits/fleet"
	"github.com/notifier/notifier/queue"
)

// noInstanceHint says what a fleet with no live instance in cfg's Redis
// likely means: the commands that read the fleet's state (status, explain)
// read Redis, which `notifier dev` never writes, and which another
// key_prefix or another Redis keeps apart.
func noInstanceHint(w io.Writer, cfg config.Config) {
	fmt.Fprintf(w, "\nNo notifier run has a heartbeat in this Redis (%s, key_prefix %q). Likely:\n",
		strings.Join(redactAddrs(cfg.Redis.Addrs), ","), cfg.Redis.KeyPrefix)
	fmt.Fprintf(w, "  - the dispatcher is a notifier dev: it keeps its limits in its own memory, not in Redis;\n")
	fmt.Fprintf(w, "    read its state on its metrics port instead: http://%s/status\n", devMetricsAddr(cfg))
	fmt.Fprintf(w, "  - the processes use another redis.key_prefix, or another Redis, than this configuration\n")
	fmt.Fprintf(w, "    (NOTIFIER_REDIS_ADDRS and NOTIFIER_REDIS_KEY_PREFIX override the file's)\n")
	fmt.Fprintf(w, "  - none is running, or none has been up in the last 10 s\n")
}

// devMetricsAddr is where a dev started on this configuration serves
// /status: its metrics.listen, 127.0.0.1:9464 by default.
func devMetricsAddr(cfg config.Config) string {
	if l := cfg.Metrics.Listen; l != "" && l != "off" && !strings.HasSuffix(l, ":0") {
		return l
	}
	return "127.0.0.1:9464"
}

func redactAddrs(addrs []string) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = queue.RedactAddr(a)
	}
	return out
}

// hintIfNoInstance prints noInstanceHint when cfg's Redis holds no live
// instance's heartbeat (and nothing when it cannot tell).
func hintIfNoInstance(ctx context.Context, w io.Writer, rdb redis.UniversalClient, cfg config.Config) {
	if live, err := fleet.Read(ctx, rdb, cfg.Redis.KeyPrefix); err == nil && len(live) == 0 {
		noInstanceHint(w, cfg)
	}
}
