package providers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/notifier/notifier/internal/text"
)

// SMTP session pool limits.
const (
	// SMTPMaxIdle is the most idle sessions an smtp provider keeps open.
	SMTPMaxIdle = 16
	// SMTPIdleTimeout is how long an idle session is kept: one idle
	// longer is closed instead of reused (servers drop idle clients after
	// a minute or a few).
	SMTPIdleTimeout = 30 * time.Second
)

// SMTP is the smtp provider (SPEC §7): mail submission with
// github.com/emersion/go-smtp's client. A session connects to host:port,
// upgrades with STARTTLS (required, the server's certificate verified
// against the system roots or tls_ca_file), authenticates with AUTH PLAIN
// when username is set (the password read from password_env), and then
// carries any number of mails: MAIL FROM, RCPT TO, DATA.
//
// Each mail is an RFC 5322 message: From, To, Subject (the title, as RFC
// 2047 encoded-words when it is not short plain ASCII), Date, Message-ID
// (SMTPMessageID of the message's key and the sender's domain, the same on a
// retry), MIME-Version, Content-Type text/plain; charset=UTF-8,
// Content-Transfer-Encoding quoted-printable, Auto-Submitted:
// auto-generated, and the body.
//
// Sessions are reused: after a mail the session goes back to a pool of at
// most SMTPMaxIdle idle sessions (newest first; one idle for more than
// SMTPIdleTimeout is closed), so a busy channel does not open a TCP and TLS
// session per mail. After a refused transaction the session is reset with
// RSET. A pooled session the server has meanwhile closed fails on its first
// command; that mail is then sent on a new session (nothing was
// transmitted). Close quits the idle sessions.
//
// Answers: a 4xx reply at any step is ErrTransient, a 5xx reply
// ErrPermanent, the reply (code, enhanced code, first line of text) in the
// detail and the code in Error.Status; a 5xx with the enhanced code 5.1.1
// (no such mailbox) at RCPT or after DATA has RecipientGone. A 5xx reply
// refusing the sender rather than the mail is ErrSender: any at the
// greeting, EHLO or STARTTLS (554 no service for this client), at AUTH (535
// bad credentials, 534 mechanism too weak), at MAIL FROM a 530
// (authentication required) or an enhanced code 5.7.x (not authorized),
// 5.1.7 or 5.1.8 (bad sender address), and at RCPT an enhanced code 5.7.1
// when the session did not authenticate (relaying refused: the server
// wants AUTH, or is the wrong one; after AUTH a 5.7.1 at RCPT refuses that
// recipient by policy, ErrPermanent). So is a
// server that does not offer STARTTLS or whose certificate does not verify:
// the configuration, not the mail. Timeouts, connection errors, malformed
// replies and other TLS failures are ErrTransient, and Ambiguous when they
// came after the final dot of DATA was sent (the server may have taken the
// mail before the reply was lost). A recipient that is not an email address is
// ErrPermanent without connecting, and so is a non-ASCII address when the
// server does not offer SMTPUTF8.
//
// An SMTP is safe for concurrent use: each Send has a session to itself.
type SMTP struct {
	name      string
	addr      string
	timeout   time.Duration
	from      *mail.Address
	domain    string // of the sender, for Message-IDs
	username  string
	password  *credential // nil without username
	tls       *tls.Config
	localName string
	now       func() time.Time
	dialer    net.Dialer

	mu     sync.Mutex
	idle   []*smtpSession // oldest first
	closed bool
}

var _ Provider = (*SMTP)(nil)

// smtpSession is one connection to the server, authenticated and idle
// between mails.
type smtpSession struct {
	c        *smtp.Client
	conn     *watchConn // the TCP connection under TLS
	lastUsed time.Time
	utf8     bool // the server offers SMTPUTF8
}

// watchConn is a session's TCP connection, counting what was written to
// it: enough to tell whether the end of a mail's DATA went out whole before
// the reply was lost. Safe for concurrent use.
type watchConn struct {
	net.Conn
	written atomic.Int64 // bytes written without error
	failed  atomic.Bool  // a write failed since the last mark
	unread  atomic.Int64 // bytes read since the client last wrote
}

