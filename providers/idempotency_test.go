package providers_test

import (
	"testing"

	"github.com/notifier/notifier/providers"
)

// TestIdempotencyKey: the header is a structured-field String (RFC 8941
// §3.3.3), as draft-ietf-httpapi-idempotency-key-header §2.1 defines it: the
// id quoted, '"' and '\' escaped; an id a String cannot carry goes as its
// stable UUID, quoted.
func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]string{
		"job-42":                               `"job-42"`,
		"a.b:c_d-9":                            `"a.b:c_d-9"`,
		`say "hi" \ bye`:                       `"say \"hi\" \\ bye"`,
		"x\x00":                                `"` + providers.APNsID("x\x00") + `"`,
		"ünïcode":                              `"` + providers.APNsID("ünïcode") + `"`,
		"f47ac10b-58cc-4372-a567-0e02b2c3d479": `"f47ac10b-58cc-4372-a567-0e02b2c3d479"`,
	} {
		if got := providers.IdempotencyKey(id); got != want {
			t.Errorf("IdempotencyKey(%q) = %s, want %s", id, got, want)
		}
	}
}
