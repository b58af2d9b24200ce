package testenv

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"io"
	"log"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
	"github.com/notifier/notifier/internal/localenv"
)

// SMTPMessage is one mail the SMTP fake accepted.
type SMTPMessage struct {
	At        time.Time
	From      string   // MAIL FROM
	To        []string // RCPT TO
	Data      []byte   // the message as received (CRLF line endings)
	Header    mail.Header
	Subject   string // decoded (RFC 2047)
	Body      string // decoded (quoted-printable or base64)
	MessageID string
	User      string // the AUTH PLAIN user
	Conn      int    // the connection it came on: 1 for the first accepted, 2 for the next…
}

// SMTPFake is a mail submission server built on github.com/emersion/go-smtp's
// server: it offers STARTTLS (a certificate signed by the CA in CAFile;
// not offered WithoutSTARTTLS) and,
// only after it, AUTH PLAIN with Username and Password, and checks what a
// submission server checks:
//
//   - MAIL before STARTTLS or before AUTH: 530 5.7.0 (with DenyRelay, MAIL
//     without AUTH is taken and each RCPT refused 554 5.7.1);
//   - a wrong password: 535 5.7.8;
//   - RCPT of something that is not an address: 501 (go-smtp's parser); of
//     an address refused with Reject: its code;
//   - the message: lines of at most 998 characters, a From and a readable
//     Date header, a Message-ID of the form <…@…> when present, a readable
//     Subject and body encoding (554 5.6.0 otherwise).
//
// Then, at the end of DATA: HangFor (the reply never comes; the connection
// is cut when the client gives up or the fake closes), AcceptThenHang (the
// mail is recorded as accepted, then the reply never comes), FailNext and
// FailFor (the given reply code), RateLimitFor and the contract (451
// 4.7.1), then 250 and the mail is recorded. Its methods are safe for
// concurrent use.
//
// Every request that reaches HangFor is an arrival (Arrivals,
// MaxArrivalsInWindow), whatever it is answered; MaxInWindow counts only
// the accepted ones.
type SMTPFake struct {
	*faultState
	srv      *smtp.Server
	ln       net.Listener
	user     string
	pass     string
	caFile   string
	closing  chan struct{}
	once     sync.Once
	served   chan struct{}
	conns    sync.WaitGroup
	accepted int // connections accepted
	open     map[*trackedConn]bool
	rejected map[string]int
	messages []SMTPMessage
	replies  map[int]int // end-of-DATA reply code → count
	relay    bool        // DenyRelay: MAIL without AUTH taken, RCPT refused 5.7.1
}

// WithoutSTARTTLS makes the SMTP fake a server that does not offer
// STARTTLS (nor, so, AUTH, which it offers under TLS only). The other fakes
// ignore it.
func WithoutSTARTTLS() FakeOption {
	return func(f *Fake) { f.noSTARTTLS = true }
}

// FakeSMTP starts an SMTP fake on a loopback port with fresh credentials
// and TLS material, and closes it when the test ends. It takes
// WithContract, WithClock and WithoutSTARTTLS.
func FakeSMTP(t testing.TB, opts ...FakeOption) *SMTPFake {
	t.Helper()
	certs := NewCerts(t)
	pair, err := tls.LoadX509KeyPair(certs.ServerCertFile, certs.ServerKeyFile)
	if err != nil {
		t.Fatalf("testenv: smtp server certificate: %v", err)
	}
	f := &SMTPFake{faultState: newFaultState(t, opts), user: "notifier@example.com", pass: "pw-" + randomHex(12),
		caFile: certs.CAFile, closing: make(chan struct{}), served: make(chan struct{}), rejected: map[string]int{},
		open: map[*trackedConn]bool{}, replies: map[int]int{}}
	f.srv = smtp.NewServer(smtp.BackendFunc(f.newSession))
	f.srv.Domain = "fake-smtp.test"
	if !f.noSTARTTLS {
		f.srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	}
	f.srv.MaxMessageBytes = localenv.MaxProviderBody
	f.srv.MaxRecipients = 50
	f.srv.EnableSMTPUTF8 = true
	f.srv.ReadTimeout, f.srv.WriteTimeout = time.Minute, time.Minute
	f.srv.ErrorLog = log.New(io.Discard, "", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: smtp listen: %v", err)
	}
	f.ln = &countingListener{Listener: ln, f: f}
	go func() {
		defer close(f.served)
		_ = f.srv.Serve(f.ln)
	}()
	t.Cleanup(f.Close)
	return f
}

// Addr is the server's address, 127.0.0.1:<port>.
func (f *SMTPFake) Addr() string { return f.ln.Addr().String() }

// Host is the server's host, 127.0.0.1 (the smtp kind's host).
func (f *SMTPFake) Host() string { return "127.0.0.1" }

