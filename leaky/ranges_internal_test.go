package leaky

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/internal/luapre"
	"github.com/notifier/notifier/testenv"
)

var rangePrefixes atomic.Int64

// scriptCall is one direct call of a script: its name, the script and
// its arguments after the keys.
type scriptCall struct {
	name   string
	script *redis.Script
	args   []any
}

// rangesNow is the fixed instant of these calls, µs (2024).
const rangesNow = int64(1_717_171_717_000_000)

// reserveArgs are reserve.lua's arguments for one plain reservation, with
// the i-th replaced when set is given.
func reserveArgs(set map[int]any) []any {
	a := []any{5_000_000, 5_100_000, 86_400_000, rangesNow, "0", 0, 10_000}
	for i, v := range set {
		a[i] = v
	}
	return a
}

// shapedArgs are reserve.lua's arguments for one adaptive reservation under
// one quota (100/s, min 10/s, hold 22 s, convex 4 s, per 60 s limit 1000),
// with replacements.
func shapedArgs(set map[int]any) []any {
	a := []any{5_000_000, 5_100_000, 86_400_000, rangesNow, "0", 11,
		100_000_000, 10_000_000, "0.985", 5_000_000, 2_000_000, 18_000_000, 22_000_000, 4000, 1, 60_000_000, 1000,
		10_000, 1}
	for i, v := range set {
		a[i] = v
	}
	return a
}

// pauseArgs are pause.lua's arguments, a backoff's with the adaptive
// ones (cut to 5 for a plain pause), with replacements.
func pauseArgs(set map[int]any) []any {
	a := []any{1_000_000, 86_400_000, rangesNow, "", "p",
		100_000_000, 10_000_000, "0.7", 5_000_000, 2_000_000, 18_000_000, 22_000_000, "0.98", 500_000, "0.9", 4000}
	for i, v := range set {
		a[i] = v
	}
	return a
}

// TestScriptsRefuseArgumentsOutOfRange calls the scripts directly with
// arguments no valid contract or option makes (a 1e21 µs queue, a NaN
// pace, a rate of 1e20 quanta, a pause of 1e21 µs, …): each stops with an
// error that names the argument, and no key is written.
func TestScriptsRefuseArgumentsOutOfRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	for _, c := range []struct {
		call scriptCall
		want string
	}{
		{scriptCall{"reserve mqd 1e21", reserveScript, reserveArgs(map[int]any{0: "1e21"})}, "argument mqd out of range: 1e21"},
		{scriptCall{"reserve mqd -1", reserveScript, reserveArgs(map[int]any{0: -1})}, "argument mqd out of range: -1"},
		{scriptCall{"reserve cold 1e300", reserveScript, reserveArgs(map[int]any{1: "1e300"})}, "argument cold out of range"},
		{scriptCall{"reserve idle 1e15 ms", reserveScript, reserveArgs(map[int]any{2: "1e15"})}, "argument idle out of range"},
		{scriptCall{"reserve now 1e20", reserveScript, reserveArgs(map[int]any{3: "1e20"})}, "argument now out of range"},
		{scriptCall{"reserve inc 1e21", reserveScript, reserveArgs(map[int]any{6: "1e21"})}, "argument inc out of range: 1e21"},
		{scriptCall{"reserve inc 0", reserveScript, reserveArgs(map[int]any{6: 0})}, "argument inc out of range: 0"},
		{scriptCall{"reserve inc 1.5", reserveScript, reserveArgs(map[int]any{6: "1.5"})}, "argument inc out of range: 1.5"},
		{scriptCall{"reserve n nan", reserveScript, reserveArgs(map[int]any{5: "nan"})}, "argument n out of range"},
		{scriptCall{"shaped rate 1e20", reserveScript, shapedArgs(map[int]any{6: "1e20"})}, "argument rate out of range"},
		{scriptCall{"shaped min over rate", reserveScript, shapedArgs(map[int]any{7: 200_000_000})}, "argument min out of range"},
		{scriptCall{"shaped pace 2", reserveScript, shapedArgs(map[int]any{8: "2"})}, "argument pace out of range"},
		{scriptCall{"shaped increase 0", reserveScript, shapedArgs(map[int]any{9: 0})}, "argument increase out of range"},
		{scriptCall{"shaped quiet 1e18", reserveScript, shapedArgs(map[int]any{10: "1e18"})}, "argument quiet out of range"},
		{scriptCall{"shaped dcap 1e17", reserveScript, shapedArgs(map[int]any{11: "1e17"})}, "argument dcap out of range"},
		{scriptCall{"shaped hold 1e18", reserveScript, shapedArgs(map[int]any{12: "1e18"})}, "argument hold out of range"},
		{scriptCall{"shaped convex 0", reserveScript, shapedArgs(map[int]any{13: 0})}, "argument convex out of range"},
		{scriptCall{"shaped 5 quotas", reserveScript, shapedArgs(map[int]any{14: 5})}, "argument nq out of range"},
		{scriptCall{"shaped per 0", reserveScript, shapedArgs(map[int]any{15: 0})}, "argument per out of range"},
		{scriptCall{"shaped per 1e15", reserveScript, shapedArgs(map[int]any{15: "1e15"})}, "argument per out of range"},
		{scriptCall{"shaped limit 1e20", reserveScript, shapedArgs(map[int]any{16: "1e20"})}, "argument limit out of range"},
		{scriptCall{"shaped inc 1e21", reserveScript, shapedArgs(map[int]any{17: "1e21"})}, "argument inc out of range"},
		{scriptCall{"shaped cost 0", reserveScript, shapedArgs(map[int]any{18: 0})}, "argument cost out of range"},
		{scriptCall{"pause 1e21 µs", pauseScript, pauseArgs(map[int]any{0: "1e21"})[:5]}, "argument d out of range: 1e21"},
		{scriptCall{"pause 0", pauseScript, pauseArgs(map[int]any{0: 0})[:5]}, "argument d out of range: 0"},
		{scriptCall{"pause idle -1", pauseScript, pauseArgs(map[int]any{1: -1})[:5]}, "argument idle out of range"},
		{scriptCall{"backoff rate 1e20", pauseScript, pauseArgs(map[int]any{5: "1e20"})}, "argument rate out of range"},
		{scriptCall{"backoff decrease 2", pauseScript, pauseArgs(map[int]any{7: "2"})}, "argument decrease out of range"},
		{scriptCall{"backoff increase 1e12", pauseScript, pauseArgs(map[int]any{8: "1e12"})}, "argument increase out of range"},
		{scriptCall{"backoff hold -1", pauseScript, pauseArgs(map[int]any{11: -1})}, "argument hold out of range"},
		{scriptCall{"backoff keep 1.5", pauseScript, pauseArgs(map[int]any{12: "1.5"})}, "argument keep out of range"},
		{scriptCall{"backoff lag 1e18", pauseScript, pauseArgs(map[int]any{13: "1e18"})}, "argument lag out of range"},
		{scriptCall{"backoff ease nan", pauseScript, pauseArgs(map[int]any{14: "nan"})}, "argument ease out of range"},
		{scriptCall{"backoff convex 0", pauseScript, pauseArgs(map[int]any{15: 0})}, "argument convex out of range"},
		{scriptCall{"resume horizon 1e21", resumeScript, []any{"1e21", rangesNow, "", "p"}}, "argument horizon out of range"},
	} {
		t.Run(c.call.name, func(t *testing.T) {
			prefix := fmt.Sprintf("ranges:%d:", rangePrefixes.Add(1))
			keys := []string{stateKey(prefix, "p"), pauseKey(prefix, "p")}
			if c.call.script == resumeScript {
				// resume lifts a pause: there must be one for it to write
				if err := rdb.Set(ctx, keys[1], rangesNow+1_000_000, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
			err := c.call.script.Run(ctx, rdb, keys, c.call.args...).Err()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want an error saying %q", err, c.want)
			}
			n, err := rdb.Exists(ctx, keys[0]).Result()
			if err != nil || n != 0 {
				t.Errorf("the state key was written (%d, %v)", n, err)
			}
			if c.call.script != resumeScript {
				if n, err := rdb.Exists(ctx, keys[1]).Result(); err != nil || n != 0 {
					t.Errorf("the pause key was written (%d, %v)", n, err)
				}
			} else if n, err := rdb.Exists(ctx, keys[1]).Result(); err != nil || n != 1 {
				t.Errorf("the pause was lifted (%d, %v)", n, err)
			}
		})
	}
}

