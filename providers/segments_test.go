package providers_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/notifier/notifier/providers"
)

func TestSegments(t *testing.T) {
	t.Parallel()
	r := strings.Repeat
	cases := []struct {
		name string
		body string
		want int
	}{
		{"empty", "", 1},
		{"short", "hello", 1},
		{"160 GSM", r("a", 160), 1},
		{"161 GSM", r("a", 161), 2},
		{"306 GSM", r("a", 306), 2},
		{"307 GSM", r("a", 307), 3},
		{"GSM specials", "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./:;<=>?¡ÄÖÑÜ§¿äöñüà", 1},
		{"80 euro signs are 160 septets", r("€", 80), 1},
		{"81 euro signs are 162 septets", r("€", 81), 2},
		{"every escape counts twice", r("[]{}^~\\|\f€", 8), 1}, // 160 septets
		{"one escape too many", r("[]{}^~\\|\f€", 8) + "a", 2}, // 161 septets
		{"159 GSM and one escape", r("a", 159) + "€", 2},
		{"an escape is not split across parts", r("a", 152) + "€" + r("a", 152), 3}, // 306 septets, but 152 | 2+151 | 1
		{"70 UCS-2", r("ж", 70), 1},
		{"71 UCS-2", r("ж", 71), 2},
		{"134 UCS-2", r("ж", 134), 2},
		{"135 UCS-2", r("ж", 135), 3},
		{"one non-GSM char turns it all UCS-2", r("a", 69) + "ж", 1},
		{"160 GSM and one non-GSM char", r("a", 160) + "ж", 3}, // 161 UCS-2 units
		{"lowercase c cedilla is not GSM", r("a", 70) + "ç", 2},
		{"backtick is not GSM", r("a", 70) + "`", 2},
		{"emoji is two units", "🎉", 1},
		{"35 emoji are 70 units", r("🎉", 35), 1},
		{"36 emoji are 72 units", r("🎉", 36), 2},
		{"a surrogate pair is not split", r("ж", 66) + "🎉" + r("ж", 3), 2},
		{"surrogate pairs fill parts of 66", r("🎉", 67), 3}, // 33 + 33 + 1 pairs
		{"mixed scripts", "Привет, world! 你好 👋", 1},
		{"invalid UTF-8 is UCS-2", r("a", 70) + "\xff", 2},
	}
	for _, c := range cases {
		if got := providers.Segments(c.body); got != c.want {
			t.Errorf("%s: Segments = %d, want %d", c.name, got, c.want)
		}
	}
}

func FuzzSegments(f *testing.F) {
	for _, seed := range []string{"", "hello", strings.Repeat("a", 161), strings.Repeat("€", 81), "ж🎉",
		"\xff\xfe", strings.Repeat("a", 152) + "€" + strings.Repeat("a", 152), strings.Repeat("🎉", 36)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		n := providers.Segments(body)
		if n < 1 {
			t.Fatalf("Segments(%q) = %d, want >= 1", body, n)
		}
		// Every part but the last is at least 66 units full (67 minus a
		// surrogate pair that moved on), and a unit is at most 4 bytes... so
		// a loose but real upper bound from the character count:
		if chars := utf8.RuneCountInString(body); n > 1 && n > chars/66+2 {
			t.Fatalf("Segments(%q) = %d for %d characters", body, n, chars)
		}
		// Appending a character never makes a message cheaper, whatever it
		// does to the encoding.
		for _, more := range []string{"a", "€", "ж", "🎉"} {
			if m := providers.Segments(body + more); m < n {
				t.Fatalf("Segments(%q) = %d but Segments(+%q) = %d", body, n, more, m)
			}
		}
	})
}
