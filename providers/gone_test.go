package providers_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/testenv"
)

// wantGone asserts err is a permanent refusal naming the recipient as dead
// (issue 28: the dispatcher puts such a recipient on its suppression list),
// and that it still matches ErrPermanent.
func wantGone(t *testing.T, what string, err error, gone bool) {
	t.Helper()
	var pe *providers.Error
	switch {
	case !errors.Is(err, providers.ErrPermanent):
		t.Errorf("%s: %v, want ErrPermanent", what, err)
	case errors.Is(err, providers.ErrRecipientGone) != gone || !errors.As(err, &pe) || pe.RecipientGone != gone:
		t.Errorf("%s: %v, recipient gone %v, want %v", what, err, errors.Is(err, providers.ErrRecipientGone), gone)
	}
}

// TestRecipientGoneAgainstFakes: each kind's answer that names the
// recipient as dead, as the provider's reference gives it and its fake
// answers it, matches ErrRecipientGone; the kind's other permanent refusals
// do not.
func TestRecipientGoneAgainstFakes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// Push: the device token unregistered is gone; a malformed one is not.
	for _, c := range []struct {
		kind       string
		start      func(t *testing.T) (p providers.Provider, unregister func(token string))
		message    func() *providers.Message
		gone       string // the answer to an unregistered token
		bad, badTo string // the answer to a malformed token, and the token
	}{
		{"apns", func(t *testing.T) (providers.Provider, func(string)) {
			fake := testenv.FakeAPNs(t)
			return apnsAgainst(t, fake, providers.Config{}, nil), fake.Unregister
		}, iosMessage,
			"410 Unregistered", // "The device token is no longer active for the topic."
			"400 BadDeviceToken", "not-hex"},
		{"fcm", func(t *testing.T) (providers.Provider, func(string)) {
			fake := testenv.FakeFCM(t)
			return newFCM(t, providers.Config{URL: fake.URL(), ProjectID: fake.ProjectID()}, fake.BearerToken(), providers.Options{}),
				fake.Unregister
		}, pushMessage,
			"UNREGISTERED", // 404: "remove this registration token from the app server"
			"INVALID_ARGUMENT", "short"},
	} {
		t.Run(c.kind, func(t *testing.T) {
			t.Parallel()
			p, unregister := c.start(t)
			m := c.message()
			unregister(m.To)
			wantGone(t, c.gone, p.Send(ctx, m), true)
			bad := c.message()
			bad.To = c.badTo
			wantGone(t, c.bad, p.Send(ctx, bad), false)
		})
	}
	t.Run("twilio", func(t *testing.T) {
		t.Parallel()
		fake := testenv.FakeTwilio(t)
		p := newTwilio(t, providers.Config{URL: fake.URL(), AccountSID: fake.AccountSID()}, fake.AuthToken())
		for i, c := range []struct {
			code int
			gone bool
		}{
			{providers.TwilioUnsubscribed, true},  // 21610 the number replied STOP
			{providers.TwilioInvalidNumber, true}, // 21211 not a valid phone number
			{providers.TwilioNotMobile, true},     // 21614 not a valid mobile number
			{21408, false},                        // no permission to send to this region: the account's
		} {
			m := smsMessage()
			m.To = "+4477009001" + string(rune('0'+i)) + "0"
			fake.RefuseNumber(m.To, c.code)
			err := p.Send(ctx, m)
			wantGone(t, "Twilio error "+itoa(c.code), err, c.gone)
			if !strings.Contains(err.Error(), itoa(c.code)) {
				t.Errorf("%v does not name Twilio's code %d", err, c.code)
			}
		}
	})
	t.Run("smtp", func(t *testing.T) {
		t.Parallel()
		fake := testenv.FakeSMTP(t)
		p := smtpAgainst(t, fake, 0)
		m := emailMessage()
		fake.Reject(m.To, 550) // 550 5.1.1: RFC 3463 "The mailbox specified in the address does not exist"
		wantGone(t, "550 5.1.1", p.Send(ctx, m), true)
		other := emailMessage()
		other.To = "someone-else@example.org"
		fake.FailNext(1, 554) // the mail refused at the end of DATA: the message's, not the mailbox's
		wantGone(t, "554 after DATA", p.Send(ctx, other), false)
	})
	t.Run("webhook", func(t *testing.T) {
		t.Parallel()
		fake := testenv.FakeProvider(t)
		p := newWebhook(t, fake.URL(), 0)
		fake.FailNext(1, http.StatusGone)
		wantGone(t, "410 Gone", p.Send(ctx, smsMessage()), true)
		fake.FailNext(1, http.StatusNotFound)
		wantGone(t, "404", p.Send(ctx, smsMessage()), false)
	})
}