// Port is the server's port (the smtp kind's port).
func (f *SMTPFake) Port() int { return f.ln.Addr().(*net.TCPAddr).Port }

// CAFile is the PEM file of the CA that signed the server's certificate
// (the smtp kind's tls_ca_file).
func (f *SMTPFake) CAFile() string { return f.caFile }

// Username is the AUTH PLAIN user the fake accepts.
func (f *SMTPFake) Username() string { return f.user }

// Password is that user's password.
func (f *SMTPFake) Password() string { return f.pass }

// Reject makes RCPT TO:<addr> answer code (550: 5.1.1 mailbox
// unavailable; a 4xx: 4.2.1 try again later).
func (f *SMTPFake) Reject(addr string, code int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rejected[addr] = code
}

// DenyRelay makes the fake a submission server that takes MAIL from a
// client that did not authenticate and then refuses each RCPT with 554
// 5.7.1 "Relay access denied", as Postfix does under
// smtpd_relay_restrictions for an unauthenticated client (RFC 3463 X.7.1:
// "Delivery not authorized, message refused"). An authenticated client is
// unaffected.
func (f *SMTPFake) DenyRelay() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.relay = true
}

// Messages returns the accepted mails in order of acceptance.
func (f *SMTPFake) Messages() []SMTPMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]SMTPMessage(nil), f.messages...)
}

// Count returns how many messages were answered with code at the end of
// DATA: 250 for the accepted ones (AcceptThenHang's among them), 451 for
// those over the contract or RateLimitFor, the injected codes, 554 for
// refused content; 0 counts the messages held by HangFor.
func (f *SMTPFake) Count(code int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.replies[code]
}

// Connections is how many connections the server accepted.
func (f *SMTPFake) Connections() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.accepted
}

// DropConnections cuts every open connection, as a server does to idle
// clients after its timeout; the server keeps accepting new ones.
func (f *SMTPFake) DropConnections() {
	f.mu.Lock()
	var conns []*trackedConn
	for c := range f.open {
		conns = append(conns, c)
	}
	f.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// Close stops the server and cuts every connection, and waits for their
// goroutines. Safe to call more than once.
func (f *SMTPFake) Close() {
	f.once.Do(func() {
		close(f.closing)
		_ = f.srv.Close()
		<-f.served
		f.conns.Wait()
	})
}

// countingListener counts the connections and tracks them until closed.
type countingListener struct {
	net.Listener
	f *SMTPFake
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.f.mu.Lock()
	l.f.accepted++
	n := l.f.accepted
	l.f.mu.Unlock()
	l.f.conns.Add(1)
	tc := &trackedConn{Conn: c, n: n, f: l.f}
	l.f.mu.Lock()
	l.f.open[tc] = true
	l.f.mu.Unlock()
	return tc, nil
}

type trackedConn struct {
	net.Conn
	n    int
	once sync.Once
	f    *SMTPFake
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.f.mu.Lock()
		delete(c.f.open, c)
		c.f.mu.Unlock()
		c.f.conns.Done()
	})
	return err
}

// fakeSMTPSession is one session (a new one after STARTTLS).
type fakeSMTPSession struct {
	f    *SMTPFake
	conn *smtp.Conn
	user string
	from string
	to   []string
}

func (f *SMTPFake) newSession(c *smtp.Conn) (smtp.Session, error) {
	return &fakeSMTPSession{f: f, conn: c}, nil
}

func (s *fakeSMTPSession) AuthMechanisms() []string { return []string{sasl.Plain} }

func (s *fakeSMTPSession) Auth(mech string) (sasl.Server, error) {
	if mech != sasl.Plain {
		return nil, smtp.ErrAuthUnknownMechanism
	}
	return sasl.NewPlainServer(func(identity, username, password string) error {
		if (identity != "" && identity != username) || username != s.f.user || password != s.f.pass {
			return smtp.ErrAuthFailed
		}
		s.user = username
		return nil
	}), nil
}

func (s *fakeSMTPSession) Mail(from string, _ *smtp.MailOptions) error {
	if _, ok := s.conn.TLSConnectionState(); !ok {
		return &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "Must issue a STARTTLS command first"}
	}
	s.f.mu.Lock()
	relay := s.f.relay
	s.f.mu.Unlock()
	if s.user == "" && !relay {
		return &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "Authentication required"}
	}
	s.from = from
	return nil
}

func (s *fakeSMTPSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.f.mu.Lock()
	code, refused := s.f.rejected[to]
	relay := s.f.relay
	s.f.mu.Unlock()
	if relay && s.user == "" {
		return &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "<" + to + ">: Relay access denied"}
	}
	if refused {
		if code/100 == 4 {
			return &smtp.SMTPError{Code: code, EnhancedCode: smtp.EnhancedCode{4, 2, 1}, Message: "Mailbox busy, try again later"}
		}
		return &smtp.SMTPError{Code: code, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "Mailbox " + to + " unavailable"}
	}
	s.to = append(s.to, to)
	return nil
}