// maxReplyBytes bounds what the server may send between two writes of the
// client: a reply (RFC 5321 §4.5.3.1.5: 512 octets a line; go-smtp bounds
// a line, not how many there are) or a TLS handshake's flight. A server
// sending more, an endless multi-line greeting say, would otherwise have
// the send buffer it all until the timeout: hundreds of MiB.
const maxReplyBytes = 1 << 20

var errReplyTooLong = errors.New("the server sent over 1 MiB without a request")

func (c *watchConn) Read(b []byte) (int, error) {
	if c.unread.Load() >= maxReplyBytes {
		return 0, errReplyTooLong
	}
	n, err := c.Conn.Read(b)
	c.unread.Add(int64(n))
	return n, err
}

func (c *watchConn) Write(b []byte) (int, error) {
	c.unread.Store(0)
	n, err := c.Conn.Write(b)
	c.written.Add(int64(n))
	if err != nil {
		c.failed.Store(true)
	}
	return n, err
}

// mark starts watching: it forgets earlier write errors and returns the
// bytes written so far.
func (c *watchConn) mark() int64 {
	c.failed.Store(false)
	return c.written.Load()
}

// wroteSince reports whether bytes were written since the mark that
// returned at, all without error.
func (c *watchConn) wroteSince(at int64) bool {
	return !c.failed.Load() && c.written.Load() > at
}

// smtpKind is the smtp entry of kinds.
var smtpKind = kind{
	name:     "smtp",
	channel:  "email",
	keys:     []string{"tls_ca_file", "from", "host", "port", "username", "password_env"},
	defaults: smtpDefaults,
	validate: validateSMTP,
	build:    builder(newSMTP),
}

// defaultSMTPPort is the default port of kind smtp: submission.
const defaultSMTPPort = 587

// smtpDefaults fills in an smtp entry's port.
func smtpDefaults(c *Config) {
	if c.Port == 0 {
		c.Port = defaultSMTPPort
	}
}

// validateSMTP checks an smtp entry's own keys.
func validateSMTP(c Config, p *problems) {
	p.required("host", c.Host)
	if c.Port < 1 || c.Port > 65535 {
		p.add("port", "must be between 1 and 65535, got %d", c.Port)
	}
	if c.From == "" {
		p.add("from", "required for kind smtp")
	} else if _, err := mail.ParseAddress(c.From); err != nil {
		p.add("from", "must be an email address, got %q", c.From)
	}
	if c.Username != "" && c.PasswordEnv == "" {
		p.add("password_env", "required for kind smtp when username is set")
	}
}

// NewSMTP builds an smtp provider from a kind smtp entry, reading the
// password from password_env through opts.Getenv when username is set.
// It connects to nothing until the first Send.
func NewSMTP(cfg Config, opts Options) (*SMTP, error) {
	return newChecked(cfg, opts, "smtp", "smtp", newSMTP)
}

// newSMTP is NewSMTP for an entry already checked (kind smtp,
// defaults applied, valid): NewRegistry checks every entry first.
func newSMTP(cfg Config, opts Options) (*SMTP, error) {
	opts = opts.withDefaults()
	from, err := mail.ParseAddress(cfg.From)
	if err != nil {
		return nil, fmt.Errorf("new smtp %s: from: %w", cfg.Name, err)
	}
	tlsConfig, err := clientTLS(cfg.TLSCAFile)
	if err != nil {
		return nil, fmt.Errorf("new smtp %s: %w", cfg.Name, err)
	}
	if tlsConfig == nil {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	tlsConfig.ServerName = cfg.Host
	p := &SMTP{
		name:      cfg.Name,
		addr:      net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)),
		timeout:   cfg.Timeout,
		from:      from,
		domain:    from.Address[strings.LastIndexByte(from.Address, '@')+1:],
		username:  cfg.Username,
		tls:       tlsConfig,
		localName: "localhost",
		now:       opts.Now,
		dialer:    net.Dialer{KeepAlive: 30 * time.Second},
	}
	if h, err := os.Hostname(); err == nil && h != "" && !strings.ContainsAny(h, " \r\n") {
		p.localName = h
	}
	if cfg.Username != "" {
		password, err := lookupSecret(opts, cfg.PasswordEnv)
		if err != nil {
			return nil, fmt.Errorf("new smtp %s: password_env: %w", cfg.Name, err)
		}
		p.password = &credential{password}
	}
	return p, nil
}

// Name returns the configured name.
func (p *SMTP) Name() string { return p.name }

// String describes the provider without its secret.
func (p *SMTP) String() string { return "smtp " + p.name }

