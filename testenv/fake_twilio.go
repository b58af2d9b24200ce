package testenv

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/notifier/notifier/internal/localenv"
)

// This file holds the Twilio fake and the machinery it shares with the FCM
// and APNs fakes (fake_fcm.go, fake_apns.go) and, for the fault injection
// and contract, the SMTP fake (fake_smtp.go).

// faultState is the contract and the injected misbehaviour every service
// fake shares. Its methods are promoted to the fakes and are safe for
// concurrent use; mu also guards each fake's recordings.
type faultState struct {
	mu         sync.Mutex
	now        func() time.Time
	contract   int
	noSTARTTLS bool // WithoutSTARTTLS: the SMTP fake's alone

	acceptedAt     []time.Time // accepted requests only (2xx, SMTP 250)
	arrivals       []time.Time // every request decide saw, whatever the answer
	failNext       int
	failNextStatus int
	failUntil      time.Time
	failStatus     int
	limitUntil     time.Time
	limitAfter     string
	slowUntil      time.Time
	latency        time.Duration
	hangUntil      time.Time
	acceptHang     time.Time
}

// newFaultState applies the options the webhook fake takes (WithContract,
// WithClock) to a service fake.
func newFaultState(t testing.TB, opts []FakeOption) *faultState {
	t.Helper()
	probe := Fake{faultState: &faultState{now: time.Now}}
	for _, o := range opts {
		o(&probe)
	}
	if probe.contract < 0 {
		t.Fatalf("testenv: fake contract %d: must be >= 0", probe.contract)
	}
	return &faultState{now: probe.now, contract: probe.contract, noSTARTTLS: probe.noSTARTTLS}
}

// FailNext answers the next n requests (that pass the protocol checks)
// with status: an HTTP status, or an SMTP reply code for the SMTP fake.
// They do not count toward the contract.
func (s *faultState) FailNext(n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext, s.failNextStatus = n, status
}

// FailFor answers every request with status for d from now.
func (s *faultState) FailFor(d time.Duration, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failUntil, s.failStatus = s.now().Add(d), status
}

// RateLimitFor answers every request as rate limited for d from now: a 429
// in the service's own format with the header Retry-After: retryAfter
// (delay-seconds or an HTTP-date; left out when ""), or for the SMTP fake a
// 451 4.7.1 reply naming it.
func (s *faultState) RateLimitFor(d time.Duration, retryAfter string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limitUntil, s.limitAfter = s.now().Add(d), retryAfter
}

// SlowFor delays every answer to requests arriving in the next d by
// latency (real time).
func (s *faultState) SlowFor(d, latency time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slowUntil, s.latency = s.now().Add(d), latency
}

// HangFor holds every request arriving in the next d without ever
// answering, until its client gives up or the fake is closed.
func (s *faultState) HangFor(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hangUntil = s.now().Add(d)
}

// AcceptThenHang accepts every request arriving in the next d (one that
// passes the protocol checks and is not held by HangFor) and then never
// answers it, until its client gives up or the fake is closed: the outcome
// a client cannot tell from a lost request, though the provider acted on
// it. Such a request counts as accepted everywhere (the fake's record of
// accepted messages, MaxInWindow, the contract, Count of the success
// status) although no answer was sent. It takes precedence over FailNext,
// FailFor, RateLimitFor and the contract.
func (s *faultState) AcceptThenHang(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acceptHang = s.now().Add(d)
}

// Reset ends every misbehaviour set by FailNext, FailFor, RateLimitFor,
// SlowFor, HangFor and AcceptThenHang. Recordings and the contract are
// kept.
func (s *faultState) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = 0
	s.failUntil, s.limitUntil, s.slowUntil, s.hangUntil = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	s.acceptHang = time.Time{}
}

// MaxInWindow returns the most requests accepted within any window of
// length window: the largest number of accepted requests whose arrival
// times all lie in some [t, t+window).
//
// It counts accepted requests only, so under WithContract it can never
// exceed the contract: the fake refuses the request that would, with a 429
// that this count leaves out. A pacing check must use MaxArrivalsInWindow
// (or count the 429s); MaxInWindow stays for checks of what was accepted.
func (s *faultState) MaxInWindow(window time.Duration) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return localenv.MostInWindow(s.acceptedAt, window)
}