// dataError is a 554 5.6.0 content refusal.
func dataError(msg string) error {
	return &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: msg}
}

func (s *fakeSMTPSession) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	f := s.f
	msg, err := checkMail(data)
	if err != nil {
		f.mu.Lock()
		f.replies[554]++
		f.mu.Unlock()
		return err
	}
	f.mu.Lock()
	now := f.now()
	v := f.decide(now)
	switch {
	case v.hold:
		f.replies[0]++
	case v.withhold:
		f.replies[250]++ // accepted, though the 250 is never sent
	case v.limited:
		f.replies[451]++
	case v.status != 0:
		f.replies[v.status]++
	default:
		f.replies[250]++
	}
	if !v.hold && v.status == 0 {
		msg.At, msg.From, msg.To, msg.User = now, s.from, append([]string(nil), s.to...), s.user
		if tc, ok := underlying(s.conn.Conn()).(*trackedConn); ok {
			msg.Conn = tc.n
		}
		f.messages = append(f.messages, msg)
		f.acceptedAt = append(f.acceptedAt, now)
	}
	f.mu.Unlock()

	if v.hold || v.withhold {
		// The client waits for the reply and sends nothing meanwhile: a read
		// returns when it gives up and closes the connection.
		gone := make(chan struct{})
		go func() {
			defer close(gone)
			_, _ = s.conn.Conn().Read(make([]byte, 1))
		}()
		select {
		case <-gone:
		case <-f.closing:
		}
		_ = s.conn.Close() // cut without a reply
		<-gone
		return errors.New("hung up")
	}
	if v.latency > 0 {
		timer := time.NewTimer(v.latency)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-f.closing:
			_ = s.conn.Close()
			return errors.New("closing")
		}
	}
	switch {
	case v.limited:
		text := "Rate limit exceeded (" + v.why + ")"
		if v.retryAfter != "" {
			text += ", try again after " + v.retryAfter
		}
		return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 7, 1}, Message: text}
	case v.status != 0:
		return &smtp.SMTPError{Code: v.status, EnhancedCode: smtp.EnhancedCodeNotSet, Message: v.why}
	}
	return nil
}

// underlying unwraps the TLS connection of a session after STARTTLS.
func underlying(c net.Conn) net.Conn {
	if tc, ok := c.(*tls.Conn); ok {
		return tc.NetConn()
	}
	return c
}

// checkMail checks a message as a submission server would and decodes it.
func checkMail(data []byte) (SMTPMessage, error) {
	var m SMTPMessage
	m.Data = data
	for i, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSuffix(line, []byte("\r"))) > 998 {
			return m, dataError("Line " + strconv.Itoa(i+1) + " is longer than 998 characters")
		}
	}
	parsed, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		return m, dataError("Message headers are malformed: " + err.Error())
	}
	m.Header = parsed.Header
	if parsed.Header.Get("From") == "" || parsed.Header.Get("Date") == "" {
		return m, dataError("A From and a Date header are required (RFC 5322)")
	}
	if _, err := parsed.Header.Date(); err != nil {
		return m, dataError("The Date header is malformed")
	}
	m.MessageID = parsed.Header.Get("Message-ID")
	if id := m.MessageID; id != "" && (!strings.HasPrefix(id, "<") || !strings.HasSuffix(id, ">") || !strings.Contains(id, "@")) {
		return m, dataError("The Message-ID header is malformed")
	}
	dec := new(mime.WordDecoder)
	if m.Subject, err = dec.DecodeHeader(parsed.Header.Get("Subject")); err != nil {
		return m, dataError("The Subject header is malformed")
	}
	body, _ := io.ReadAll(parsed.Body)
	switch strings.ToLower(parsed.Header.Get("Content-Transfer-Encoding")) {
	case "quoted-printable":
		if body, err = io.ReadAll(quotedprintable.NewReader(bytes.NewReader(body))); err != nil {
			return m, dataError("The quoted-printable body is malformed")
		}
	case "base64":
		if body, err = io.ReadAll(base64.NewDecoder(base64.StdEncoding, bytes.NewReader(bytes.ReplaceAll(body, []byte("\r\n"), nil)))); err != nil {
			return m, dataError("The base64 body is malformed")
		}
	}
	m.Body = string(body)
	return m, nil
}

func (s *fakeSMTPSession) Reset() {
	s.from, s.to = "", nil
}

func (s *fakeSMTPSession) Logout() error { return nil }