// Close quits and closes the idle sessions; sessions in use are closed when
// their Send ends. Send still works after Close, without keeping sessions.
func (p *SMTP) Close() error {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, s := range idle {
		s.quit()
	}
	return nil
}

// scrubber hides the password, in clear and inside AUTH PLAIN's base64.
func (p *SMTP) scrubber(m *Message) scrubber {
	if p.password == nil {
		return newScrubber(m)
	}
	return newScrubber(m, p.password.value, plainResponse(p.username, p.password.value))
}

// Send submits m as one mail to m.To.
func (p *SMTP) Send(ctx context.Context, m *Message) error {
	s := p.scrubber(m)
	if m == nil {
		return &Error{Provider: p.name, Class: ErrPermanent, Detail: "nil message"}
	}
	rcpt, err := mail.ParseAddress(m.To)
	if err != nil || strings.ContainsAny(rcpt.Address, "\r\n<>") {
		return &Error{Provider: p.name, Class: ErrPermanent, Detail: "recipient is not an email address"}
	}
	msg := p.compose(m, rcpt)
	utf8 := !isASCII(p.from.Address) || !isASCII(rcpt.Address)

	rctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	for fresh := false; ; fresh = true {
		sess, reused, err := p.session(rctx, fresh)
		if err != nil {
			return p.fail(ctx, rctx, err, s)
		}
		if utf8 && !sess.utf8 {
			p.release(sess)
			return &Error{Provider: p.name, Class: ErrPermanent,
				Detail: "an address is not ASCII and the server does not offer SMTPUTF8"}
		}
		stage, sent, err := p.deliver(rctx, sess, rcpt.Address, utf8, msg)
		if err == nil {
			p.release(sess)
			return nil
		}
		if reused && stage == "mail" && stale(err) && rctx.Err() == nil {
			// The server closed the idle session; nothing was sent.
			sess.close()
			continue
		}
		var se *smtp.SMTPError
		if errors.As(err, &se) && se.Code != 421 && p.reset(rctx, sess) == nil {
			p.release(sess)
		} else {
			sess.close()
		}
		return p.fail(ctx, rctx, &stageError{stage: stage, err: err, sent: sent}, s)
	}
}

// session returns an idle session (unless fresh) or a new one.
func (p *SMTP) session(ctx context.Context, fresh bool) (*smtpSession, bool, error) {
	if !fresh {
		if s := p.takeIdle(); s != nil {
			return s, true, nil
		}
	}
	s, err := p.dial(ctx)
	return s, false, err
}

