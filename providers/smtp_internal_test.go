package providers

import (
	"context"
	"errors"
	"testing"

	"github.com/emersion/go-smtp"
)

// TestSMTPRcptNotAuthorized: a 5.7.1 at RCPT is a refused sender (relay
// access denied: the provider pauses) only on a session that did not
// authenticate; after AUTH servers use it for a policy refusal of one
// recipient, which is that job's: permanent (dead-lettered), not gone.
func TestSMTPRcptNotAuthorized(t *testing.T) {
	t.Parallel()
	reply := &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "recipient refused by policy"}
	for _, c := range []struct {
		name string
		p    *SMTP
		want error
	}{
		{"anonymous", &SMTP{name: "mail"}, ErrSender},
		{"authenticated", &SMTP{name: "mail", username: "u", password: &credential{"pw"}}, ErrPermanent},
	} {
		ctx := context.Background()
		err := c.p.fail(ctx, ctx, &stageError{stage: "rcpt", err: reply}, newScrubber(nil))
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, c.want) || e.RecipientGone || e.Status != 554 {
			t.Errorf("%s: %v, want %v with status 554, recipient not gone", c.name, err, c.want)
		}
	}
	// At MAIL FROM a 5.7.x refuses the sender, authenticated or not.
	mailFrom := &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "sender refused"}
	authed := &SMTP{name: "mail", username: "u", password: &credential{"pw"}}
	ctx := context.Background()
	if err := authed.fail(ctx, ctx, &stageError{stage: "mail", err: mailFrom}, newScrubber(nil)); !errors.Is(err, ErrSender) {
		t.Errorf("MAIL FROM 5.7.1 after AUTH: %v, want ErrSender", err)
	}
}
