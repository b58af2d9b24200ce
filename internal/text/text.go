// Package text is the one place text from outside (a provider's answer,
// a job's field, an error) is made safe to print on one line, the one
// place the terminal commands cut text to a width, and the one way a
// duration is printed as a configuration writes it.
package text

import (
	"strings"
	"time"
	"unicode/utf8"
)

// Duration prints d the way it is written in YAML: 24h, 10m, 1m30s,
// 8784h (a range's bound in a configuration error, `notifier status`).
func Duration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Ellipsis marks a cut.
const Ellipsis = "…"

// Printable makes s safe for a log line, a header or a terminal: control
// characters (CR and LF among them, and the Unicode line and paragraph
// separators) become spaces, and invalid UTF-8 becomes U+FFFD.
func Printable(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r >= 0x7f && r < 0xa0 || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, s)
}

// OneLine is s Printable, trimmed, its runs of spaces collapsed to one,
// and capped at limit bytes on a rune boundary, the cut marked with
// Ellipsis (which counts toward limit).
func OneLine(s string, limit int) string {
	s = strings.Join(strings.Fields(Printable(s)), " ")
	if len(s) <= limit {
		return s
	}
	cut := max(0, limit-len(Ellipsis))
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + Ellipsis
}

// Columns is how many terminal columns s takes: one a rune (what the
// commands print is Latin text, digits and a few one-column symbols).
func Columns(s string) int { return utf8.RuneCountInString(s) }

// Fit is s cut to width columns, an Ellipsis marking the cut.
func Fit(s string, width int) string {
	if Columns(s) <= width {
		return s
	}
	if width <= 0 {
		return ""
	}
	r := []rune(s)
	return strings.TrimRight(string(r[:width-1]), " ") + Ellipsis
}

// FirstFitting is the first of the candidates (most to least detailed) no
// wider than width, or the last one cut to width.
func FirstFitting(width int, candidates ...string) string {
	for _, c := range candidates {
		if Columns(c) <= width {
			return c
		}
	}
	return Fit(candidates[len(candidates)-1], width)
}

// SplitList splits a comma-separated list (of server URLs, addresses),
// trimming each entry and dropping empty ones.
func SplitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}
