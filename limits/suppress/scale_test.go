package suppress_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/limits/suppress"
	"github.com/notifier/notifier/testenv"
)

// countHook counts the commands a client sends, pipelined or not.
type countHook struct{ n atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

// fillSuppressed lists n sms recipients as Add would, in one script run
// per 100,000 on the server (each a key holding its Entry as JSON, expiring
// in a day), the i-th listed i seconds after 2026-01-01, each until as
// long after (2099-01-01 and i seconds: a suppression.ttl of 73 years,
// the same for every one, as Add writes them).
func fillSuppressed(t *testing.T, rdb *redis.Client, prefix string, n int) {
	t.Helper()
	const fill = `
local prefix, from, to = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
for i = from, to - 1 do
  local h = string.format('%064x', i)
  local d = 1 + math.floor(i / 86400)
  local s = i % 86400
  local at = string.format('2026-01-%02dT%02d:%02d:%02dZ', d, math.floor(s / 3600), math.floor(s / 60) % 60, s % 60)
  local till = '2099' .. string.sub(at, 5)
  local e = '{"channel":"sms","hash":"' .. h .. '","provider":"sms-gw","detail":"twilio 21610: the recipient replied STOP","job":"j' .. i .. '","at":"' .. at .. '","until":"' .. till .. '"}'
  redis.call('SET', '{' .. prefix .. 'sup:sms:' .. h .. '}', e, 'EX', 86400)
end
return to - from`
	for from := 0; from < n; from += 100_000 {
		if err := rdb.Eval(context.Background(), fill, nil, prefix, from, min(from+100_000, n)).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestListOfAFewReadsNotTheWholeList: `notifier suppression list` (limit
// 100, its default) with many recipients listed. It scanned every key and
// read every entry to keep the newest 100: 200,000 listed were 200,203
// Redis commands and 279 MB allocated for 100 rows, every time (1,000,000:
// 1,001,003 commands, 1.39 GB). Now it reads each channel's index: the
// first List on recipients listed by an earlier build (filled here
// straight into their keys, as that build did) builds the index from one
// scan, and every List after it, and after an Add, costs its rows.
func TestListOfAFewReadsNotTheWholeList(t *testing.T) {
	n := 200_000
	if v, err := strconv.Atoi(os.Getenv("NOTIFIER_SCALE_SUPPRESSED")); err == nil && v > 0 {
		n = v
	}
	rdb := testenv.Redis(t).Client()
	fillSuppressed(t, rdb, "t:", n)
	h := &countHook{}
	rdb.AddHook(h)
	store := suppress.NewRedis(rdb, "t:")
	list := func(what string, newest int) {
		t.Helper()
		h.n.Store(0)
		var before, after runtimeAlloc
		before.read()
		es, err := store.List(context.Background(), "sms", 100)
		after.read()
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != 100 {
			t.Fatalf("%s: List gave %d entries, want 100", what, len(es))
		}
		if es[0].Job != "j"+strconv.Itoa(newest) || es[99].Job != "j"+strconv.Itoa(newest-99) {
			t.Fatalf("%s: List gave %s to %s; want the newest 100, j%d to j%d", what, es[0].Job, es[99].Job, newest, newest-99)
		}
		t.Logf("%s, %d listed: List(limit 100) sent %d commands, allocated %d bytes", what, n, h.n.Load(), after.total-before.total)
		if what != "the first (it builds the index)" && h.n.Load() > 250 { // 100 GETs, a page of the index, what a gone entry adds
			t.Errorf("%s: List of the newest 100 among %d listed recipients sent %d Redis commands (%d bytes allocated): it grows with the list",
				what, n, h.n.Load(), after.total-before.total)
		}
	}
	list("the first (it builds the index)", n-1)
	list("the second", n-1)
	for i := n - 3; i < n; i++ { // the newest three gone (expired, or removed by hand)
		if err := rdb.Del(context.Background(), store.Key("sms", fmt.Sprintf("%064x", i))).Err(); err != nil {
			t.Fatal(err)
		}
	}
	list("after the newest three are gone", n-4)
	if got, err := rdb.ZCard(context.Background(), "{t:supidx:sms}").Result(); err != nil || got != int64(n-3) {
		t.Errorf("the index holds %d (%v), want %d: the gone ones dropped as List met them", got, err, n-3)
	}
}
