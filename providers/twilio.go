package providers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
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
)

// Twilio is the twilio provider (SPEC §7): each Send is one
// `POST {url}/2010-04-01/Accounts/{account_sid}/Messages.json` of the
// Programmable Messaging API with the form fields To, From (or
// MessagingServiceSid) and Body, authenticated with HTTP basic auth
// (account_sid : the auth token read from credentials_env).
//
// A 2xx (Twilio answers 201) is accepted. 429, and any answer carrying
// Twilio error code 20429, is a *RateLimitedError honouring Retry-After. 408
// and 5xx are ErrTransient. Any other 4xx is ErrPermanent, with Twilio's
// error code and message in the detail ("Twilio error 21211: The 'To'
// number ••• is not a valid phone number."): 21211 invalid number, 21610
// unsubscribed recipient, 20003 bad credentials. Timeouts and connection
// errors are ErrTransient.
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
}

var _ Provider = (*Twilio)(nil)

// NewTwilio builds a twilio provider from a kind twilio entry, reading the
// auth token from credentials_env through opts.Getenv.
func NewTwilio(cfg Config, opts Options) (*Twilio, error) {
	cfg = cfg.WithDefaults()
	if cfg.Kind != "twilio" {
		return nil, fmt.Errorf("new twilio %s: kind is %q, not twilio", cfg.Name, cfg.Kind)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new twilio %s: %w", cfg.Name, err)
	}
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
	form := url.Values{"To": {m.To}, "Body": {m.Body}}
	if t.service != "" {
		form.Set("MessagingServiceSid", t.service)
	} else {
		form.Set("From", t.from)
	}
	header := http.Header{}
	header.Set("Content-Type", "application/x-www-form-urlencoded")
	header.Set("Accept", "application/json")
	header.Set("Authorization", authorization)
	return t.post(ctx, t.endpoint, header, []byte(form.Encode()), s, readTwilioAnswer)
}

// twilioError is the body of a Twilio API error.
type twilioError struct {
	Code    json.Number `json:"code"`
	Message string      `json:"message"`
}

// readTwilioAnswer reads Twilio's error body: {"code": 21211, "message":
// "...", "more_info": "...", "status": 400}. A body that is not that shape
// gives way to the generic reason and the status's class.
func readTwilioAnswer(status int, body []byte) answer {
	var e twilioError
	if json.Unmarshal(body, &e) != nil || e.Code == "" {
		return answer{reason: responseReason(body)}
	}
	code, err := strconv.Atoi(string(e.Code))
	if err != nil {
		return answer{reason: responseReason(body)}
	}
	a := answer{reason: "Twilio error " + strconv.Itoa(code)}
	if e.Message != "" {
		a.reason += ": " + e.Message
	}
	if code == TwilioTooManyRequests {
		a.class = ErrRateLimited
	}
	return a
}
