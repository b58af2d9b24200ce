package providers

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/notifier/notifier/internal/text"
)

// maxReason is the most runes of a provider's own reason kept in a detail.
const maxReason = 160

// Patterns of what a provider's error text may quote of a recipient, in
// whatever form: any e-mail address (any case), and any phone-like run — a
// run of digits with the spaces, dots, dashes and parentheses people write
// numbers with (any Unicode dash among them), 7 or more digits in all
// (which catches other long numbers too, a date among them: harmless).
// scrub matches them on the text with its spaces made plain: a no-break
// space or a tab between a number's groups would otherwise hide it.
var (
	emailLike = regexp.MustCompile(`[A-Za-z0-9._%+'-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}`)
	phoneLike = regexp.MustCompile(`\+?[0-9][0-9 ().\p{Pd}]*[0-9]`)
)

// quoteMin is the shortest stretch of a message's body or title that is
// scrubbed when a provider quotes it: long enough that a provider's own
// words ("Invalid parameter") do not match by chance.
const quoteMin = 12

// reasonFields are the JSON fields that commonly carry an API error's reason,
// in the order they are preferred.
var reasonFields = []string{"reason", "error_description", "message", "error", "errors", "detail", "title", "code", "status"}

// responseReason extracts the provider's own reason from the start of an
// error response body: a reason field of a JSON object, or else the first
// non-empty line of a text body. Binary bodies give "".
func responseReason(body []byte) string {
	body = trimPartialRune(body)
	if len(body) == 0 || !utf8.Valid(body) {
		return ""
	}
	var obj map[string]any
	if json.Unmarshal(body, &obj) == nil {
		return jsonReason(obj, 0)
	}
	text := string(body)
	if strings.ContainsRune(text, 0) {
		return ""
	}
	for _, line := range strings.Split(text, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return ""
}

// trimPartialRune drops a rune cut off by the read limit at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(b) > 0; i++ {
		if r, size := utf8.DecodeLastRune(b); r != utf8.RuneError || size > 1 {
			return b
		}
		b = b[:len(b)-1]
	}
	return b
}

func jsonReason(obj map[string]any, depth int) string {
	for _, f := range reasonFields {
		switch v := obj[f].(type) {
		case string:
			if strings.TrimSpace(v) != "" {
				return v
			}
		case float64:
			return f + " " + strconv.FormatFloat(v, 'f', -1, 64)
		case map[string]any:
			if depth < 2 {
				if r := jsonReason(v, depth+1); r != "" {
					return r
				}
			}
		case []any: // {"errors": [{"message": …}]} (SendGrid and others): the first
			if first, ok := firstObject(v); ok && depth < 2 {
				if r := jsonReason(first, depth+1); r != "" {
					return r
				}
			}
		}
	}
	return ""
}

// firstObject is the first element of a JSON array, when it is an object.
func firstObject(v []any) (map[string]any, bool) {
	if len(v) == 0 {
		return nil, false
	}
	m, ok := v[0].(map[string]any)
	return m, ok
}

// scrubber removes what must never reach a log line or an error detail from
// text a provider sent back: the recipient (replaced by its mask), the body
// and title, and secrets.
type scrubber struct {
	channel string
	to      string
	hide    []string
	secrets []string
}

func newScrubber(m *Message, secrets ...string) scrubber {
	s := scrubber{secrets: secrets}
	if m != nil {
		s.channel, s.to = m.Channel, m.To
		s.hide = []string{m.Body, m.Title}
	}
	return s
}