// takeIdle pops the newest idle session, closing any that idled too long.
func (p *SMTP) takeIdle() *smtpSession {
	var stale []*smtpSession
	defer func() {
		// Closed, not QUIT: a server that went silent while the session
		// idled would hold this send a second a session (quit's wait),
		// outside its timeout and ctx.
		for _, s := range stale {
			s.close()
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.idle) > 0 {
		s := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if time.Since(s.lastUsed) <= SMTPIdleTimeout {
			return s
		}
		stale = append(stale, s)
	}
	return nil
}

// release puts a session back into the pool, or closes it when the pool is
// full or closed. Closed, not QUIT: release runs inside a Send whose
// outcome is already known, and quit's wait for the reply (up to a second,
// on a server that leaves QUIT unanswered) would hold the send outside its
// timeout and ctx.
func (p *SMTP) release(s *smtpSession) {
	s.lastUsed = time.Now()
	p.mu.Lock()
	if !p.closed && len(p.idle) < SMTPMaxIdle {
		p.idle = append(p.idle, s)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	s.close()
}

// stageError names the step of the dialogue an error happened at.
type stageError struct {
	stage string
	err   error
	sent  bool // the mail's final dot was written whole: only its reply failed
}

func (e *stageError) Error() string { return e.stage + ": " + e.err.Error() }
func (e *stageError) Unwrap() error { return e.err }

// dial opens, secures and authenticates a new session, bounded by ctx.
func (p *SMTP) dial(ctx context.Context) (*smtpSession, error) {
	tcp, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, &stageError{stage: "connect", err: err}
	}
	conn := &watchConn{Conn: tcp}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	stage := "hello" // greeting, EHLO, STARTTLS, EHLO under TLS
	fail := func(err error) (*smtpSession, error) {
		_ = conn.Close()
		return nil, &stageError{stage: stage, err: err}
	}
	// Greeting, EHLO, STARTTLS.
	c, err := smtp.NewClientStartTLS(conn, p.tls)
	if err != nil {
		return fail(err)
	}
	c.CommandTimeout, c.SubmissionTimeout = p.timeout, p.timeout
	// EHLO again, now under TLS: the handshake happens here.
	if err := c.Hello(p.localName); err != nil {
		return fail(err)
	}
	if _, ok := c.TLSConnectionState(); !ok {
		return fail(errNotEncrypted)
	}
	if p.password != nil {
		stage = "auth"
		if err := c.Auth(sasl.NewPlainClient("", p.username, p.password.value)); err != nil {
			return fail(err)
		}
	}
	utf8, _ := c.Extension("SMTPUTF8")
	return &smtpSession{c: c, conn: conn, utf8: utf8}, nil
}

// deliver runs one mail transaction on s, bounded by ctx, and returns the
// stage it failed at and whether the mail was sent whole, its final dot
// included (then only the reply failed, or refused it).
func (p *SMTP) deliver(ctx context.Context, s *smtpSession, rcpt string, utf8 bool, msg []byte) (string, bool, error) {
	stop := context.AfterFunc(ctx, func() { _ = s.conn.Close() })
	defer stop()
	if err := s.c.Mail(p.from.Address, &smtp.MailOptions{Size: int64(len(msg)), UTF8: utf8}); err != nil {
		return "mail", false, err
	}
	if err := s.c.Rcpt(rcpt, nil); err != nil {
		return "rcpt", false, err
	}
	w, err := s.c.Data()
	if err != nil {
		return "data", false, err
	}
	if _, err := w.Write(msg); err != nil {
		_ = w.Close()
		return "data", false, err
	}
	// Close flushes the rest of the mail and the final dot, then reads the
	// reply: a write that went through whole means the server may have the
	// mail, whatever happens to the reply.
	at := s.conn.mark()
	if err := w.Close(); err != nil {
		var se *smtp.SMTPError
		if errors.As(err, &se) && se.Code >= 200 && se.Code <= 299 {
			// go-smtp wants exactly 250; any 2yz is a positive completion
			// (RFC 5321 §4.2.1): the server took the mail.
			return "", true, nil
		}
		return "data", s.conn.wroteSince(at), err
	}
	return "", true, nil
}

// reset ends a refused transaction so the session can carry the next mail.
func (p *SMTP) reset(ctx context.Context, s *smtpSession) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	stop := context.AfterFunc(ctx, func() { _ = s.conn.Close() })
	defer stop()
	return s.c.Reset()
}

// quit ends a session politely, waiting a second at most.
func (s *smtpSession) quit() {
	s.c.CommandTimeout = time.Second
	if s.c.Quit() != nil {
		s.close()
	}
}

func (s *smtpSession) close() { _ = s.c.Close() }

// stale reports an error of a session the server closed while it idled:
// the connection is gone, or the server said 421 (closing).
func stale(err error) bool {
	var se *smtp.SMTPError
	if errors.As(err, &se) {
		return se.Code == 421
	}
	return true
}

// fail maps a failed step to the error of its class. parent is the
// caller's context, rctx the one bounded by the timeout.
func (p *SMTP) fail(parent, rctx context.Context, err error, s scrubber) error {
	stage := "send"
	var st *stageError
	if errors.As(err, &st) {
		stage = st.stage
	}
	var se *smtp.SMTPError
	if errors.As(err, &se) {
		e := &Error{Provider: p.name, Class: ErrTransient, Status: se.Code, Detail: stage + ": " + smtpReply(se, s)}
		switch {
		case se.Code < 400 && st != nil && st.sent:
			// Neither a completion nor a refusal (a 1yz or 3yz) to a final
			// dot that went out whole: the server may have the mail.
			e.Ambiguous = true
		case se.Code >= 500 && se.Code <= 599 && senderRefused(stage, se, p.password != nil):
			e.Class = ErrSender
			if stage == "rcpt" {
				e.Detail += " (the server refuses to relay for this sender: it needs AUTH, or another server)"
			}
		case se.Code >= 500 && se.Code <= 599:
			e.Class = ErrPermanent
			e.RecipientGone = recipientGone(stage, se)
		}
		return e
	}
	cause := errors.Unwrap(err)
	if cause == nil {
		cause = err
	}
	e := &Error{Provider: p.name, Class: ErrTransient, Err: cause, Ambiguous: st != nil && st.sent}
	var ne net.Error
	switch why := insecure(err); {
	case parent.Err() != nil:
		e.Detail = "gave up: " + causeDetail(parent.Err(), s)
		e.Err = parent.Err()
	case rctx.Err() != nil, errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		e.Detail = "timeout after " + p.timeout.String() + " (" + stage + ")"
	case errors.Is(err, syscall.ECONNREFUSED):
		e.Detail = "connection refused"
	case why != "":
		// The server's TLS is not what the configuration trusts: no mail
		// can go until the server or tls_ca_file is fixed.
		e.Class, e.Detail = ErrSender, stage+": "+why+": "+causeDetail(cause, s)
	default:
		e.Detail = stage + ": " + causeDetail(cause, s)
	}
	return e
}

