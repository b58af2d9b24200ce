package providers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Twilio error codes the twilio kind treats specially. Any other code in a
// 4xx answer is a permanent refusal and is named in the error detail.
const (
	// TwilioTooManyRequests (20429) is a rate limit, whatever the status.
	TwilioTooManyRequests = 20429
	// TwilioInvalidNumber (21211): the To number is not a valid phone number.
	TwilioInvalidNumber = 21211
	// TwilioUnsubscribed (21610): the recipient replied STOP.
	TwilioUnsubscribed = 21610
	// TwilioNotMobile (21614): the To number is not a valid mobile number
	// (a landline, or an invalid number).
	TwilioNotMobile = 21614
	// TwilioAuthenticationError (20003, with a 401): the account SID or the
	// auth token was refused. ErrSender.
	TwilioAuthenticationError = 20003
	// TwilioBodyTooLong (21617): the body is over TwilioMaxBody characters.
	TwilioBodyTooLong = 21617
)

// Twilio's limits.
const (
	// TwilioMaxBody is the longest body Twilio takes, in characters (its
	// error 21617). Send refuses a longer one without a request.
	TwilioMaxBody = 1600
	// TwilioMaxValidityPeriod is the longest ValidityPeriod Twilio takes
	// (and its default): 36,000 s, 10 hours (its error 21624 outside 1 s to
	// that).
	TwilioMaxValidityPeriod = 36000 * time.Second
)

// twilioGoneCodes are the Twilio error codes that name the recipient as
// dead: ErrPermanent with RecipientGone.
var twilioGoneCodes = map[int]bool{
	TwilioInvalidNumber: true, // 21211 Invalid 'To' Phone Number
	TwilioUnsubscribed:  true, // 21610 Attempt to send to unsubscribed recipient (it replied STOP)
	TwilioNotMobile:     true, // 21614 'To' number is not a valid mobile number
}

// twilioSenderCodes are the Twilio error codes that refuse the account or
// the sender whatever the message: the twilio kind answers them with
// ErrSender. Codes whose cause may be the destination (21606 "not a valid
// message-capable Twilio phone number for this destination/account", 21659
// "short code country mismatch", 21408 "permission to send to this region")
// stay ErrPermanent: as ErrSender, one job to a far country would stop the
// provider for everyone.
var twilioSenderCodes = map[int]bool{
	10001: true, // Account is not active (suspended, no funds)
	20003: true, // Authentication Error: the account SID or auth token was refused
	20005: true, // Account not active
	21212: true, // Invalid From number: not a phone number, short code or alphanumeric sender id Twilio takes, or on a do-not-originate list
	21601: true, // From is not an SMS-capable number of the account
	21661: true, // From number is not SMS-capable
	21701: true, // The Messaging Service does not exist in the account
	21705: true, // The Messaging Service is invalid
}

// Twilio is the twilio provider (SPEC §7): each Send is one
// `POST {url}/2010-04-01/Accounts/{account_sid}/Messages.json` of the
// Programmable Messaging API with the form fields To, From (or
// MessagingServiceSid) and Body, authenticated with HTTP basic auth
// (account_sid : the auth token read from credentials_env). A message with
// an expiry adds ValidityPeriod: the whole seconds left until it, by the
// provider's clock, within Twilio's 1 s to TwilioMaxValidityPeriod (a job
// already expired still gets 1 s: dropping it is the dispatcher's call).
// A body over TwilioMaxBody characters is ErrPermanent without a request.
// With status_callback_url set, each message asks Twilio to post its
// delivery status to <status_callback_url>?provider=<name>&job=<job id>,
// which Registry.TwilioCallbacks serves.
//
// A 2xx (Twilio answers 201) is accepted. 429, and any answer carrying
// Twilio error code 20429, is a *RateLimitedError honouring Retry-After. 408
// and 5xx are ErrTransient. A 401, and the codes that refuse the account or
// the sender whatever the message (20003 authentication, 20005 and 10001
// account not active, 21212 invalid From, 21601 and 21661 From not
// SMS-capable, 21701 and 21705 Messaging Service), are ErrSender. Any other
// 4xx is ErrPermanent, with Twilio's error code and message in the detail
// ("Twilio error 21211: The 'To' number ••• is not a valid phone number."),
// and with RecipientGone for 21211 (invalid number), 21610 (the recipient
// replied STOP) and 21614 (not a mobile number). Timeouts and
// connection errors are ErrTransient, Ambiguous once the request was
// written whole (Twilio's Messages API has no idempotency key: the message
// may have been created).
//
// A Twilio is safe for concurrent use; its connections are pooled and kept
// alive until Close.
type Twilio struct {
	httpBase
	endpoint string
	from     string
	service  string
	auth     *credential // the auth token
	sid      string
	callback string // status_callback_url, "" for none
}

