package providers_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/providers/providertest"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// Answers of hostile or broken endpoints that a review found mishandled:
// each test names what went wrong before.

// newSwitcher starts a server that answers every request with
// "101 Switching Protocols" (Upgrade and Connection headers) and then says
// nothing more, holding the connection until the test ends.
func newSwitcher(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(done); _ = l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				_, _ = c.Write([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"))
				<-done
			})
		}
	})
	return "http://" + l.Addr().String()
}

// sendWithin runs send and fails the test when it has not returned within
// limit (it is left to end with the test's cleanup).
func sendWithin(t *testing.T, limit time.Duration, send func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- send() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(limit):
		t.Errorf("Send still running after %v", limit)
		return nil
	}
}

// Test101SwitchingProtocolsEndsAtTheTimeout: a receiver that answers
// the POST with 101 Switching Protocols and then goes silent holds Send
// (and its goroutine) past the provider's timeout and past the caller's
// context, until the receiver closes the connection: net/http hands a 101's
// connection to the caller (the body is the raw connection, which no
// context governs), and classify reads up to reasonLimit from it.
func Test101SwitchingProtocolsEndsAtTheTimeout(t *testing.T) {
	w := newWebhook(t, newSwitcher(t), 500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := sendWithin(t, 3*time.Second, func() error { return w.Send(ctx, smsMessage()) })
	if !errors.Is(err, providers.ErrTransient) {
		t.Errorf("Send = %v, want ErrTransient", err)
	}
}

// Test101FromTheOAuthTokenEndpointEndsAtTheTimeout: the same answer from a service
// account's token_uri holds the send, and the fetch holds the oauth
// source's semaphore, so every later send of the provider waits for it.
func Test101FromTheOAuthTokenEndpointEndsAtTheTimeout(t *testing.T) {
	fake := testenv.FakeFCM(t)
	key, err := os.ReadFile(fake.ServiceAccountFile())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "key.json")
	if err := os.WriteFile(path, []byte(strings.Replace(string(key), fake.TokenURL(), newSwitcher(t)+"/token", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := newFCM(t, providers.Config{URL: fake.URL(), CredentialsFile: path, Timeout: 500 * time.Millisecond}, "", providers.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err = sendWithin(t, 3*time.Second, func() error { return p.Send(ctx, pushMessage()) })
	if !errors.Is(err, providers.ErrTransient) {
		t.Errorf("Send = %v, want ErrTransient", err)
	}
}

// TestH2GoAwayWithAnErrorCodeIsNotAmbiguous: a server that reads the whole
// first stream of a connection, then answers GOAWAY with an error code
// and LastStreamID 0, says it processed no stream (RFC 9113 §6.8: streams
// above the last stream id "were not or will not be processed"). The
// failure is transient and not ambiguous (docs/providers.md: "nor is an
// HTTP/2 stream the server says it did not process (REFUSED_STREAM, a
// stream past its GOAWAY)"), so retry_on_timeout: false retries it rather
// than dead-lettering it as ambiguous.
func TestH2GoAwayWithAnErrorCodeIsNotAmbiguous(t *testing.T) {
	certs := testenv.NewCerts(t)
	cfg := serverTLS(t, certs)
	cfg.NextProtos = []string{"h2"}
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { goAwayAfterFirstStream(c) })
		}
	})
	w := newWebhook(t, "https://"+l.Addr().String(), 2*time.Second, noRetryOnTimeout,
		func(c *providers.Config) { c.TLSCAFile = certs.CAFile })
	err = w.Send(context.Background(), smsMessage())
	var e *providers.Error
	if !errors.As(err, &e) || !errors.Is(err, providers.ErrTransient) || e.Ambiguous {
		t.Errorf("Send = %v (ambiguous %v), want ErrTransient, not ambiguous", err, e != nil && e.Ambiguous)
	}
}

// goAwayAfterFirstStream speaks just enough HTTP/2 to read one request
// whole, then sends GOAWAY(last stream 0, INTERNAL_ERROR) and closes.
func goAwayAfterFirstStream(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if tc, ok := c.(*tls.Conn); ok && tc.Handshake() != nil {
		return
	}
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil {
		return
	}
	fr := http2.NewFramer(c, c)
	if fr.WriteSettings() != nil {
		return
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			if f.StreamID == 1 && f.StreamEnded() {
				goto whole
			}
		case *http2.DataFrame:
			if f.StreamID == 1 && f.StreamEnded() {
				goto whole
			}
		}
	}
whole:
	_ = fr.WriteGoAway(0, http2.ErrCodeInternal, []byte("shutting down"))
	time.Sleep(100 * time.Millisecond)
}

func replySMTPProvider(t *testing.T, certs *testenv.Certs, addr string, timeout time.Duration, noRetry bool) *providers.SMTP {
	host, port := splitHostPort(t, addr)
	cfg := providers.Config{Host: host, Port: port, Timeout: timeout, TLSCAFile: certs.CAFile, Username: "notifier"}
	if noRetry {
		cfg.RetryOnTimeout = new(false)
	}
	return newSMTP(t, cfg, smtpPassword)
}

