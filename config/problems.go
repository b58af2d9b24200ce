package config

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/go-viper/mapstructure/v2"
)

// Problems unwraps errors.Join trees into their leaves.
func Problems(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, Problems(e)...)
		}
		return out
	}
	return []error{err}
}

// Error is a configuration that cannot be used: every problem found,
// one per line. The command line maps it to exit code 2.
type Error struct {
	File     string
	Problems []error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "configuration %s: %d problem", e.File, len(e.Problems))
	if len(e.Problems) != 1 {
		b.WriteString("s")
	}
	for _, p := range e.Problems {
		b.WriteString("\n  - ")
		b.WriteString(p.Error())
	}
	return b.String()
}

// prefixed is each problem with prefix (a key path) before it.
func prefixed(prefix string, problems []error) []error {
	out := make([]error, len(problems))
	for i, p := range problems {
		out[i] = fmt.Errorf("%s%w", prefix, p)
	}
	return out
}

// reportedKey reports whether p is about a key already in problems.
func reportedKey(problems []error, p error) bool {
	key, _, _ := strings.Cut(p.Error(), ": ")
	for _, q := range problems {
		if k, _, _ := strings.Cut(q.Error(), ": "); k == key {
			return true
		}
	}
	return false
}

func sortProblems(ps []error) {
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Error() < ps[j].Error() })
}

// problemKey is the key path a problem names ("nats.ack_wait",
// "providers[0].rate"): the text before its first ": ", when that reads as
// a path.
func problemKey(p error) string {
	k, _, ok := strings.Cut(p.Error(), ": ")
	if !ok || strings.ContainsAny(k, " \t") {
		return ""
	}
	return k
}

// containsProblem reports whether problems already has one with p's text.
func containsProblem(problems []error, p error) bool {
	for _, q := range problems {
		if q.Error() == p.Error() {
			return true
		}
	}
	return false
}

// decodeProblems rewrites mapstructure's errors as "key: problem" lines,
// with a suggestion for a misspelt key.
func decodeProblems(err error) []error {
	var out []error
	for _, e := range Problems(err) {
		var de *mapstructure.DecodeError
		if !errors.As(e, &de) {
			out = append(out, e)
			continue
		}
		name := de.Name()
		if name == rootTypeName {
			name = "" // mapstructure ≥ 2.5 names the root by its type
		}
		if t, ok := strings.CutPrefix(name, "tenants.weights["); ok && strings.HasSuffix(t, "]") {
			name = tenantPath(strings.TrimSuffix(t, "]")) // as Validate names it
		}
		if ch, rest, ok := strings.Cut(strings.TrimPrefix(name, "user_limits["), "]"); ok && strings.HasPrefix(name, "user_limits[") {
			name = "user_limits." + ch + rest // a squashed cap is named as a map entry
		}
		inner := de.Unwrap()
		msg := inner.Error()
		if rest, ok := strings.CutPrefix(msg, "has invalid keys: "); ok {
			for _, k := range strings.Split(rest, ", ") {
				full := k
				if name != "" {
					full = name + "." + k
				}
				hint := ""
				if s := suggest(k, knownKeysAt(name)); s != "" {
					hint = fmt.Sprintf(" (did you mean %q?)", s)
				}
				out = append(out, fmt.Errorf("%s: unknown key%s; a misspelt key would silently fall back to its default, so it is refused", full, hint))
			}
			continue
		}
		var inner2 *mapstructure.DecodeError
		if errors.As(inner, &inner2) {
			out = append(out, decodeProblems(inner)...)
			continue
		}
		if name == "" {
			out = append(out, inner)
			continue
		}
		// mapstructure's own type errors: say what the key wants.
		var ute *mapstructure.UnconvertibleTypeError
		if errors.As(inner, &ute) {
			msg = "has the wrong type: " + msg
		}
		out = append(out, fmt.Errorf("%s: %s", name, msg))
	}
	return out
}

var rootTypeName = reflect.TypeOf(Config{}).String()
