package queue

import (
	"regexp"
	"testing"

	"pgregory.net/rapid"
)

// The rules as SPEC §2 writes them: the byte-class checks must agree with
// them on every string.
var (
	idRule     = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)
	e164Rule   = regexp.MustCompile(`^\+[1-9][0-9]{6,14}$`)
	deviceRule = regexp.MustCompile(`^[A-Za-z0-9._:=+/~\[\]-]+$`)
)

// TestCharsetsMatchTheRules: idChars, deviceChars and isE164 answer as the
// regular expressions of SPEC §2 on random strings made mostly of the
// bytes at the classes' edges (and of multi-byte, invalid UTF-8 and
// control bytes), and on every single byte.
func TestCharsetsMatchTheRules(t *testing.T) {
	t.Parallel()
	check := func(t interface{ Fatalf(string, ...any) }, s string) {
		if got, want := idChars.holds(s), idRule.MatchString(s); got != want {
			t.Fatalf("idChars.holds(%q) = %v, the rule says %v", s, got, want)
		}
		if got, want := deviceChars.holds(s), deviceRule.MatchString(s); got != want {
			t.Fatalf("deviceChars.holds(%q) = %v, the rule says %v", s, got, want)
		}
		if got, want := isE164(s), e164Rule.MatchString(s); got != want {
			t.Fatalf("isE164(%q) = %v, the rule says %v", s, got, want)
		}
	}
	for b := 0; b < 256; b++ {
		check(t, string([]byte{byte(b)}))
		check(t, "+1234567"+string([]byte{byte(b)}))
	}
	check(t, "")
	edges := []byte("+-./09:;=@AZ[\\]^_`az{|}~ \x00\x7f\x80\xff\n")
	rapid.Check(t, func(t *rapid.T) {
		var s []byte
		if rapid.Bool().Draw(t, "phone") {
			s = append(s, '+')
			s = append(s, rapid.SliceOfN(rapid.ByteRange('0', '9'), 0, 18).Draw(t, "digits")...)
		}
		s = append(s, rapid.SliceOfN(rapid.SampledFrom(edges), 0, 4).Draw(t, "edge")...)
		if rapid.Bool().Draw(t, "utf8") {
			s = append(s, rapid.String().Draw(t, "text")...)
		}
		check(t, string(s))
	})
}

// BenchmarkValidID is the id check of every decoded job.
func BenchmarkValidID(b *testing.B) {
	id := "order-2026-12-07.confirmation:0123456789"
	for b.Loop() {
		if !ValidID(id) {
			b.Fatal("refused")
		}
	}
}
