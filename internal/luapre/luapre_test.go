package luapre_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
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
}

// The helpers live here once: no script of the module defines its own
// again or repeats the optional-now block now.lua holds; and none defines
// a global function (Redis refuses it, but only when the line runs).
func TestScriptsUseThePreambles(t *testing.T) {
	t.Parallel()
	own := regexp.MustCompile(`local function (now_us|str|idiv|ttl)\(|\* 1000000 \+ tonumber\(t\[2\]\)|(?m)^function `)
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