// insecure says why err is a session that cannot be secured as the
// configuration requires, or "": the server does not offer STARTTLS, or
// its certificate does not verify against the system roots or tls_ca_file
// (unknown authority, wrong host name, expired). Each is the same for every
// mail: a configuration fault of the sender, not a passing failure.
func insecure(err error) string {
	var cve *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	switch {
	case errors.As(err, &cve), errors.As(err, &ua), errors.As(err, &he), errors.As(err, &ci):
		return "the server's TLS certificate is not trusted"
	case strings.Contains(err.Error(), "server doesn't support STARTTLS"): // go-smtp's initStartTLS
		return "the server does not offer STARTTLS (nothing is sent in clear)"
	case errors.Is(err, errNotEncrypted):
		return "the session is not encrypted"
	}
	return ""
}

// errNotEncrypted is a session whose STARTTLS left it in clear.
var errNotEncrypted = errors.New("the session is not encrypted")

// senderRefused reports whether a 5xx reply at stage refuses the sender
// (its address, host, credentials or configuration) rather than the mail:
// every mail would get it. At RCPT that is an enhanced code 5.7.1 (RFC
// 3463: "Delivery not authorized, message refused") on a session that did
// not authenticate (authed false), which a submission server answers when
// it will not relay for an unauthenticated client ("554 5.7.1 Relay access
// denied"). On an authenticated session servers answer 5.7.1 at RCPT for a
// policy refusal of that one recipient (a blocked domain, a recipient that
// takes mail from some senders only): the mail's, not the sender's, so one
// such job does not pause the provider for everyone.
func senderRefused(stage string, se *smtp.SMTPError, authed bool) bool {
	c := se.EnhancedCode
	switch stage {
	case "hello", "auth":
		return true
	case "mail":
		return se.Code == 530 || c[0] == 5 && (c[1] == 7 || c[1] == 1 && (c[2] == 7 || c[2] == 8))
	case "rcpt":
		return !authed && c == smtp.EnhancedCode{5, 7, 1}
	}
	return false
}

// recipientGone reports whether a 5xx reply at stage names the recipient
// as dead: the enhanced code 5.1.1 (RFC 3463: "Bad destination mailbox
// address: The mailbox specified in the address does not exist") at RCPT,
// or after DATA from a server that checks recipients late.
func recipientGone(stage string, se *smtp.SMTPError) bool {
	return (stage == "rcpt" || stage == "data") && se.EnhancedCode == smtp.EnhancedCode{5, 1, 1}
}

// smtpReply describes a reply: "SMTP 550 5.1.1 mailbox unavailable", its
// text cut to the first line and scrubbed.
func smtpReply(se *smtp.SMTPError, s scrubber) string {
	d := "SMTP " + strconv.Itoa(se.Code)
	if c := se.EnhancedCode; c != (smtp.EnhancedCode{}) && c != smtp.NoEnhancedCode {
		d += fmt.Sprintf(" %d.%d.%d", c[0], c[1], c[2])
	}
	line, _, _ := strings.Cut(se.Message, "\n")
	if line = text.OneLine(s.scrub(line), maxReason); line != "" {
		d += " " + line
	}
	return d
}

// plainResponse is the base64 AUTH PLAIN initial response for user and
// password, as it would appear on the wire.
func plainResponse(user, password string) string {
	_, resp, _ := sasl.NewPlainClient("", user, password).Start()
	return base64Std(resp)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
