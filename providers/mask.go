package providers

import "strings"

// Mask returns a form of a recipient address that is safe to log, put in an
// error detail or show on a dashboard: enough to tell recipients apart while
// debugging, never the whole address.
//
//	sms   "+447911123456"          → "+4479•••••56"
//	email "alice@example.com"      → "a•••@example.com"
//	push  "f3aKx9...(a long token)" → "f3aKx9…"
//
// The number of bullets is fixed, so the length is not revealed. Short
// inputs reveal less (at most half their characters, none below four), an
// email address whose local part is a single character shows only the
// domain, and an unknown channel masks like a token. Mask("", "") is "".
func Mask(channel, to string) string {
	if to == "" {
		return ""
	}
	r := []rune(to)
	switch channel {
	case "sms":
		switch n := len(r); {
		case n >= 11:
			return string(r[:5]) + "•••••" + string(r[n-2:])
		case n >= 7:
			return string(r[:2]) + "•••••" + string(r[n-2:])
		case n >= 4:
			return string(r[:1]) + "•••••"
		}
		return "•••••"
	case "email":
		at := strings.LastIndexByte(to, '@')
		if at > 0 && at < len(to)-1 {
			local, domain := []rune(to[:at]), to[at+1:]
			if len(local) == 1 {
				return "•••@" + domain
			}
			return string(local[:1]) + "•••@" + domain
		}
	}
	// push tokens, malformed email addresses and unknown channels.
	head := len(r) / 2
	if head > 6 {
		head = 6
	}
	if len(r) < 4 {
		head = 0
	}
	return string(r[:head]) + "…"
}
