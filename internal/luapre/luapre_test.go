package luapre_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/internal/luapre"
	"github.com/notifier/notifier/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

// eval runs the preambles followed by body on the server (which refuses a
// script that sets a global) and returns its reply.
func eval(t *testing.T, rdb *redis.Client, body string, args ...any) any {
	t.Helper()
	v, err := rdb.Eval(context.Background(), luapre.Now+luapre.Num+body, nil, args...).Result()
	if err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return v
}

// toAny is ss as eval's arguments.
func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func TestPreambles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()

	t.Run("now_us", func(t *testing.T) {
		if got := eval(t, rdb, "return str(now_us(ARGV[1]))", "1712345678901234"); got != "1712345678901234" {
			t.Errorf("now_us('1712345678901234') = %v", got)
		}
		for _, body := range []string{"return str(now_us(ARGV[1]))", "return str(now_us(ARGV[2]))"} { // '' and absent
			before, err := rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			reply, _ := eval(t, rdb, body, "").(string)
			got, err := strconv.ParseInt(reply, 10, 64)
			if err != nil {
				t.Fatalf("%s with no now: %v", body, err)
			}
			after, err := rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got < before.UnixMicro() || got > after.UnixMicro() {
				t.Errorf("%s with no now: %d, not on the Redis clock [%d, %d]", body, got, before.UnixMicro(), after.UnixMicro())
			}
		}
	})

	t.Run("str", func(t *testing.T) {
		for _, n := range []int64{0, -5, 1e15, 1712345678900000, 1<<53 - 1} {
			if got := eval(t, rdb, "return str(tonumber(ARGV[1]))", n); got != strconv.FormatInt(n, 10) {
				t.Errorf("str(%d) = %v", n, got)
			}
		}
	})

	t.Run("idiv", func(t *testing.T) {
		cases := [][2]int64{
			{0, 7}, {6, 7}, {7, 7}, {-1, 7}, {-7, 7}, {-8, 7},
			{1712345678901234, 1000}, {1712345678901234, 3600000000},
			{1<<53 - 1, 3}, {1<<53 - 1, 1<<52 + 1}, {1<<53 - 2, 1<<53 - 1},
			{999999999999999, 1000000}, {-(1<<53 - 1), 1000},
		}
		for _, c := range cases {
			a, b := c[0], c[1]
			want := a / b
			if a%b != 0 && a < 0 {
				want-- // floor, not truncation
			}
			if got := eval(t, rdb, "return str(idiv(tonumber(ARGV[1]), tonumber(ARGV[2])))", a, b); got != strconv.FormatInt(want, 10) {
				t.Errorf("idiv(%d, %d) = %v, want %d", a, b, got, want)
			}
		}
	})

	t.Run("ttl", func(t *testing.T) {
		for _, c := range []struct {
			us   int64
			want string
		}{{0, "1000"}, {1, "1001"}, {1000, "1001"}, {1001, "1002"}, {3600000000, "3601000"}, {-1500, "999"}} {
			if got := eval(t, rdb, "return ttl(tonumber(ARGV[1]))", c.us); got != c.want {
				t.Errorf("ttl(%d) = %v, want %s", c.us, got, c.want)
			}
		}
		// A PX Redis takes as it is.
		set := luapre.Num + "return redis.call('SET', KEYS[1], 'v', 'PX', ttl(tonumber(ARGV[1])))"
		if err := rdb.Eval(ctx, set, []string{"k"}, time.Hour.Microseconds()).Err(); err != nil {
			t.Fatal(err)
		}
		if d, err := rdb.PTTL(ctx, "k").Result(); err != nil || d <= time.Hour || d > time.Hour+time.Second {
			t.Errorf("PTTL after ttl(1 h) = %v, %v", d, err)
		}
	})

	// ttl and ttl_ms hold every expiry to [1 ms, MaxTTL], whatever a
	// script computed: a global rate of 1e-15 once made a bucket's expiry
	// 1e18 ms, and the state outlived the fix of the rate.
	t.Run("clamp", func(t *testing.T) {
		maxMS := strconv.FormatInt(luapre.MaxTTL.Milliseconds(), 10)
		if got := eval(t, rdb, "return str(MAX_TTL_MS)"); got != maxMS {
			t.Fatalf("num.lua's MAX_TTL_MS = %v, luapre.MaxTTL is %s ms", got, maxMS)
		}
		for _, c := range []struct {
			body string
			arg  string
			want string
		}{
			{"return ttl(tonumber(ARGV[1]))", "1e21", maxMS},
			{"return ttl(tonumber(ARGV[1]))", "9e18", maxMS},
			{"return ttl(tonumber(ARGV[1]))", "inf", maxMS},
			{"return ttl(tonumber(ARGV[1]) * 0)", "inf", maxMS}, // NaN: never dropped early
			{"return ttl(tonumber(ARGV[1]))", "-1e21", "1"},
			{"return ttl(tonumber(ARGV[1]))", strconv.FormatInt(luapre.MaxTTL.Microseconds()-1000000, 10), maxMS},
			{"return ttl(tonumber(ARGV[1]))", strconv.FormatInt(luapre.MaxTTL.Microseconds()-1001000, 10), strconv.FormatInt(luapre.MaxTTL.Milliseconds()-1, 10)},
			{"return ttl_ms(tonumber(ARGV[1]))", "86400000", "86400000"},
			{"return ttl_ms(tonumber(ARGV[1]))", "0.2", "1"},
			{"return ttl_ms(tonumber(ARGV[1]))", "1.5", "2"},
			{"return ttl_ms(tonumber(ARGV[1]))", "1e300", maxMS},
		} {
			if got := eval(t, rdb, c.body, c.arg); got != c.want {
				t.Errorf("%s with %s = %v, want %s", c.body, c.arg, got, c.want)
			}
		}
		set := luapre.Num + "redis.call('SET', KEYS[1], 'v', 'PX', ttl(tonumber(ARGV[1]))); " +
			"redis.call('SET', KEYS[2], 'v'); redis.call('PEXPIRE', KEYS[2], ttl_ms(tonumber(ARGV[1]))); return 1"
		if err := rdb.Eval(ctx, set, []string{"clamp-px", "clamp-pexpire"}, "1e21").Err(); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"clamp-px", "clamp-pexpire"} {
			if d, err := rdb.PTTL(ctx, k).Result(); err != nil || d <= luapre.MaxTTL-time.Minute || d > luapre.MaxTTL {
				t.Errorf("PTTL of %s written with 1e21 = %v, %v; want at most %v", k, d, err, luapre.MaxTTL)
			}
		}
	})

	// ttl_ms keeps what it formatted for the rest of the run: one run
	// asking for many expiries, repeats, NaN and clamped ones among them,
	// gets each the answer a run of its own gets.
	t.Run("memo", func(t *testing.T) {
		args := []string{"86400000", "1.5", "86400000", "0.2", "nan", "1e300", "2", "1.5", "nan", "-5", "3600000", "2", "1e300"}
		var want []any
		for _, a := range args {
			body := "return ttl_ms(tonumber(ARGV[1]))"
			if a == "nan" {
				body = "return ttl_ms(0/0)"
			}
			want = append(want, eval(t, rdb, body, a))
		}
		all := "local out = {}; for i = 1, #ARGV do local n = tonumber(ARGV[i]); if ARGV[i] == 'nan' then n = 0/0 end; out[i] = ttl_ms(n) end; return out"
		got, err := rdb.Eval(ctx, luapre.Num+all, nil, toAny(args)...).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ttl_ms in one run of %v = %v, in a run each %v", args, got, want)
		}
		us := []string{"3600000000", "1000", "3600000000", "7200000000", "1000"}
		var wantUS []any
		for _, a := range us {
			wantUS = append(wantUS, eval(t, rdb, "return ttl(tonumber(ARGV[1]))", a))
		}
		got, err = rdb.Eval(ctx, luapre.Num+"local out = {}; for i = 1, #ARGV do out[i] = ttl(tonumber(ARGV[i])) end; return out", nil, toAny(us)...).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, wantUS) {
			t.Errorf("ttl in one run of %v = %v, in a run each %v", us, got, wantUS)
		}
	})

	// arg and whole return an argument within its range, or stop the
	// script with an error that names the argument, its value and the
	// range; now_us does the same for a bad now.
	t.Run("arguments", func(t *testing.T) {
		for _, c := range []struct {
			body, arg, want string
		}{
			{"return str(whole('burst', ARGV[1], 1, 1000000))", "500", "500"},
			{"return str(arg('rate', ARGV[1], 1 / 86400, 1000000) * 1000)", "0.5", "500"},
			{"return str(arg('rate', ARGV[1], 1 / 86400, 1000000) * 1000)", "1000000", "1000000000"},
		} {
			if got := eval(t, rdb, c.body, c.arg); got != c.want {
				t.Errorf("%s with %s = %v, want %s", c.body, c.arg, got, c.want)
			}
		}
		for _, c := range []struct {
			body, arg, want string
		}{
			{"return arg('rate', ARGV[1], 1 / 86400, 1000000)", "1e-15", "ERR argument rate out of range: 1e-15 (want a number from 1.1574074074074073e-05 to 1000000)"},
			{"return arg('rate', ARGV[1], 1 / 86400, 1000000)", "1e12", "ERR argument rate out of range: 1e12 (want a number from 1.1574074074074073e-05 to 1000000)"},
			{"return arg('rate', ARGV[1], 1 / 86400, 1000000)", "nan", "ERR argument rate out of range: nan"},
			{"return arg('rate', ARGV[1], 1 / 86400, 1000000)", "", "ERR argument rate out of range:  (want"},
			{"return whole('burst', ARGV[1], 1, 1000000)", "1e12", "ERR argument burst out of range: 1e12 (want an integer from 1 to 1000000)"},
			{"return whole('burst', ARGV[1], 1, 1000000)", "2.5", "ERR argument burst out of range: 2.5 (want an integer"},
			{"return str(now_us(ARGV[1]))", "1e20", "ERR argument now out of range: 1e20"},
			{"return str(now_us(ARGV[1]))", "-1", "ERR argument now out of range: -1"},
			{"return str(now_us(ARGV[1]))", "17.5", "ERR argument now out of range: 17.5"},
		} {
			err := rdb.Eval(ctx, luapre.Now+luapre.Num+c.body, nil, c.arg).Err()
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("%s with %q: %v, want an error starting %q", c.body, c.arg, err, c.want)
			}
		}
	})
}

