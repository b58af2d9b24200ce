package config

import (
	"reflect"
	"strings"
	"time"

	"github.com/notifier/notifier/queue"
)

// envKeys lists every key path an environment variable may override: the
// scalar and list keys of every section, and those of user_limits.<channel>
// for each channel. Entries of the providers list and tenants.weights are
// set in the file; the providers' secrets come from the variables their
// *_env keys name.
func envKeys() []string {
	var keys []string
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag, squash := keyOf(f)
			if squash {
				walk(prefix, f.Type) // its keys are the section's own
				continue
			}
			if tag == "" || tag == "-" || !f.IsExported() {
				continue
			}
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			switch {
			case ft.Kind() == reflect.Struct && ft != reflect.TypeOf(time.Time{}):
				walk(prefix+tag+".", ft)
			case prefix+tag == "gateway.tenants":
				// keyed by tenant names, file only (as tenants.weights)
			case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
				for _, ch := range queue.Channels {
					walk(prefix+tag+"."+ch+".", ft.Elem())
				}
			case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
				// list of sections (providers): file only
			case ft.Kind() == reflect.Map:
				// a mapping of names chosen in the file (tenants.weights):
				// file only, as a variable's name cannot spell them
				// (tenant names are case-sensitive and may hold '.' or '-')
			default:
				keys = append(keys, prefix+tag)
			}
		}
	}
	walk("", reflect.TypeOf(Config{}))
	return keys
}

// knownKeysAt returns the keys allowed under a decoded path such as
// "redis.tls", "user_limits.push" or "providers[2]".
func knownKeysAt(path string) []string {
	t := reflect.TypeOf(Config{})
	if path != "" {
		for _, seg := range strings.Split(path, ".") {
			name, _, indexed := strings.Cut(seg, "[")
			for t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
			if t.Kind() == reflect.Map {
				t = t.Elem() // the segment is a map key (a channel)
				continue
			}
			f, ok := fieldByTag(t, name)
			if !ok {
				return nil
			}
			t = f.Type
			for t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
			if indexed && (t.Kind() == reflect.Slice || t.Kind() == reflect.Map) {
				t = t.Elem()
			}
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Map {
		return nil
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	return structKeys(t)
}

// structKeys are the keys of struct t, those of a squashed embedded
// struct (Cap's rule) among them.
func structKeys(t reflect.Type) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		switch tag, squash := keyOf(f); {
		case squash:
			keys = append(keys, structKeys(f.Type)...)
		case tag != "" && tag != "-":
			keys = append(keys, tag)
		}
	}
	return keys
}

func fieldByTag(t reflect.Type, tag string) (reflect.StructField, bool) {
	if t.Kind() != reflect.Struct {
		return reflect.StructField{}, false
	}
	for i := 0; i < t.NumField(); i++ {
		if k, _ := keyOf(t.Field(i)); k == tag {
			return t.Field(i), true
		}
	}
	return reflect.StructField{}, false
}

// suggest returns the known key closest to k when it is close enough to be
// a typo (edit distance at most 2, or a third of the key).
func suggest(k string, known []string) string {
	best, bestD := "", 1<<30
	for _, c := range known {
		if d := editDistance(k, c); d < bestD {
			best, bestD = c, d
		}
	}
	if best != "" && (bestD <= 2 || bestD*3 <= len(k)) {
		return best
	}
	return ""
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// keyOf is the YAML key of struct field f (its mapstructure tag's name:
// "" or "-" for none), and whether f is an embedded struct squashed into
// its parent, whose keys are the parent's own (Cap's rule).
func keyOf(f reflect.StructField) (key string, squash bool) {
	opts := strings.Split(f.Tag.Get("mapstructure"), ",")
	return opts[0], f.Anonymous && len(opts) > 1 && opts[1] == "squash"
}
