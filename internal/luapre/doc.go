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

import _ "embed" // the preambles

var (
	// Now defines now_us(arg): the time in µs since the Unix epoch, arg
	// when the caller passed one (tests only), else the Redis clock (TIME).
	//go:embed now.lua
	Now string

	// Num defines the integer helpers: str(n), n as a decimal integer
	// string; idiv(a, b), floor(a / b) exactly; ttl(us), a key's expiry in
	// ms (as str) one second past us µs from now.
	//go:embed num.lua
	Num string
)