// TestScriptExpiriesStayUnderMaxTTL calls the scripts with the largest
// arguments they take (a queue of 2^51 µs, 71 years; an idle TTL of
// luapre.MaxTTL; a pause of 2^51 µs; a quota window of 366 days; a climb
// of 2^53 µs) and reads the PTTL of every key they wrote: none is past
// luapre.MaxTTL (before, reserve.lua set 142 years).
func TestScriptExpiriesStayUnderMaxTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	const big = 1 << 51
	idle := luapre.MaxTTL.Milliseconds()
	for _, c := range []scriptCall{
		{"plain", reserveScript, reserveArgs(map[int]any{0: big, 1: 2 * big, 2: idle, 6: big})},
		{"shaped", reserveScript, shapedArgs(map[int]any{0: big, 1: 2 * big, 2: idle, 10: big, 11: 1 << 53, 12: big, 15: 31_622_400_000_000, 16: big, 17: big})},
		{"pause", pauseScript, pauseArgs(map[int]any{0: big, 1: idle})[:5]},
		{"backoff", pauseScript, pauseArgs(map[int]any{0: big, 1: idle, 9: big, 10: 1 << 53, 11: big})},
	} {
		t.Run(c.name, func(t *testing.T) {
			prefix := fmt.Sprintf("ranges:%d:", rangePrefixes.Add(1))
			keys := []string{stateKey(prefix, "p"), pauseKey(prefix, "p")}
			if c.script == pauseScript {
				// a state to push and keep: pause.lua leaves a missing one missing
				if err := reserveScript.Run(ctx, rdb, keys, reserveArgs(nil)...).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.script.Run(ctx, rdb, keys, c.args...).Err(); err != nil {
				t.Fatal(err)
			}
			written := 0
			for _, k := range keys {
				d, err := rdb.PTTL(ctx, k).Result()
				if err != nil {
					t.Fatal(err)
				}
				if d == -2*time.Nanosecond {
					continue // not written
				}
				written++
				if d <= 0 || d > luapre.MaxTTL {
					t.Errorf("%s: PTTL %v, want within (0, %v]", k, d, luapre.MaxTTL)
				}
			}
			if written == 0 {
				t.Fatal("no key written")
			}
		})
	}
}