// Arrivals returns the arrival times, by the fake's clock and in order of
// arrival, of every request that passed the protocol checks and so reached
// the provider's logic: those accepted, those answered 429 (by the contract
// or RateLimitFor), those failed by FailNext or FailFor, and those held by
// HangFor. Requests refused by the protocol checks (a wrong method, content
// type, auth, a malformed body; for the SMTP fake a message checkMail
// refuses) are not in it: they are not send attempts. The slice is the
// caller's.
func (s *faultState) Arrivals() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.arrivals...)
}

// MaxArrivalsInWindow returns the most arrivals (as in Arrivals, so 429s
// and injected failures count) whose times all lie in some half-open
// window [t, t+window−budget). It returns 0 when window−budget <= 0.
//
// budget is the jitter budget: how late an arrival may be relative to the
// send slot the dispatcher gave it (timer wake-up, the HTTP path, the
// network). If the slots hold at most n in any window of length window,
// and every arrival lies within [slot, slot+budget], then the arrivals in
// [t, t+window−budget) had their slots in [t−budget, t+window−budget), a
// window of length window, so at most n arrive in any window shortened by
// budget. Comparing MaxArrivalsInWindow(time.Second, budget) with the
// contract is therefore the dispatcher's promise with an explicit
// allowance for late arrivals; with budget 0 it is the provider's own
// 1 s window over every request it saw.
func (s *faultState) MaxArrivalsInWindow(window, budget time.Duration) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return localenv.MostInWindow(s.arrivals, window-budget)
}

// verdict is what the injected faults and the contract decided.
type verdict struct {
	hold       bool          // never answer
	withhold   bool          // accept (status is 0), then never answer
	status     int           // 0: accept; else fail with it
	limited    bool          // a rate limit (status 429 for HTTP)
	retryAfter string        // for a rate limit
	contract   bool          // the rate limit is the contract's (WithContract), not RateLimitFor's
	why        string        // a reason for the answer's text
	latency    time.Duration // delay the answer
}

// decide applies the faults and the contract to a request arriving at now
// and records the arrival (every fake calls it once per request that passed
// its protocol checks). s.mu is held.
func (s *faultState) decide(now time.Time) verdict {
	s.arrivals = append(s.arrivals, now)
	var v verdict
	if now.Before(s.slowUntil) {
		v.latency = s.latency
	}
	switch {
	case now.Before(s.hangUntil):
		v.hold = true
	case now.Before(s.acceptHang):
		v.withhold = true
	case s.failNext > 0:
		s.failNext--
		v.status, v.why = s.failNextStatus, "injected "+strconv.Itoa(s.failNextStatus)+" by the testenv fake"
	case now.Before(s.failUntil):
		v.status, v.why = s.failStatus, "injected "+strconv.Itoa(s.failStatus)+" by the testenv fake"
	case now.Before(s.limitUntil):
		v.status, v.limited, v.retryAfter, v.why = http.StatusTooManyRequests, true, s.limitAfter, "rate limited by the testenv fake"
	case localenv.ContractWait(s.acceptedAt, s.contract, now) > 0:
		wait := localenv.ContractWait(s.acceptedAt, s.contract, now)
		secs := int64((wait + time.Second - 1) / time.Second)
		v.status, v.limited, v.retryAfter = http.StatusTooManyRequests, true, strconv.FormatInt(secs, 10)
		v.contract, v.why = true, "contract of "+strconv.Itoa(s.contract)+" per second exceeded"
	}
	return v
}

// delayAnswer carries out a fake's decision to hold a request (never
// answered: the connection is cut when the client gives up or the fake
// closes; HangFor and AcceptThenHang) or to answer it after latency. A
// handler calls it after recording the request, with the mutex released.
func delayAnswer(r *http.Request, closing <-chan struct{}, hold bool, latency time.Duration) {
	if hold {
		select {
		case <-r.Context().Done():
		case <-closing:
		}
		panic(http.ErrAbortHandler) // cut the connection without an answer
	}
	if latency <= 0 {
		return
	}
	timer := time.NewTimer(latency)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-r.Context().Done():
		panic(http.ErrAbortHandler)
	case <-closing:
		panic(http.ErrAbortHandler)
	}
}

