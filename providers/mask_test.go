package providers_test

import (
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/notifier/notifier/providers"
)

func TestMask(t *testing.T) {
	t.Parallel()
	cases := []struct{ channel, to, want string }{
		{"sms", "+447911123456", "+4479•••••56"},
		{"sms", "+15551234", "+1•••••34"},
		{"sms", "12345", "1•••••"},
		{"sms", "123", "•••••"},
		{"email", "alice@example.com", "a•••@example.com"},
		{"email", "a@example.com", "•••@example.com"},
		{"email", "no-at-sign", "no-at…"},
		{"email", "@example.com", "@examp…"},
		{"push", "f3aKx9Qz-very-long-device-token", "f3aKx9…"},
		{"push", "abcdef", "abc…"},
		{"push", "abc", "…"},
		{"fax", "whatever-this-is", "whatev…"},
		{"sms", "", ""},
	}
	for _, c := range cases {
		if got := providers.Mask(c.channel, c.to); got != c.want {
			t.Errorf("Mask(%q, %q) = %q, want %q", c.channel, c.to, got, c.want)
		}
	}
}

// TestMaskNeverRevealsTheInput: for any channel and any input (that does not
// itself contain the mask characters), the output neither equals nor
// contains the input.
func TestMaskNeverRevealsTheInput(t *testing.T) {
	t.Parallel()
	channel := rapid.SampledFrom([]string{"sms", "email", "push", "", "other"})
	rapid.Check(t, func(t *rapid.T) {
		ch := channel.Draw(t, "channel")
		to := rapid.OneOf(
			rapid.String(),
			rapid.StringMatching(`\+[1-9][0-9]{6,14}`),
			rapid.StringMatching(`[a-z0-9._+-]{0,20}@[a-z0-9.-]{0,20}`),
			rapid.StringMatching(`[A-Za-z0-9_:-]{1,200}`),
		).Filter(func(s string) bool { return s != "" && !strings.ContainsAny(s, "•…") }).Draw(t, "to")
		out := providers.Mask(ch, to)
		if out == to || strings.Contains(out, to) {
			t.Fatalf("Mask(%q, %q) = %q reveals the input", ch, to, out)
		}
		// The local part must not show before the @ (the domain is shown
		// whole, and may well contain the same letters: "t0@t0").
		if at := strings.LastIndexByte(to, '@'); ch == "email" && at >= 2 && strings.Contains(out[:max(0, strings.LastIndexByte(out, '@'))], to[:at]) {
			t.Fatalf("Mask(%q, %q) = %q reveals the local part", ch, to, out)
		}
		if r := []rune(to); ch == "sms" && len(r) >= 8 && strings.Contains(out, string(r[len(r)-5:])) {
			t.Fatalf("Mask(%q, %q) = %q reveals the last five characters", ch, to, out)
		}
	})
}
