package providers

import (
	"bytes"
	"mime/quotedprintable"
	"net/mail"
	"strings"
	"time"
	"unicode/utf8"
)

// compose writes m as an RFC 5322 message with CRLF line endings.
func (p *SMTP) compose(m *Message, rcpt *mail.Address) []byte {
	var b bytes.Buffer
	header := func(name, value string) {
		b.WriteString(name)
		b.WriteString(": ")
		b.WriteString(value)
		b.WriteString("\r\n")
	}
	header("From", p.from.String())
	header("To", rcpt.String())
	if m.Title != "" {
		header("Subject", encodeSubject(m.Title))
	}
	header("Date", p.now().Format(time.RFC1123Z))
	header("Message-ID", SMTPMessageID(m.key(), p.domain))
	header("MIME-Version", "1.0")
	header("Content-Type", "text/plain; charset=UTF-8")
	header("Content-Transfer-Encoding", "quoted-printable")
	header("Auto-Submitted", "auto-generated")
	b.WriteString("\r\n")
	qp := quotedprintable.NewWriter(&b)
	_, _ = qp.Write([]byte(m.Body)) // a bytes.Buffer does not fail
	_ = qp.Close()
	if !bytes.HasSuffix(b.Bytes(), []byte("\r\n")) {
		b.WriteString("\r\n")
	}
	return b.Bytes()
}

// SMTPMessageID is the Message-ID header of the mail of the job with id,
// sent from an address at domain: "<id@domain>", where every character of
// the id other than A-Z a-z 0-9 - _ is written =XX (its hex byte), so the
// id-left is always a valid dot-atom: "job:42.a" gives
// "<job=3A42=2Ea@example.com>". A retry carries the same Message-ID, which
// lets receiving systems discard a duplicate.
func SMTPMessageID(id, domain string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	b.WriteByte('<')
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_':
			b.WriteByte(c)
		default:
			b.WriteByte('=')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		}
	}
	if id == "" {
		b.WriteString("empty")
	}
	b.WriteByte('@')
	b.WriteString(domain)
	b.WriteByte('>')
	return b.String()
}

// plainSubjectMax is the longest subject sent as is: with "Subject: " it
// fits the 78-character line RFC 5322 recommends.
const plainSubjectMax = 78 - len("Subject: ")

// encodeSubject returns a Subject header value: the subject itself when it
// is short printable ASCII that cannot be mistaken for an encoded-word,
// else RFC 2047 Q encoded-words of at most 75 characters, folded one per
// line so no line exceeds 76 characters (the first shares its line with
// "Subject: "). A character's UTF-8 bytes never straddle two words. Line breaks in
// the title are encoded, so they cannot inject a header.
func encodeSubject(subject string) string {
	plain := len(subject) <= plainSubjectMax && !strings.Contains(subject, "=?")
	for i := 0; plain && i < len(subject); i++ {
		plain = subject[i] >= 0x20 && subject[i] <= 0x7e
	}
	if plain {
		return subject
	}
	const (
		prefix = "=?UTF-8?q?"
		suffix = "?="
		room   = 75 - len(prefix) - len(suffix)
	)
	var words []string
	var w strings.Builder
	var enc []byte
	for _, r := range subject {
		if r == utf8.RuneError {
			r = '\uFFFD'
		}
		enc = enc[:0]
		var buf [utf8.UTFMax]byte
		for _, c := range buf[:utf8.EncodeRune(buf[:], r)] {
			switch {
			case c == ' ':
				enc = append(enc, '_')
			case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', strings.IndexByte("!*+-/", c) >= 0:
				enc = append(enc, c)
			default:
				enc = append(enc, '=', "0123456789ABCDEF"[c>>4], "0123456789ABCDEF"[c&15])
			}
		}
		limit := room
		if len(words) == 0 {
			limit -= len("Subject: ")
		}
		if w.Len()+len(enc) > limit {
			words = append(words, prefix+w.String()+suffix)
			w.Reset()
		}
		w.Write(enc)
	}
	if w.Len() > 0 {
		words = append(words, prefix+w.String()+suffix)
	}
	return strings.Join(words, "\r\n ")
}
