package providers

// SMS segment limits (3GPP TS 23.040 with a user data header for
// concatenation): a single message carries 160 GSM-7 septets or 70 UCS-2
// units; each part of a concatenated message carries 153 or 67.
const (
	gsmSingle  = 160
	gsmPart    = 153
	ucs2Single = 70
	ucs2Part   = 67
)

// gsmChars is the GSM 03.38 default alphabet: one septet each.
const gsmChars = "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?" +
	"¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"

// gsmASCII and gsmOther index gsmChars for isGSMBasic: a table for ASCII, a
// map for the rest.
var gsmASCII, gsmOther = func() ([128]bool, map[rune]bool) {
	var ascii [128]bool
	other := map[rune]bool{}
	for _, r := range gsmChars {
		if r < 128 {
			ascii[r] = true
		} else {
			other[r] = true
		}
	}
	return ascii, other
}()

func isGSMBasic(r rune) bool {
	if r >= 0 && r < 128 {
		return gsmASCII[r]
	}
	return gsmOther[r]
}

// isGSMExtension reports the characters of the GSM 03.38 extension table
// that are sent as ESC + character: two septets each.
func isGSMExtension(r rune) bool {
	switch r {
	case '\f', '^', '{', '}', '\\', '[', '~', ']', '|', '€':
		return true
	}
	return false
}

// Segments returns how many SMS segments body takes, as an SMS gateway
// prices it.
//
// A body made only of GSM-7 characters is encoded in septets: one segment
// holds 160, each part of a longer message 153; the extension characters
// € [ ] { } ^ ~ \ | and form feed take two septets (escape + character). A
// body with any other character is sent as UCS-2: one segment holds 70 UTF-16
// units, each part 67, and a character outside the Basic Multilingual Plane
// (most emoji) takes two units. Parts are filled greedily and a character's
// units are never split across two parts, as handsets and gateways do, so a
// long message can take one part more than its unit count divided by the
// part size. Invalid UTF-8 bytes count as U+FFFD (UCS-2).
//
// An empty body takes 1 segment: an SMS is sent either way.
func Segments(body string) int {
	gsm := true
	for _, r := range body {
		if !isGSMBasic(r) && !isGSMExtension(r) {
			gsm = false
			break
		}
	}
	single, part := ucs2Single, ucs2Part
	if gsm {
		single, part = gsmSingle, gsmPart
	}
	size := func(r rune) int {
		switch {
		case gsm && isGSMExtension(r):
			return 2
		case !gsm && r > 0xFFFF:
			return 2
		}
		return 1
	}

	total := 0
	for _, r := range body {
		total += size(r)
	}
	if total <= single {
		return 1
	}
	segments, used := 1, 0
	for _, r := range body {
		n := size(r)
		if used+n > part {
			segments++
			used = 0
		}
		used += n
	}
	return segments
}