var _ Provider = (*Twilio)(nil)

// twilioKind is the twilio entry of kinds.
var twilioKind = kind{
	name:    "twilio",
	channel: "sms",
	keys: []string{"url", "credentials_env", "tls_ca_file", "account_sid", "from", "messaging_service_sid",
		"status_callback_url"},
	defaults: urlDefault(defaultTwilioURL),
	validate: validateTwilio,
	build:    builder(newTwilio),
}

// defaultTwilioURL is the default url of kind twilio.
const defaultTwilioURL = "https://api.twilio.com"

var (
	e164RE = regexp.MustCompile(`^\+[1-9][0-9]{6,14}$`)
	// Twilio's other senders: a short code, an alphanumeric sender id (one
	// letter at least, checked apart) and a Messaging Service SID.
	shortCodeRE   = regexp.MustCompile(`^[0-9]{5,6}$`)
	alphaSenderRE = regexp.MustCompile(`^[A-Za-z0-9 +\-_&]{1,11}$`)
	letterRE      = regexp.MustCompile(`[A-Za-z]`)
	serviceSIDRE  = regexp.MustCompile(`^MG[0-9a-fA-F]{32}$`)
)

// validateTwilio checks a twilio entry's own keys.
func validateTwilio(c Config, p *problems) {
	p.requiredURL(c.URL)
	p.required("account_sid", c.AccountSID)
	p.required("credentials_env", c.CredentialsEnv)
	switch {
	case c.From == "" && c.MessagingServiceSID == "":
		p.add("from", "required for kind twilio unless messaging_service_sid is set")
	case c.From != "" && !twilioSender(c.From):
		p.add("from", "must be an E.164 phone number (+ and 7-15 digits), a short code (5-6 digits) or an alphanumeric "+
			"sender id (1-11 of A-Z a-z 0-9 space + - _ &, at least one letter), got %q", c.From)
	}
	if c.MessagingServiceSID != "" && !serviceSIDRE.MatchString(c.MessagingServiceSID) {
		p.add("messaging_service_sid", "must be MG and 32 hex digits, got %q", c.MessagingServiceSID)
	}
	if c.StatusCallbackURL != "" {
		if problem := callbackURLProblem(c.StatusCallbackURL); problem != "" {
			p.add("status_callback_url", "%s, got %q", problem, c.StatusCallbackURL)
		}
	}
}

// maxCallbackURL is the longest status_callback_url: Twilio takes 4000
// characters, the provider and job query comes on top.
const maxCallbackURL = 2000

// callbackURLProblem is what is wrong with a status_callback_url, or "".
func callbackURLProblem(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return "must be an absolute http(s) URL"
	case u.RawQuery != "" || u.ForceQuery:
		return "must not have a query string (the provider and job are added to it)"
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return "must not have a fragment"
	case u.User != nil:
		return "must not carry a user or password"
	case strings.Contains(u.Hostname(), "_"):
		return "must not have an underscore in its host name (Twilio refuses it)"
	case len(raw) > maxCallbackURL:
		return fmt.Sprintf("must be at most %d characters", maxCallbackURL)
	}
	return ""
}

// twilioSender reports whether from is a sender Twilio takes in From: an
// E.164 number, a short code (5-6 digits) or an alphanumeric sender id
// (1-11 characters of A-Z a-z 0-9, space, + - _ and &, at least one
// letter).
func twilioSender(from string) bool {
	return e164RE.MatchString(from) || shortCodeRE.MatchString(from) ||
		alphaSenderRE.MatchString(from) && letterRE.MatchString(from)
}

// NewTwilio builds a twilio provider from a kind twilio entry, reading the
// auth token from credentials_env through opts.Getenv.
func NewTwilio(cfg Config, opts Options) (*Twilio, error) {
	return newChecked(cfg, opts, "twilio", "twilio", newTwilio)
}