// ServiceRequest is one request an HTTP service fake (Twilio, FCM, APNs)
// received, whatever it answered.
type ServiceRequest struct {
	At     time.Time   // arrival, by the fake's clock
	Method string      // HTTP method
	Path   string      // URL path
	Proto  string      // "HTTP/1.1" or "HTTP/2.0"
	Header http.Header // request headers
	Body   []byte      // request body (at most 1 MiB is read)
	// Status is the answer's status; 0 for a request held by HangFor. A
	// request accepted by AcceptThenHang has the status of its acceptance,
	// though the answer was never sent.
	Status int
}

// answered is a request a fake keeps (FakeRequest, ServiceRequest): its
// status is the answer's, 0 for a request held by HangFor.
type answered interface{ status() int }

func (r FakeRequest) status() int    { return r.Status }
func (r ServiceRequest) status() int { return r.Status }

// countStatus counts the requests answered with status.
func countStatus[R answered](requests []R, status int) int {
	n := 0
	for _, r := range requests {
		if r.status() == status {
			n++
		}
	}
	return n
}

// fakeReply is an HTTP answer of a service fake.
type fakeReply struct {
	status int
	header http.Header
	body   string
}

// service is what one HTTP service fake adds to httpFake. Its methods are
// called with the faultState's mutex held.
type service interface {
	// check applies the service's protocol rules (auth, path, content type,
	// fields, recipient format); nil lets the request through.
	check(r *http.Request, body []byte, now time.Time) *fakeReply
	// refuse is the service's answer to a request the faults or the
	// contract refused with v.status, in its error format.
	refuse(v verdict) fakeReply
	// accept records an accepted request and answers it.
	accept(r *http.Request, body []byte, now time.Time) fakeReply
}

// httpFake serves one service fake: protocol checks, then HangFor,
// AcceptThenHang, FailNext, FailFor, RateLimitFor and the contract, then
// acceptance.
type httpFake struct {
	*faultState
	srv      *httptest.Server
	svc      service
	closing  chan struct{}
	once     sync.Once
	requests []ServiceRequest
}

func newHTTPFake(fs *faultState, svc service) *httpFake {
	return &httpFake{faultState: fs, svc: svc, closing: make(chan struct{})}
}

// Close stops the server: held and slow requests are cut off, later
// requests are refused. Safe to call more than once.
func (f *httpFake) Close() {
	f.once.Do(func() {
		close(f.closing)
		f.srv.Close()
	})
}

// Requests returns every request received so far, in order of arrival.
// The slice is the caller's; headers and bodies must not be modified.
func (f *httpFake) Requests() []ServiceRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]ServiceRequest(nil), f.requests...)
}

// Count returns how many requests were answered with status (0 counts the
// requests held by HangFor).
func (f *httpFake) Count(status int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return countStatus(f.requests, status)
}

func (f *httpFake) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, localenv.MaxProviderBody+1))
	f.mu.Lock()
	now := f.now()
	rec := ServiceRequest{At: now, Method: r.Method, Path: r.URL.Path, Proto: r.Proto, Header: r.Header.Clone(), Body: body}
	var reply fakeReply
	v := verdict{}
	if bad := f.svc.check(r, body, now); bad != nil {
		reply = *bad
	} else if v = f.decide(now); !v.hold {
		switch {
		case v.status != 0:
			reply = f.svc.refuse(v)
			if v.limited && v.retryAfter != "" {
				if reply.header == nil {
					reply.header = http.Header{}
				}
				reply.header.Set("Retry-After", v.retryAfter)
			}
		default:
			reply = f.svc.accept(r, body, now)
			f.acceptedAt = append(f.acceptedAt, now)
		}
	}
	if !v.hold {
		rec.Status = reply.status
	}
	f.requests = append(f.requests, rec)
	f.mu.Unlock()

	delayAnswer(r, f.closing, v.hold || v.withhold, v.latency)
	for k, vs := range reply.header {
		w.Header()[k] = vs
	}
	w.WriteHeader(reply.status)
	_, _ = io.WriteString(w, reply.body)
}

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func jsonReply(status int, v any) fakeReply {
	b, _ := json.Marshal(v)
	return fakeReply{status: status, header: http.Header{"Content-Type": {"application/json"}}, body: string(b) + "\n"}
}

// TwilioMessage is one message the Twilio fake accepted.
type TwilioMessage struct {
	At                  time.Time
	SID                 string // the message SID the fake assigned, SM…
	To                  string
	From                string // "" when sent through a Messaging Service
	MessagingServiceSID string
	Body                string
	// ValidityPeriod is the ValidityPeriod form field, in seconds; 0 when
	// the request had none (Twilio's default, 36,000).
	ValidityPeriod int
	// StatusCallback is the URL Twilio would post the message's status
	// changes to ("" for none); Deliver posts there.
	StatusCallback string
}