// TestSMTPStaleSessionsAreClosedNotQuit: a send that finds idle sessions
// past SMTPIdleTimeout quits each of them (QUIT, up to a second for its
// reply) before it even dials, outside its timeout and its context. Against
// a server that leaves QUIT unanswered (a silent peer, a dead NAT entry),
// a send with a 1 s timeout takes one second per stale session.
func TestSMTPStaleSessionsAreClosedNotQuit(t *testing.T) {
	certs := testenv.NewCerts(t)
	// QUIT unanswered; the end of DATA answered after 200 ms, so that the
	// six sends below hold six sessions, idle in the pool after.
	addr := providertest.ServeSMTP(t, serverTLS(t, certs), providertest.Script{"QUIT": providertest.Hang, providertest.DotDelay: "200ms"})
	p := replySMTPProvider(t, certs, addr, time.Second, false)
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			if err := p.Send(context.Background(), emailMessage()); err != nil {
				t.Errorf("Send = %v", err)
			}
		})
	}
	wg.Wait()
	n := providers.AgeIdleSMTPSessions(p, time.Minute)
	if n < 4 {
		t.Fatalf("%d idle sessions after six overlapping sends, want at least 4 (the test needs several stale ones)", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	err := p.Send(ctx, emailMessage())
	if d := time.Since(start); d > 3*time.Second { // QUIT on each took n seconds
		t.Errorf("Send with a 1s timeout and a 1s context took %v (%d stale idle sessions), err %v", d, n, err)
	}
}

// TestSMTPEndlessGreetingIsBounded: a server (or anyone on the path:
// the greeting comes before STARTTLS) that answers with an endless
// multi-line greeting ("220-…" lines that never reach a last "220 " line)
// makes the client buffer all of it until the timeout: go-smtp caps each
// line at 2,000 bytes, but not the number of lines of one reply
// (net/textproto.ReadResponse appends every one to the message). With the
// default 5 s timeout one Send reads ~150-200 MiB and the heap peaks near
// 400 MiB.
func TestSMTPEndlessGreetingIsBounded(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = l.Close(); wg.Wait() })
	wg.Go(func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		chunk := []byte(strings.Repeat("220-"+strings.Repeat("x", 120)+"\r\n", 512))
		_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		for {
			n, err := c.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	certs := testenv.NewCerts(t)
	p := replySMTPProvider(t, certs, l.Addr().String(), 5*time.Second, false)
	err = p.Send(context.Background(), emailMessage())
	if !errors.Is(err, providers.ErrTransient) {
		t.Errorf("Send = %v, want ErrTransient", err)
	}
	_ = l.Close()
	wg.Wait()
	if n := sent.Load(); n > 16<<20 {
		t.Errorf("the client took %d MiB of one greeting before giving up (%v)", n>>20, err)
	}
}

// hugeHeaders is a header block of 2 MiB: 256 headers of 8 KiB each.
func hugeHeaders() http.Header {
	h := http.Header{}
	filler := strings.Repeat("a", 8<<10)
	for i := range 256 {
		h.Set("X-Filler-"+itoa(i), filler)
	}
	return h
}

// TestHugeResponseHeadersAreBounded: an answer's body is read to 4 KiB
// (an error's reason) or 64 KiB (a drain), but its header block was read
// whole up to net/http's default of 10 MiB, over HTTP/1.1 and HTTP/2 alike
// (the oauth token endpoint's answers too): a provider sending 9 MiB of
// headers cost one Send 34 MiB of allocations, and 32 workers a GiB, for an
// answer read as accepted. An answer whose headers exceed the limit is not
// read: the send fails, transient.
func TestHugeResponseHeadersAreBounded(t *testing.T) {
	t.Parallel()
	huge := hugeHeaders()
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for k, v := range huge {
			w.Header()[k] = v
		}
		w.WriteHeader(http.StatusOK)
	})
	t.Run("webhook over HTTP/1.1", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(handler)
		t.Cleanup(srv.Close)
		w := newWebhook(t, srv.URL, 5*time.Second)
		err := w.Send(context.Background(), smsMessage())
		if !errors.Is(err, providers.ErrTransient) {
			t.Errorf("Send against 2 MiB of response headers = %v, want ErrTransient", err)
		}
		t.Log(err)
	})
	t.Run("apns over HTTP/2", func(t *testing.T) {
		t.Parallel()
		certs := testenv.NewCerts(t)
		srv := httptest.NewUnstartedServer(handler)
		srv.EnableHTTP2 = true
		srv.TLS = serverTLS(t, certs)
		srv.StartTLS()
		t.Cleanup(srv.Close)
		keyFile, _ := writeP8(t)
		p := newAPNs(t, providers.Config{URL: srv.URL, TLSCAFile: certs.CAFile, KeyFile: keyFile, Timeout: 5 * time.Second}, providers.Options{})
		err := p.Send(context.Background(), iosMessage())
		if !errors.Is(err, providers.ErrTransient) {
			t.Errorf("Send against 2 MiB of response headers = %v, want ErrTransient", err)
		}
		t.Log(err)
	})
}