// newTwilio is NewTwilio for an entry already checked (kind twilio,
// defaults applied, valid): NewRegistry checks every entry first.
func newTwilio(cfg Config, opts Options) (*Twilio, error) {
	opts = opts.withDefaults()
	token, err := lookupSecret(opts, cfg.CredentialsEnv)
	if err != nil {
		return nil, fmt.Errorf("new twilio %s: credentials_env: %w", cfg.Name, err)
	}
	base, err := newHTTPBase(cfg, opts, false)
	if err != nil {
		return nil, fmt.Errorf("new twilio %s: %w", cfg.Name, err)
	}
	return &Twilio{
		httpBase: base,
		endpoint: trimSlash(cfg.URL) + "/2010-04-01/Accounts/" + url.PathEscape(cfg.AccountSID) + "/Messages.json",
		from:     cfg.From,
		service:  cfg.MessagingServiceSID,
		auth:     &credential{token},
		sid:      cfg.AccountSID,
		callback: cfg.StatusCallbackURL,
	}, nil
}

// Name returns the configured name.
func (t *Twilio) Name() string { return t.name }

// String describes the provider without its secret.
func (t *Twilio) String() string { return "twilio " + t.name }

// Close releases the provider's idle connections. Send still works after
// Close, opening new connections.
func (t *Twilio) Close() error {
	t.closeIdle()
	return nil
}

// Send creates one Twilio message for m. With messaging_service_sid set it
// sends through the Messaging Service (which picks the sender) rather than
// from the From number.
func (t *Twilio) Send(ctx context.Context, m *Message) error {
	authorization := basicAuth(t.sid, t.auth.value)
	s := newScrubber(m, t.auth.value, authorization)
	if m == nil {
		return &Error{Provider: t.name, Class: ErrPermanent, Detail: "nil message"}
	}
	if n := utf8.RuneCountInString(m.Body); n > TwilioMaxBody {
		return &Error{Provider: t.name, Class: ErrPermanent,
			Detail: fmt.Sprintf("body of %d characters is over Twilio's limit of %d (Twilio error %d), not sent", n, TwilioMaxBody, TwilioBodyTooLong)}
	}
	form := url.Values{"To": {m.To}, "Body": {m.Body}}
	if t.service != "" {
		form.Set("MessagingServiceSid", t.service)
	} else {
		form.Set("From", t.from)
	}
	if !m.ExpiresAt.IsZero() {
		form.Set("ValidityPeriod", strconv.Itoa(twilioValidity(m.ExpiresAt.Sub(t.now()))))
	}
	if t.callback != "" {
		// The job's key (<tenant>/<id>, the id alone for the default
		// tenant): a job id is unique only within its tenant.
		form.Set("StatusCallback", t.callback+"?provider="+url.QueryEscape(t.name)+"&job="+url.QueryEscape(m.key()))
	}
	header := http.Header{}
	header.Set("Content-Type", "application/x-www-form-urlencoded")
	header.Set("Accept", "application/json")
	header.Set("Authorization", authorization)
	return t.post(ctx, t.endpoint, header, []byte(form.Encode()), s, readTwilioAnswer)
}

// twilioValidity is the ValidityPeriod, in seconds, of a message with left
// until its expiry: the whole seconds left, within 1 and
// TwilioMaxValidityPeriod.
func twilioValidity(left time.Duration) int {
	return int(min(max(left, time.Second), TwilioMaxValidityPeriod) / time.Second)
}

// twilioError is the body of a Twilio API error.
type twilioError struct {
	Code    json.Number `json:"code"`
	Message string      `json:"message"`
}

// readTwilioAnswer reads Twilio's error body: {"code": 21211, "message":
// "...", "more_info": "...", "status": 400}. A body that is not that shape
// gives way to the generic reason and the status's class; a 401 is
// ErrSender whatever its body (Twilio's credentials refused).
func readTwilioAnswer(status int, body []byte) answer {
	a := answer{reason: responseReason(body)}
	var e twilioError
	if json.Unmarshal(body, &e) == nil && e.Code != "" {
		if code, err := strconv.Atoi(string(e.Code)); err == nil {
			a.reason = "Twilio error " + strconv.Itoa(code)
			if e.Message != "" {
				a.reason += ": " + e.Message
			}
			switch {
			case code == TwilioTooManyRequests:
				a.class = ErrRateLimited
			case twilioSenderCodes[code] && status >= 400 && status <= 499:
				a.class = ErrSender
			case twilioGoneCodes[code] && status >= 400 && status <= 499:
				a.gone = true
			}
		}
	}
	if status == http.StatusUnauthorized && a.class == nil {
		a.class = ErrSender
	}
	return a
}
