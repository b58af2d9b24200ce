// Package luapre holds the Lua preambles the Redis scripts of several
// packages share. Go's embed cannot reach a file outside its package's
// directory, so the shared text lives here and each package builds its
// scripts by concatenation, a preamble before the script's own text:
//
//	reserveScript = redis.NewScript(luapre.Now + luapre.Num + shapingLua + reserveLua)
//
// A preamble defines local functions only (a Redis script may not define
// globals); a script uses what its header says comes prepended.
package luapre

import (
	_ "embed" // the preambles
	"time"
)

var (
	// Now defines now_us(arg): the time in µs since the Unix epoch, arg
	// when the caller passed one (tests only; an integer from 0 to 2^53,
	// else the script stops with an error), else the Redis clock (TIME).
	//go:embed now.lua
	Now string

	// Num defines the integer helpers: str(n), n as a decimal integer
	// string; idiv(a, b), floor(a / b) exactly; ttl(us), a key's expiry in
	// ms (as str) one second past us µs from now, and ttl_ms(ms), an
	// expiry given in ms, both held to [1 ms, MaxTTL]; num(v), tonumber(v)
	// memoized for the script run; and the argument
	// checks arg(name, v, lo, hi) and whole(name, v, lo, hi), which return
	// v as a number within [lo, hi] (whole: an integer) or stop the script
	// with an error naming it, its value and the range. EXACT is 2^53 and
	// MAX_TTL_MS is MaxTTL in ms.
	//go:embed num.lua
	Num string
)

// MaxTTL is the longest expiry a script that builds its expiries with
// Num's ttl or ttl_ms can write, whatever its arguments: the worst case of
// the configuration's ranges (SPEC §4), a per-user cap's state kept two
// windows of at most 366 days past an instant at most 48 h ahead, plus a
// second, rounded up to whole days. num.lua's MAX_TTL_MS is this in ms.
const MaxTTL = 735 * 24 * time.Hour
