package providers

import (
	"net/url"
	"testing"
)

// TestTwilioSignatureDocumentedExample: the worked example of Twilio's
// webhook security documentation (auth token 12345, its URL and call
// parameters), in both the versions it has been published in, whatever
// the order the parameters come in.
func TestTwilioSignatureDocumentedExample(t *testing.T) {
	const token, u = "12345", "https://mycompany.com/myapp.php?foo=1&bar=2"
	for caller, want := range map[string]string{
		"+14158675309": "RSOYDt4T1cUTdK1PDd93/VVr8B8=",
		"+14158675310": "GvWf1cFY/Q7PnoempGyD5oXAezc=",
	} {
		params := url.Values{"To": {"+18005551212"}, "Digits": {"1234"}, "From": {caller}, "Caller": {caller},
			"CallSid": {"CA1234567890ABCDE"}}
		if got := twilioSignature(token, u, params); got != want {
			t.Errorf("caller %s: signature %q, want Twilio's %q", caller, got, want)
		}
	}
	// A tampered value, URL or token signs differently.
	params := url.Values{"To": {"+18005551212"}, "Digits": {"1234"}, "From": {"+14158675310"}, "Caller": {"+14158675310"},
		"CallSid": {"CA1234567890ABCDE"}}
	good := twilioSignature(token, u, params)
	params.Set("Digits", "1235")
	for name, got := range map[string]string{
		"value": twilioSignature(token, u, params),
		"url":   twilioSignature(token, u+"&baz=3", url.Values{}),
		"token": twilioSignature("12346", u, params),
	} {
		if got == good {
			t.Errorf("tampered %s: same signature", name)
		}
	}
}
