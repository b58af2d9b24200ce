package providertest

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notifier/notifier/providers"
)

// SMTPTarget describes an SMTP provider kind under test.
type SMTPTarget struct {
	// New builds the provider under test, sending to addr (host:port of the
	// suite's scripted server) with the given timeout, trusting ServerTLS's
	// certificate. It registers its own cleanup.
	New func(t *testing.T, addr string, timeout time.Duration) providers.Provider
	// Message returns a fresh message the provider can send.
	Message func() *providers.Message
	// ServerTLS is the servers' STARTTLS configuration (required).
	ServerTLS *tls.Config
	// Secrets are the credentials New configured: they must never appear
	// in an error text.
	Secrets []string
}

// Script step names: the SMTP verbs, plus "greeting" (the banner) and "."
// (the reply to the end of DATA).
const (
	// Hang sends no reply until the client leaves or the test ends.
	Hang = "<hang>"
	// Drop closes the connection (with a reset) instead of replying.
	Drop = "<drop>"
)

// Script overrides the scripted server's reply to steps: a reply line
// ("451 4.3.0 try later", several lines joined with \r\n), Hang or Drop;
// and under DotDelay, a duration the server waits before it answers the end
// of DATA (so that concurrent sends each hold a session of their own).
type Script map[string]string

// DotDelay is the Script key of the wait before the reply to the end of
// DATA ("200ms").
const DotDelay = "<dot delay>"

// RunSMTP runs the conformance suite against an SMTP kind: every outcome of
// a mail submission (each reply class at each step, malformed replies, no
// STARTTLS, timeouts, refused and reset connections, cancellation,
// concurrency) must map to the right class with a safe, one-line error. A
// 4xx reply is ErrTransient and a 5xx reply ErrPermanent, each carrying the
// reply code as Error.Status, except the 5xx replies that refuse the sender
// rather than the mail (a 554 greeting, a refused AUTH, a MAIL FROM refused
// by policy, a RCPT refused with 5.7.1 on a session that did not
// authenticate: no relaying for this sender), which are ErrSender, as is a
// server that does not offer STARTTLS; a RCPT refused with 5.7.1 after
// AUTH refuses that recipient by policy (ErrPermanent); only a
// 5.1.1 (no such mailbox) matches ErrRecipientGone; failures without a reply are
// ErrTransient with status 0, Ambiguous when they came after the end of
// the DATA (the server may have taken the mail). SMTP has no Retry-After:
// its rate limits are 4xx replies.
func RunSMTP(t *testing.T, target SMTPTarget) {
	t.Helper()
	if target.ServerTLS == nil {
		t.Fatal("providertest: SMTPTarget.ServerTLS is required")
	}
	s := &smtpSuite{target: target, base: &suite{target: Target{Message: target.Message, Secrets: target.Secrets}}}
	t.Run("Accepted", s.accepted)
	t.Run("Transient", s.transient)
	t.Run("Permanent", s.permanent)
	t.Run("Sender", s.sender)
	t.Run("RcptNotAuthorized", s.rcptNotAuthorized)
	t.Run("PermanentCarriesReason", s.permanentReason)
	t.Run("NoLeakInDetail", s.noLeak)
	t.Run("DotReplies", s.dotReplies)
	t.Run("MalformedReply", s.malformed)
	t.Run("NoSTARTTLS", s.noSTARTTLS)
	t.Run("Timeout", s.timeout)
	t.Run("ConnectionRefused", s.refused)
	t.Run("ConnectionReset", s.reset)
	t.Run("ContextCanceled", s.canceled)
	t.Run("Concurrent", s.concurrent)
}

type smtpSuite struct {
	target SMTPTarget
	base   *suite // for checkError
}

// ServeSMTP starts the suite's scripted SMTP server (STARTTLS with
// serverTLS, the dialogue's replies overridden by script) for a test of a
// kind's own behaviour, and returns its address. It stops when the test
// ends.
func ServeSMTP(t *testing.T, serverTLS *tls.Config, script Script) string {
	t.Helper()
	s := &smtpSuite{target: SMTPTarget{ServerTLS: serverTLS}}
	return s.serve(t, script).addr
}