// TwilioFake is a fake of the Twilio Programmable Messaging API: it
// answers `POST /2010-04-01/Accounts/{AccountSid}/Messages.json` as Twilio
// does, checking what Twilio checks, in this order:
//
//   - the path and method (404 code 20404, 405 code 20004);
//   - HTTP basic auth: user = the account SID of the path, password = the
//     auth token (401 code 20003);
//   - Content-Type application/x-www-form-urlencoded (400 code 20001);
//   - To present (21604) and E.164 (21211); From or a MessagingServiceSid
//     (MG + 32 hex, 21701) present (21603), From being an E.164 number, a
//     short code (5-6 digits) or an alphanumeric sender id (1-11 of A-Z a-z
//     0-9 space + - _ &, at least one letter; 21212); Body present (21602)
//     and at most 1600 characters (21617); ValidityPeriod, when present, an
//     integer from 1 to 36000 (21624); StatusCallback, when present, an
//     absolute http or https URL of at most 4000 characters (21609);
//   - a number refused with RefuseNumber (400 with its code).
//
// Then HangFor, AcceptThenHang, FailNext, FailFor, RateLimitFor and the contract (429 with
// code 20429 and Retry-After), then 201 with the message resource (status
// "queued"). Errors are Twilio's JSON: {"code":21211,"message":"…",
// "more_info":"https://www.twilio.com/docs/errors/21211","status":400}.
// Its methods are safe for concurrent use.
//
// Every request that reaches HangFor is an arrival (Arrivals,
// MaxArrivalsInWindow), whatever it is answered; MaxInWindow counts only
// the accepted ones. An injected status carries Twilio's code for it (401
// 20003 authentication error, 429 20429, 500 20500, 503 20503…).
//
// Deliver and DeliverMessage post the status callbacks of the accepted
// messages that asked for one, signed with the auth token.
type TwilioFake struct {
	*httpFake
	sid, token string
	refused    map[string]int
	messages   []TwilioMessage
	client     *http.Client // posts the status callbacks
}

// FakeTwilio starts a Twilio fake on a loopback port (plain HTTP) with a
// fresh account SID and auth token, and closes it when the test ends. It
// takes WithContract and WithClock.
func FakeTwilio(t testing.TB, opts ...FakeOption) *TwilioFake {
	t.Helper()
	f := &TwilioFake{sid: "AC" + randomHex(16), token: randomHex(16), refused: map[string]int{},
		client: &http.Client{Timeout: 10 * time.Second}}
	f.httpFake = newHTTPFake(newFaultState(t, opts), f)
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	t.Cleanup(f.client.CloseIdleConnections)
	return f
}