// TestPushTokenQuotedInAnotherCaseIsScrubbed: a device token the provider
// quotes back in another case than the job's (APNs tokens are hex, which
// APNs and the gateways in front of it take in either case) went whole into
// the error detail, and so into the log line and the dead letter's
// Notifier-Detail (SPEC §8: never a full device token): the recipient was
// masked only where it appeared byte for byte.
func TestPushTokenQuotedInAnotherCaseIsScrubbed(t *testing.T) {
	t.Parallel()
	token := strings.ToUpper(deviceToken)
	url := newReplier(t, http.StatusBadRequest, nil, "invalid device token "+deviceToken+" for this topic")
	w := newWebhook(t, url, 5*time.Second, func(c *providers.Config) { c.Channel = "push" })
	m := &providers.Message{Job: queue.Job{ID: "job-42", Channel: "push", To: token, Body: "Your parcel is on its way"}}
	err := w.Send(context.Background(), m)
	if !errors.Is(err, providers.ErrPermanent) {
		t.Fatalf("Send = %v, want ErrPermanent", err)
	}
	// Mask shows a token's first 6 characters; no longer stretch of it may
	// be left.
	text := strings.ToLower(err.Error())
	for i := 0; i+12 <= len(deviceToken); i++ {
		if strings.Contains(text, deviceToken[i:i+12]) {
			t.Fatalf("error %q quotes the device token (%q)", err, deviceToken[i:i+12])
		}
	}
	if !strings.Contains(err.Error(), "invalid device token") {
		t.Errorf("error %q lost the provider's reason", err)
	}
}

// TestSMTPSessionNotKeptIsClosedNotQuit: a session the pool does not keep
// (the pool full, or the provider closed, as a reload closes the registry
// it replaced while jobs may still use it) was ended with QUIT inside Send,
// after the mail was accepted, waiting up to a second for the reply outside
// the send's timeout and context: against a server that leaves QUIT
// unanswered, each such send took a second more than the mail did.
func TestSMTPSessionNotKeptIsClosedNotQuit(t *testing.T) {
	t.Parallel()
	certs := testenv.NewCerts(t)
	addr := providertest.ServeSMTP(t, serverTLS(t, certs), providertest.Script{"QUIT": providertest.Hang})
	p := replySMTPProvider(t, certs, addr, 5*time.Second, false)
	timed := func() time.Duration {
		start := time.Now()
		if err := p.Send(context.Background(), emailMessage()); err != nil {
			t.Fatalf("Send = %v", err)
		}
		return time.Since(start)
	}
	kept := timed()   // a new session, kept in the pool
	_ = p.Close()     // the idle session is quit here, outside any send
	closed := timed() // a new session, not kept
	if closed-kept > 700*time.Millisecond {
		t.Errorf("a send whose session is not kept took %v, one whose session is kept %v: it waited for the QUIT's reply", closed, kept)
	}
}

// TestASecretPastedIntoAnEnvKeyIsNotPrinted: a *_env key names the
// variable that holds a secret; an operator who pasted the secret itself
// there (a Twilio token, a password) had it printed in the error, at start
// and in every log that keeps it. A name written as names are
// (UPPER_CASE) is still shown.
func TestASecretPastedIntoAnEnvKeyIsNotPrinted(t *testing.T) {
	t.Parallel()
	const secret = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
	for _, c := range []providers.Config{
		{Name: "tw", Channel: "sms", Default: true, Kind: "twilio", Rate: 10, AccountSID: "AC0123456789abcdef0123456789abcdef", From: "+15550001111", CredentialsEnv: secret},
		{Name: "mail", Channel: "email", Default: true, Kind: "smtp", Rate: 10, Host: "smtp.example.com", From: "a@example.com", Username: "u", PasswordEnv: secret + "-x"},
	} {
		_, err := providers.NewRegistry([]providers.Config{c}, providers.Options{Version: "test", Getenv: func(string) string { return "" }})
		if err == nil {
			t.Fatalf("%s: a registry with its secret unset, want an error", c.Name)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error prints what the *_env key holds: %v", c.Name, err)
		}
		if !strings.Contains(err.Error(), "is it the secret itself") {
			t.Errorf("%s: the error does not say what is wrong: %v", c.Name, err)
		}
	}
	c := providers.Config{Name: "tw", Channel: "sms", Default: true, Kind: "twilio", Rate: 10, AccountSID: "AC0123456789abcdef0123456789abcdef", From: "+15550001111", CredentialsEnv: "TWILIO_AUTH"}
	_, err := providers.NewRegistry([]providers.Config{c}, providers.Options{Version: "test", Getenv: func(string) string { return "" }})
	if err == nil || !strings.Contains(err.Error(), "TWILIO_AUTH is not set") {
		t.Errorf("a variable's name is shown: %v", err)
	}
}