// smtpServer is a scripted SMTP server.
type smtpServer struct {
	addr      string
	delivered atomic.Int32  // mails whose end of DATA was answered 250
	authed    atomic.Bool   // a client sent AUTH
	arrived   chan struct{} // a signal per step that hangs
}

// serve starts a scripted server for one subtest.
func (s *smtpSuite) serve(t *testing.T, script Script) *smtpServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &smtpServer{addr: l.Addr().String(), arrived: make(chan struct{}, 64)}
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() {
		close(done)
		_ = l.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				stop := context.AfterFunc(contextOf(done), func() { _ = c.Close() })
				defer stop()
				s.session(c, script, srv)
			})
		}
	})
	return srv
}

// contextOf is a context that ends when done is closed.
func contextOf(done <-chan struct{}) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-done
		cancel()
	}()
	return ctx
}

// session runs one scripted SMTP dialogue on c.
func (s *smtpSuite) session(c net.Conn, script Script, srv *smtpServer) {
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	secure := false
	// reply answers step; false ends the session.
	reply := func(step, def string) bool {
		text, ok := script[step]
		if !ok {
			text = def
		}
		switch text {
		case Hang:
			srv.arrived <- struct{}{}
			_, _ = r.ReadByte() // returns when the client leaves (or the deadline)
			return false
		case Drop:
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			} else if tc, ok := c.(*tls.Conn); ok {
				if raw, ok := tc.NetConn().(*net.TCPConn); ok {
					_ = raw.SetLinger(0)
				}
			}
			return false
		}
		_, err := c.Write([]byte(text + "\r\n"))
		return err == nil && !strings.HasPrefix(text, "421") && !strings.HasPrefix(text, "221")
	}
	if !reply("greeting", "220 fake.test ESMTP ready") {
		return
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		verb, _, _ := strings.Cut(strings.ToUpper(strings.TrimSpace(line)), " ")
		def := "250 2.0.0 ok"
		switch verb {
		case "EHLO", "HELO":
			lines := []string{"250-fake.test", "250-8BITMIME", "250-ENHANCEDSTATUSCODES"}
			if secure {
				lines = append(lines, "250-AUTH PLAIN")
			} else {
				lines = append(lines, "250-STARTTLS")
			}
			def = strings.Join(lines, "\r\n") + "\r\n250 SIZE 10240000"
		case "STARTTLS":
			if !reply("STARTTLS", "220 2.0.0 ready to start TLS") {
				return
			}
			if _, overridden := script["STARTTLS"]; overridden && !strings.HasPrefix(script["STARTTLS"], "220") {
				continue
			}
			tc := tls.Server(c, s.target.ServerTLS)
			if tc.Handshake() != nil {
				return
			}
			c, r, secure = tc, bufio.NewReader(tc), true
			continue
		case "AUTH":
			srv.authed.Store(true)
			def = "235 2.7.0 authenticated"
		case "DATA":
			if !reply("DATA", "354 end data with <CR><LF>.<CR><LF>") {
				return
			}
			if _, overridden := script["DATA"]; overridden && !strings.HasPrefix(script["DATA"], "354") {
				continue
			}
			for {
				l, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if l == ".\r\n" {
					break
				}
			}
			if d, err := time.ParseDuration(script[DotDelay]); err == nil {
				time.Sleep(d)
			}
			text, ok := script["."]
			if !ok || strings.HasPrefix(text, "250") {
				srv.delivered.Add(1)
			}
			if !reply(".", "250 2.0.0 queued") {
				return
			}
			continue
		case "QUIT":
			def = "221 2.0.0 bye"
		}
		if !reply(verb, def) {
			return
		}
	}
}