// The helpers live here once: no script of the module defines its own
// again or repeats the optional-now block now.lua holds; and none defines
// a global function (Redis refuses it, but only when the line runs).
func TestScriptsUseThePreambles(t *testing.T) {
	t.Parallel()
	own := regexp.MustCompile(`local function (now_us|str|idiv|ttl|ttl_ms|fmt|arg|whole)\(|\* 1000000 \+ tonumber\(t\[2\]\)|(?m)^function `)
	self := filepath.Join("..", "..", "internal", "luapre")
	n := 0
	err := filepath.WalkDir(filepath.Join("..", ".."), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || path == self) {
			return filepath.SkipDir
		}
		if d.IsDir() || filepath.Ext(path) != ".lua" {
			return nil
		}
		n++
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if m := own.Find(src); m != nil {
			t.Errorf("%s has %q: prepend luapre.Now or luapre.Num instead of a copy; make a function local", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Fatalf("found %d scripts under the module: the walk missed them", n)
	}
}

// expiryExceptions are the scripts that may set an expiry from their
// arguments as they are, not through ttl or ttl_ms: none now (the
// gateway's were the last).
var expiryExceptions = map[string]bool{}

// TestExpiriesAreClamped: every expiry a script of the module sets (PX,
// PEXPIRE, EXPIRE, …) is ttl(…) or ttl_ms(…), which hold it to MaxTTL,
// so no argument, however absurd, leaves a key for ~9e18 ms; the
// exceptions above are listed by name.
func TestExpiriesAreClamped(t *testing.T) {
	t.Parallel()
	expiry := regexp.MustCompile(`'(PX|EX|PXAT|EXAT|PEXPIRE|EXPIRE|PEXPIREAT|EXPIREAT|SETEX|PSETEX)',\s*([^,)]+,\s*)?([^\n]*)`)
	ident := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*\b`)
	root := filepath.Join("..", "..")
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || filepath.Ext(path) != ".lua" {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(src), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "--") {
				continue
			}
			m := expiry.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			if m[1] == "PX" || m[1] == "EX" || m[1] == "PXAT" || m[1] == "EXAT" {
				m[3] = strings.TrimSpace(m[2] + m[3]) // SET's option: the value follows it
			}
			seen[rel] = true
			if expiryExceptions[rel] {
				continue
			}
			if m[1] != "PX" && m[1] != "PEXPIRE" {
				t.Errorf("%s: %q: set expiries in ms with PX or PEXPIRE and ttl or ttl_ms", rel, strings.TrimSpace(line))
				continue
			}
			v := m[3]
			if id := ident.FindString(v); id != "" && !strings.HasPrefix(v, "ttl") {
				// a local set once from ttl or ttl_ms (token_bucket's px)
				if regexp.MustCompile(`local ` + id + ` = ttl(_ms)?\(`).Match(src) {
					continue
				}
			}
			if !strings.HasPrefix(v, "ttl(") && !strings.HasPrefix(v, "ttl_ms(") {
				t.Errorf("%s: %q: an expiry not built by ttl or ttl_ms can exceed MaxTTL", rel, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for rel := range expiryExceptions {
		if !seen[rel] {
			t.Errorf("%s is listed as an exception but sets no expiry (any more): drop it from the list", rel)
		}
	}
	for _, rel := range []string{"globallimit/take.lua", "leaky/reserve.lua", "leaky/pause.lua", "userlimit/sliding_log.lua", "userlimit/token_bucket.lua"} {
		if !seen[rel] {
			t.Errorf("found no expiry in %s: the pattern missed it", rel)
		}
	}
}
