package providers

import (
	"strings"
	"testing"

	"github.com/notifier/notifier/queue"
)

// TestScrubProviderErrorCorpus: error answers in the formats of real
// providers, quoting the recipient in another form than it was sent (spaces
// in a phone number, an address in other case) or part of the message,
// keep the provider's code and reason and lose every trace of the
// recipient and the body (issue: "recipients leak through provider error
// text").
func TestScrubProviderErrorCorpus(t *testing.T) {
	sms := &Message{Job: queue.Job{Channel: "sms", To: "+447700900777", Body: "Your verification code for Example Bank is 482913. Never share it."}}
	email := &Message{Job: queue.Job{Channel: "email", To: "alice.smith@example.com", Title: "Your statement is ready", Body: "Dear Alice, your monthly statement for account ending 4411 is ready."}}
	push := &Message{Job: queue.Job{Channel: "push", To: "f3a9c0d1e2b34a5f6c7d8e9fa0b1c2d3", Title: "Parcel out for delivery", Body: "Your parcel from Example Shop arrives today between 10:00 and 12:00."}}
	for _, tc := range []struct {
		name   string
		m      *Message
		status int
		body   string
		keep   []string // the provider's own words that must stay
		leak   []string // what must not appear (any case)
	}{
		{"twilio 21211, spaced number", sms, 400,
			`{"code": 21211, "message": "The 'To' number +44 7700 900777 is not a valid phone number.", "more_info": "https://www.twilio.com/docs/errors/21211", "status": 400}`,
			[]string{"The 'To' number", "is not a valid phone number"}, []string{"7700 900777", "900777", "+44 7700"}},
		{"twilio, number in parentheses and dashes", sms, 400,
			`{"code": 21614, "message": "To number: (+44) 7700-900-777, is not a mobile number", "status": 400}`,
			[]string{"is not a mobile number"}, []string{"7700-900-777", "900-777"}},
		{"twilio, body quoted", sms, 400,
			`{"code": 30007, "message": "Message filtered: 'Your verification code for Example Bank' flagged", "status": 400}`,
			[]string{"Message filtered", "flagged"}, []string{"verification code for example bank"}},
		{"sendgrid, address in other case", email, 400,
			`{"errors":[{"message":"The to email Alice.Smith@Example.COM does not contain a valid address.","field":"personalizations.0.to.0.email"}]}`,
			[]string{"The to email", "does not contain a valid address"}, []string{"alice.smith@example.com"}},
		{"ses, address in a sentence", email, 400,
			"Email address is not verified. The following identities failed the check in region US-EAST-1: ALICE.SMITH@EXAMPLE.COM, bob@example.org",
			[]string{"Email address is not verified", "US-EAST-1"}, []string{"alice.smith@example.com", "bob@example.org"}},
		{"ses, body stretch quoted", email, 400,
			`Message rejected: content "your monthly statement for account ending 4411" matched a spam rule`,
			[]string{"Message rejected", "matched a spam rule"}, []string{"monthly statement for account", "4411 is"}},
		{"fcm, token quoted", push, 404,
			`{"error": {"code": 404, "message": "Requested entity was not found: f3a9c0d1e2b34a5f6c7d8e9fa0b1c2d3", "status": "NOT_FOUND", "details": [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": "UNREGISTERED"}]}}`,
			[]string{"Requested entity was not found"}, []string{"f3a9c0d1e2b34a5f6c7d8e9fa0b1c2d3"}},
		{"apns, reason only", push, 400, `{"reason":"BadDeviceToken"}`, []string{"BadDeviceToken"}, nil},
		{"webhook, text body quoting title and body", push, 422,
			"rejected: title 'PARCEL OUT FOR DELIVERY' and text 'arrives today between 10:00 and 12:00' too long",
			[]string{"rejected", "too long"}, []string{"parcel out for delivery", "arrives today between"}},
		{"webhook, no-break spaces between the groups", sms, 400,
			"invalid destination +44\u00a07700\u00a0900777",
			[]string{"invalid destination"}, []string{"7700 900777", "900777"}},
		{"webhook, narrow no-break spaces and tabs", sms, 400,
			"invalid destination +44\u202f7700\t900777",
			[]string{"invalid destination"}, []string{"7700 900777", "900777"}},
		{"webhook, zero-width spaces and a Unicode hyphen", sms, 400,
			"invalid destination +44\u200b7700\u2010900\u200d777",
			[]string{"invalid destination"}, []string{"900", "777"}},
		{"webhook, another phone number entirely", sms, 400,
			"blocked destination 0044 (0) 7911 123456 on this account",
			[]string{"blocked destination", "on this account"}, []string{"7911 123456", "123456"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := reasonDetail(tc.status, responseReason([]byte(tc.body)), newScrubber(tc.m))
			for _, k := range tc.keep {
				if !strings.Contains(got, k) {
					t.Errorf("detail %q lost the provider's words %q", got, k)
				}
			}
			lower := strings.ToLower(got)
			for _, l := range tc.leak {
				if strings.Contains(lower, strings.ToLower(l)) {
					t.Errorf("detail %q leaks %q", got, l)
				}
			}
			t.Logf("%s", got)
		})
	}
}