// send builds the provider against a scripted server and sends once.
func (s *smtpSuite) send(t *testing.T, timeout time.Duration, script Script) (*smtpServer, error) {
	t.Helper()
	srv := s.serve(t, script)
	p := s.target.New(t, srv.addr, timeout)
	return srv, p.Send(context.Background(), s.target.Message())
}

func (s *smtpSuite) accepted(t *testing.T) {
	t.Parallel()
	srv, err := s.send(t, 5*time.Second, nil)
	if err != nil {
		t.Fatalf("Send = %v, want nil", err)
	}
	if n := srv.delivered.Load(); n != 1 {
		t.Errorf("%d mails delivered, want 1", n)
	}
	if got := providers.StatusClass(err); got != "2xx" {
		t.Errorf("StatusClass(nil) = %q", got)
	}
}

// dotReplies: any 2yz reply to the end of DATA is a positive completion
// (RFC 5321 §4.2.1: the server took the mail), not a failure to retry (the
// mail would go twice); one that is neither a completion nor a refusal (a
// 3yz) leaves the mail possibly taken: ErrTransient and Ambiguous.
func (s *smtpSuite) dotReplies(t *testing.T) {
	t.Parallel()
	if _, err := s.send(t, 5*time.Second, Script{".": "251 2.1.5 queued, will forward"}); err != nil {
		t.Errorf("a 251 to the end of DATA: Send = %v, want nil", err)
	}
	_, err := s.send(t, 5*time.Second, Script{".": "354 go ahead, again"})
	var e *providers.Error
	if !errors.As(err, &e) || !errors.Is(err, providers.ErrTransient) || !e.Ambiguous {
		t.Errorf("a 354 to the end of DATA: Send = %v, want ErrTransient, Ambiguous", err)
	}
}

// replyCases are scripted replies at each step of the dialogue.
func replyCases(class int) []Script {
	if class == 4 {
		return []Script{
			{"greeting": "421 4.3.2 service not available"},
			{"EHLO": "451 4.3.0 try later"},
			{"AUTH": "454 4.7.0 temporary authentication failure"},
			{"MAIL": "451 4.3.0 try later"},
			{"RCPT": "450 4.2.1 mailbox busy"},
			{"RCPT": "452 4.5.3 too many recipients"},
			{"DATA": "451 4.3.0 try later"},
			{".": "451 4.7.1 rate limit exceeded"},
			{".": "421 4.4.2 closing connection"},
		}
	}
	return []Script{
		{"MAIL": "552 5.3.4 message size exceeds fixed limit"},
		{"RCPT": "550 5.1.1 mailbox unavailable"},
		{"RCPT": "553 5.1.3 bad address syntax"},
		{"DATA": "554 5.5.1 no valid recipients"},
		{".": "552 5.3.4 message too big"},
		{".": "554 5.7.1 message rejected as spam"},
	}
}

// senderCases are 5xx replies that refuse the sender, not the mail.
func senderCases() []Script {
	return []Script{
		{"greeting": "554 5.3.2 no service here"},
		{"EHLO": "550 5.7.1 client host rejected"},
		{"AUTH": "535 5.7.8 authentication credentials invalid"},
		{"AUTH": "534 5.7.9 authentication mechanism is too weak"},
		{"MAIL": "550 5.7.1 sender refused"},
		{"MAIL": "553 5.1.8 sender address domain does not exist"},
		{"MAIL": "530 5.7.0 authentication required"},
	}
}

func scriptCode(sc Script) int {
	for _, v := range sc {
		code, _ := strconv.Atoi(v[:3])
		return code
	}
	return 0
}

func (s *smtpSuite) transient(t *testing.T) {
	t.Parallel()
	for _, sc := range replyCases(4) {
		srv, err := s.send(t, 5*time.Second, sc)
		s.base.checkError(t, err, providers.ErrTransient)
		wantStatus(t, err, scriptCode(sc))
		if n := srv.delivered.Load(); n != 0 {
			t.Errorf("%v: %d mails delivered", sc, n)
		}
	}
}