// scrub removes, structurally rather than by exact match:
//   - the secrets;
//   - the body and the title, and any stretch of either of quoteMin
//     characters or more that the text quotes ("[text]");
//   - the recipient: a device token where it appears, replaced by its
//     mask; any e-mail address at all, in any case ("[address]"); any
//     phone-like run of 7 or more digits in any formatting ("•••").
//
// What the provider says of its own (an error code, a reason) is kept.
func (s scrubber) scrub(text string) string {
	for _, secret := range s.secrets {
		if len(secret) >= 4 {
			text = strings.ReplaceAll(text, secret, "[secret]")
		}
	}
	for _, h := range s.hide {
		if len(h) >= 4 {
			text = strings.ReplaceAll(text, h, "[text]")
		}
	}
	for _, h := range s.hide {
		text = scrubQuotes(text, h)
	}
	// The patterns below see plain spaces (a no-break space, a tab, a line
	// break each become one) and no invisible characters, as the detail's
	// reader does once OneLine has made it one line: a number quoted with
	// other spaces, or zero-width ones, between its groups must not slip
	// past them.
	text = strings.Join(strings.FieldsFunc(strings.Map(dropFormat, text), isSpace), " ")
	if len(s.to) >= 3 {
		// In any case: a provider may quote the recipient in another case
		// than the job's (a hex device token upper- or lower-cased), and a
		// token has no shape of its own for the patterns below to catch.
		masked := Mask(s.channel, s.to)
		text = replaceFold(text, s.to, masked)
		if bare := strings.TrimPrefix(s.to, "+"); bare != s.to && len(bare) >= 3 {
			text = replaceFold(text, bare, masked)
		}
	}
	text = emailLike.ReplaceAllString(text, "[address]")
	return phoneLike.ReplaceAllStringFunc(text, func(run string) string {
		digits := 0
		for i := 0; i < len(run); i++ {
			if run[i] >= '0' && run[i] <= '9' {
				digits++
			}
		}
		if digits < 7 {
			return run
		}
		return "•••"
	})
}

// replaceFold replaces every instance of old in text, matched under
// Unicode case folding, by repl.
func replaceFold(text, old, repl string) string {
	re, err := regexp.Compile("(?i)" + regexp.QuoteMeta(old))
	if err != nil { // a literal too large for the regexp package
		return strings.ReplaceAll(text, old, repl)
	}
	return re.ReplaceAllLiteralString(text, repl)
}

// scrubQuotes replaces every stretch of text that is also a stretch of
// quote, quoteMin runes or longer and compared case-insensitively, by
// "[text]".
func scrubQuotes(text, quote string) string {
	q := []rune(strings.ToLower(quote))
	t := []rune(text)
	lt := []rune(strings.ToLower(text))
	if len(q) < quoteMin || len(lt) < quoteMin || len(lt) != len(t) {
		return text
	}
	windows := make(map[string]struct{}, len(q)-quoteMin+1)
	for i := 0; i+quoteMin <= len(q); i++ {
		windows[string(q[i:i+quoteMin])] = struct{}{}
	}
	hit := make([]bool, len(t))
	found := false
	for i := 0; i+quoteMin <= len(lt); i++ {
		if _, ok := windows[string(lt[i:i+quoteMin])]; ok {
			for j := i; j < i+quoteMin; j++ {
				hit[j] = true
			}
			found = true
		}
	}
	if !found {
		return text
	}
	var b strings.Builder
	for i := 0; i < len(t); i++ {
		if !hit[i] {
			b.WriteRune(t[i])
			continue
		}
		if i == 0 || !hit[i-1] {
			b.WriteString("[text]")
		}
	}
	return b.String()
}

// reasonDetail is the detail of a non-2xx answer: "HTTP 400 Bad Request" and
// the provider's reason, scrubbed and cut to one line, if it gave one.
func reasonDetail(status int, reason string, s scrubber) string {
	d := "HTTP " + strconv.Itoa(status)
	if text := http.StatusText(status); text != "" {
		d += " " + text
	}
	if reason := text.OneLine(s.scrub(reason), maxReason); reason != "" {
		d += ": " + reason
	}
	return d
}

// causeDetail is a one-line description of a transport error, scrubbed.
func causeDetail(err error, s scrubber) string {
	return text.OneLine(s.scrub(fmt.Sprint(err)), 2*maxReason)
}

// isSpace is what scrub takes for a space: Unicode's, and the controls
// text.Printable turns into one.
func isSpace(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }

// dropFormat removes the invisible format characters (a zero-width space
// or joiner, a direction mark: Unicode's Cf) that could sit between a
// number's digits unseen.
func dropFormat(r rune) rune {
	if unicode.Is(unicode.Cf, r) {
		return -1
	}
	return r
}