// Deliver posts a status callback, as Twilio does when a message's status
// changes, for every accepted message that asked for one (StatusCallback),
// in order of acceptance: MessageStatus status ("sent", "delivered",
// "undelivered", "failed"…) and, when errorCode is not 0, ErrorCode. Each
// is a form POST to the message's StatusCallback URL signed as Twilio signs
// them (X-Twilio-Signature: the base64 HMAC-SHA1, keyed with AuthToken, of
// the URL followed by the form's names and values in name order). It
// returns how many it posted and the first failure: a POST that failed or
// was answered other than 2xx. Deliver may be called again: Twilio too
// posts every change.
func (f *TwilioFake) Deliver(status string, errorCode int) (int, error) {
	f.mu.Lock()
	msgs := append([]TwilioMessage(nil), f.messages...)
	f.mu.Unlock()
	n := 0
	for _, m := range msgs {
		if m.StatusCallback == "" {
			continue
		}
		if err := f.callback(m, status, errorCode); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// DeliverMessage posts one status callback, as Deliver does, for the
// accepted message whose SID is sid.
func (f *TwilioFake) DeliverMessage(sid, status string, errorCode int) error {
	f.mu.Lock()
	i := slices.IndexFunc(f.messages, func(m TwilioMessage) bool { return m.SID == sid })
	var m TwilioMessage
	if i >= 0 {
		m = f.messages[i]
	}
	f.mu.Unlock()
	switch {
	case i < 0:
		return fmt.Errorf("testenv: twilio fake: no accepted message %s", sid)
	case m.StatusCallback == "":
		return fmt.Errorf("testenv: twilio fake: message %s asked for no status callback", sid)
	}
	return f.callback(m, status, errorCode)
}

// callback posts m's status callback.
func (f *TwilioFake) callback(m TwilioMessage, status string, errorCode int) error {
	form := url.Values{"MessageSid": {m.SID}, "SmsSid": {m.SID}, "AccountSid": {f.sid}, "To": {m.To},
		"MessageStatus": {status}, "SmsStatus": {status}, "ApiVersion": {"2010-04-01"}}
	if m.From != "" {
		form.Set("From", m.From)
	}
	if m.MessagingServiceSID != "" {
		form.Set("MessagingServiceSid", m.MessagingServiceSID)
	}
	if errorCode != 0 {
		form.Set("ErrorCode", strconv.Itoa(errorCode))
	}
	req, err := http.NewRequest(http.MethodPost, m.StatusCallback, strings.NewReader(form.Encode()))
	if err != nil {
		return fmt.Errorf("testenv: twilio fake: status callback of %s: %w", m.SID, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Twilio-Signature", TwilioSignature(f.token, m.StatusCallback, form))
	resp, err := f.client.Do(req)
	if err != nil {
		return fmt.Errorf("testenv: twilio fake: status callback of %s: %w", m.SID, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("testenv: twilio fake: status callback of %s answered %s", m.SID, resp.Status)
	}
	return nil
}

// TwilioSignature is the X-Twilio-Signature Twilio sends with a request to
// fullURL (query string included) whose POST form is params: the base64
// HMAC-SHA1, keyed with authToken, of fullURL followed by each param's
// name and value, sorted by name (a name's values sorted too).
func TwilioSignature(authToken, fullURL string, params url.Values) string {
	names := make([]string, 0, len(params))
	for name := range params {
		names = append(names, name)
	}
	sort.Strings(names)
	data := fullURL
	for _, name := range names {
		values := append([]string(nil), params[name]...)
		sort.Strings(values)
		for _, v := range values {
			data += name + v
		}
	}
	mac := hmac.New(sha1.New, []byte(authToken))
	mac.Write([]byte(data))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// URL is the API base URL, http://127.0.0.1:<port> (the twilio kind's url).
func (f *TwilioFake) URL() string { return f.srv.URL }

// AccountSID is the account the fake serves, AC…
func (f *TwilioFake) AccountSID() string { return f.sid }

// AuthToken is the account's auth token.
func (f *TwilioFake) AuthToken() string { return f.token }

// RefuseNumber makes every message to the number to answer 400 with the
// Twilio error code (21211 invalid number, 21610 unsubscribed recipient,
// 21614 not a mobile number…).
func (f *TwilioFake) RefuseNumber(to string, code int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refused[to] = code
}

// Messages returns the accepted messages in order of acceptance.
func (f *TwilioFake) Messages() []TwilioMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]TwilioMessage(nil), f.messages...)
}

var (
	twilioPathRE  = regexp.MustCompile(`^/2010-04-01/Accounts/([^/]+)/Messages\.json$`)
	fakeE164RE    = regexp.MustCompile(`^\+[1-9][0-9]{6,14}$`)
	twilioMGRE    = regexp.MustCompile(`^MG[0-9a-fA-F]{32}$`)
	twilioShortRE = regexp.MustCompile(`^[0-9]{5,6}$`)
	twilioAlphaRE = regexp.MustCompile(`^[A-Za-z0-9 +\-_&]{1,11}$`)
	letterRE      = regexp.MustCompile(`[A-Za-z]`)
)

// twilioFrom reports whether Twilio takes from as a From: an E.164 number,
// a short code or an alphanumeric sender id.
func twilioFrom(from string) bool {
	return fakeE164RE.MatchString(from) || twilioShortRE.MatchString(from) ||
		twilioAlphaRE.MatchString(from) && letterRE.MatchString(from)
}

// validCallback reports whether Twilio takes u as a StatusCallback.
func validCallback(u string) bool {
	p, err := url.Parse(u)
	return err == nil && len(u) <= 4000 && (p.Scheme == "http" || p.Scheme == "https") && p.Host != "" &&
		!strings.Contains(p.Hostname(), "_")
}

func twilioError(status, code int, message string) fakeReply {
	return jsonReply(status, map[string]any{
		"code": code, "message": message, "status": status,
		"more_info": "https://www.twilio.com/docs/errors/" + strconv.Itoa(code),
	})
}

func (f *TwilioFake) check(r *http.Request, body []byte, _ time.Time) *fakeReply {
	fail := func(status, code int, message string) *fakeReply {
		reply := twilioError(status, code, message)
		return &reply
	}
	m := twilioPathRE.FindStringSubmatch(r.URL.Path)
	switch {
	case m == nil:
		return fail(404, 20404, "The requested resource "+r.URL.Path+" was not found")
	case r.Method != http.MethodPost:
		return fail(405, 20004, "Method not allowed")
	}
	user, pass, ok := r.BasicAuth()
	switch {
	case !ok:
		return fail(401, 20003, "Authentication Error - No credentials provided")
	case user != f.sid || m[1] != f.sid:
		return fail(401, 20003, "Authentication Error - invalid username")
	case pass != f.token:
		return fail(401, 20003, "Authentication Error - invalid password")
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/x-www-form-urlencoded" {
		return fail(400, 20001, "Content-Type must be application/x-www-form-urlencoded")
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return fail(400, 20001, "Unable to parse the request body")
	}
	to, from, service, text := form.Get("To"), form.Get("From"), form.Get("MessagingServiceSid"), form.Get("Body")
	switch {
	case to == "":
		return fail(400, 21604, "A 'To' phone number is required.")
	case !fakeE164RE.MatchString(to):
		return fail(400, 21211, "The 'To' number "+to+" is not a valid phone number.")
	case from == "" && service == "":
		return fail(400, 21603, "A 'From' phone number is required.")
	case service != "" && !twilioMGRE.MatchString(service):
		return fail(400, 21701, "The Messaging Service Sid "+service+" is invalid.")
	case service == "" && !twilioFrom(from):
		return fail(400, 21212, "The 'From' number "+from+" is not a valid phone number, shortcode, or alphanumeric sender ID.")
	case text == "":
		return fail(400, 21602, "Message body is required.")
	case utf8.RuneCountInString(text) > 1600:
		return fail(400, 21617, "The concatenated message body exceeds the 1600 character limit.")
	}
	if v, ok := form["ValidityPeriod"]; ok {
		if n, err := strconv.Atoi(v[0]); err != nil || n < 1 || n > 36000 {
			return fail(400, 21624, "Validity period can only be set to integers between 1 and 36,000 seconds.")
		}
	}
	if cb, ok := form["StatusCallback"]; ok && !validCallback(cb[0]) {
		return fail(400, 21609, "The StatusCallback URL "+cb[0]+" is not a valid URL.")
	}
	if code, ok := f.refused[to]; ok {
		return fail(400, code, fmt.Sprintf("Message to %s refused (Twilio error %d).", to, code))
	}
	return nil
}

// twilioCodes are the error codes of injected statuses.
var twilioCodes = map[int]int{400: 21211, 401: 20003, 404: 20404, 429: 20429, 500: 20500, 503: 20503}

func (f *TwilioFake) refuse(v verdict) fakeReply {
	status, why := v.status, v.why
	code, ok := twilioCodes[status]
	if !ok {
		code = 20001
	}
	if status == 429 {
		why = "Too Many Requests: " + why
	}
	return twilioError(status, code, why)
}

func (f *TwilioFake) accept(r *http.Request, body []byte, now time.Time) fakeReply {
	form, _ := url.ParseQuery(string(body))
	msg := TwilioMessage{At: now, SID: "SM" + randomHex(16), To: form.Get("To"), Body: form.Get("Body"),
		MessagingServiceSID: form.Get("MessagingServiceSid"), StatusCallback: form.Get("StatusCallback")}
	msg.ValidityPeriod, _ = strconv.Atoi(form.Get("ValidityPeriod"))
	if msg.MessagingServiceSID == "" {
		msg.From = form.Get("From")
	}
	f.messages = append(f.messages, msg)
	return jsonReply(http.StatusCreated, map[string]any{
		"sid": msg.SID, "account_sid": f.sid, "to": msg.To, "from": nullable(msg.From), "body": msg.Body,
		"messaging_service_sid": nullable(msg.MessagingServiceSID), "status": "queued", "api_version": "2010-04-01",
		"date_created": now.UTC().Format(time.RFC1123Z), "direction": "outbound-api",
		"uri": strings.TrimSuffix(r.URL.Path, ".json") + "/" + msg.SID + ".json",
	})
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