func (s *smtpSuite) permanent(t *testing.T) {
	t.Parallel()
	for _, sc := range replyCases(5) {
		_, err := s.send(t, 5*time.Second, sc)
		s.base.checkError(t, err, providers.ErrPermanent)
		wantStatus(t, err, scriptCode(sc))
		if !strings.Contains(err.Error(), strconv.Itoa(scriptCode(sc))) {
			t.Errorf("error %q does not name the reply code", err)
		}
		// Only "no such mailbox" (RFC 3463's X.1.1) names the recipient
		// as dead.
		if gone, want := errors.Is(err, providers.ErrRecipientGone), strings.Contains(sc["RCPT"], " 5.1.1 "); gone != want {
			t.Errorf("%v: recipient gone %v, want %v", sc, gone, want)
		}
	}
}

func (s *smtpSuite) sender(t *testing.T) {
	t.Parallel()
	for _, sc := range senderCases() {
		srv, err := s.send(t, 5*time.Second, sc)
		s.base.checkError(t, err, providers.ErrSender)
		wantStatus(t, err, scriptCode(sc))
		wantAmbiguous(t, err, false)
		if n := srv.delivered.Load(); n != 0 {
			t.Errorf("%v: %d mails delivered", sc, n)
		}
	}
}

// rcptNotAuthorized: a RCPT refused with 5.7.1 (RFC 3463: "Delivery not
// authorized, message refused") refuses the sender on a session that did
// not authenticate (relay access denied: every mail would get it), and on
// one that did refuses this recipient by policy, as servers also use it:
// ErrPermanent, which dead-letters the job instead of pausing the
// provider for everyone.
func (s *smtpSuite) rcptNotAuthorized(t *testing.T) {
	t.Parallel()
	for _, reply := range []string{"554 5.7.1 <a@example.com>: Relay access denied", "550 5.7.1 recipient refused by policy"} {
		srv, err := s.send(t, 5*time.Second, Script{"RCPT": reply})
		want := providers.ErrPermanent
		if !srv.authed.Load() {
			want = providers.ErrSender
		}
		s.base.checkError(t, err, want)
		wantStatus(t, err, scriptCode(Script{"RCPT": reply}))
		wantAmbiguous(t, err, false)
		if errors.Is(err, providers.ErrRecipientGone) {
			t.Errorf("RCPT %s: %v, want no ErrRecipientGone", reply, err)
		}
		if n := srv.delivered.Load(); n != 0 {
			t.Errorf("RCPT %s: %d mails delivered", reply, n)
		}
	}
}

func (s *smtpSuite) permanentReason(t *testing.T) {
	t.Parallel()
	_, err := s.send(t, 5*time.Second, Script{".": "554-5.7.1 message rejected as spam\r\n554 5.7.1 second line of the reply"})
	s.base.checkError(t, err, providers.ErrPermanent)
	if !strings.Contains(err.Error(), "5.7.1 message rejected as spam") {
		t.Errorf("error %q does not carry the server's reason", err)
	}
	if strings.Contains(err.Error(), "second line") {
		t.Errorf("error %q carries more than the first line", err)
	}
}

func (s *smtpSuite) noLeak(t *testing.T) {
	t.Parallel()
	m := s.target.Message()
	echo := "mailbox " + m.To + " refused for message '" + m.Body + "'"
	for _, secret := range s.target.Secrets {
		echo += " with credentials " + secret
	}
	for _, sc := range []Script{{"RCPT": "550 5.1.1 " + echo}, {".": "451 4.3.0 " + echo}, {"AUTH": "535 5.7.8 " + echo}} {
		_, err := s.send(t, 5*time.Second, sc)
		want := providers.ErrPermanent
		switch {
		case scriptCode(sc) < 500:
			want = providers.ErrTransient
		case sc["AUTH"] != "":
			want = providers.ErrSender
		}
		s.base.checkError(t, err, want)
	}
}

func (s *smtpSuite) malformed(t *testing.T) {
	t.Parallel()
	for _, sc := range []Script{
		{"greeting": "hello there"},
		{"RCPT": "ok, whatever you say"},
		{".": "2"},
		{"MAIL": "999 what"},
	} {
		srv, err := s.send(t, 5*time.Second, sc)
		s.base.checkError(t, err, providers.ErrTransient)
		if n := srv.delivered.Load(); n != 0 {
			t.Errorf("%v: %d mails delivered", sc, n)
		}
	}
}

func (s *smtpSuite) noSTARTTLS(t *testing.T) {
	t.Parallel()
	// The server does not offer STARTTLS: nothing is sent in clear, and
	// no mail can go until the server (or the configuration) is fixed: the
	// sender is refused.
	srv, err := s.send(t, 5*time.Second, Script{"EHLO": "250-fake.test\r\n250 AUTH PLAIN"})
	s.base.checkError(t, err, providers.ErrSender)
	if n := srv.delivered.Load(); n != 0 {
		t.Errorf("a mail was delivered without TLS")
	}
	// It offers it, then refuses it for now (RFC 3207's 454 "TLS not
	// available due to temporary reason").
	_, err = s.send(t, 5*time.Second, Script{"STARTTLS": "454 4.7.0 TLS not available"})
	s.base.checkError(t, err, providers.ErrTransient)
}

func (s *smtpSuite) timeout(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	for _, step := range []string{"greeting", "RCPT", "."} {
		start := time.Now()
		srv, err := s.send(t, timeout, Script{step: Hang})
		took := time.Since(start)
		s.base.checkError(t, err, providers.ErrTransient)
		wantStatus(t, err, 0)
		select {
		case <-srv.arrived: // the server reached the step: the whole mail was sent if it is the final dot
			wantAmbiguous(t, err, step == ".")
		default: // a loaded machine let the timeout come first
			wantAmbiguous(t, err, false)
		}
		if !strings.Contains(err.Error(), "timeout") {
			t.Errorf("hang at %s: error %q does not say it timed out", step, err)
		}
		// Not a performance bound: a Send that ignored its timeout would
		// hang until the test ends.
		if took < timeout || took > timeout+10*time.Second {
			t.Errorf("hang at %s: Send returned after %s with a timeout of %s", step, took, timeout)
		}
	}
}

func (s *smtpSuite) refused(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	p := s.target.New(t, addr, 5*time.Second)
	err = p.Send(context.Background(), s.target.Message())
	s.base.checkError(t, err, providers.ErrTransient)
	wantStatus(t, err, 0)
	wantAmbiguous(t, err, false)
	if !strings.Contains(err.Error(), "refused") {
		t.Errorf("error %q does not say the connection was refused", err)
	}
}

func (s *smtpSuite) reset(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"greeting", "MAIL", "."} {
		srv, err := s.send(t, 5*time.Second, Script{step: Drop})
		s.base.checkError(t, err, providers.ErrTransient)
		wantStatus(t, err, 0)
		wantAmbiguous(t, err, step == ".")
		if n := srv.delivered.Load(); step != "." && n != 0 {
			t.Errorf("drop at %s: %d delivered", step, n)
		}
	}
}

func (s *smtpSuite) canceled(t *testing.T) {
	t.Parallel()
	srv := s.serve(t, Script{".": Hang})
	p := s.target.New(t, srv.addr, 30*time.Second)
	before, inFlight := s.base.sendCanceled(t, p, s.target.Message, srv.arrived)
	wantAmbiguous(t, before, false)
	wantAmbiguous(t, inFlight, true) // canceled waiting for the reply to the end of DATA
}

func (s *smtpSuite) concurrent(t *testing.T) {
	t.Parallel()
	srv := s.serve(t, nil)
	const n = 32
	sendConcurrently(t, s.target.New(t, srv.addr, 5*time.Second), s.target.Message, n)
	if got := srv.delivered.Load(); got != n {
		t.Errorf("%d mails delivered for %d sends", got, n)
	}
}
