package providers

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// Standard Webhooks (https://www.standardwebhooks.com, the specification in
// github.com/standard-webhooks/standard-webhooks, spec/standard-webhooks.md)
// symmetric signatures: a secret is "Random. At least 24 bytes (192 bits,
// 512 maximum)", serialized base64-encoded and prefixed with whsec_; the
// signature of a webhook is the base64 HMAC-SHA256 of
// "{msg_id}.{timestamp}.{payload}" under the secret, sent as "v1,<base64>"
// in the webhook-signature header, several space-delimited to support
// zero-downtime secret rotation.
const (
	// WebhookSecretPrefix starts every signing secret.
	WebhookSecretPrefix = "whsec_"
	// MinWebhookSecret and MaxWebhookSecret bound a signing secret's
	// bytes, once decoded.
	MinWebhookSecret = 24
	MaxWebhookSecret = 64
	// maxWebhookSecrets bounds how many secrets sign at once: a rotation
	// needs two; a few more cost a header nobody reads.
	maxWebhookSecrets = 4
)

// webhookSigner signs webhooks with one secret or, during a rotation,
// several. It is read-only after newWebhookSigner and safe for concurrent
// use; printing a provider shows its address, never a key.
type webhookSigner struct {
	keys [][]byte // decoded, in the order configured
	raw  []string // as configured, for the scrubber
}

// newWebhookSigner reads the value of signing_secret_env: one or more
// space-separated whsec_<base64> secrets. Its errors never quote a secret.
func newWebhookSigner(v string) (*webhookSigner, error) {
	fields := strings.Fields(v)
	switch {
	case len(fields) == 0:
		return nil, errors.New("holds no secret")
	case len(fields) > maxWebhookSecrets:
		return nil, fmt.Errorf("holds %d secrets, at most %d (one, or two during a rotation)", len(fields), maxWebhookSecrets)
	}
	s := &webhookSigner{raw: fields}
	for i, f := range fields {
		b64, ok := strings.CutPrefix(f, WebhookSecretPrefix)
		if !ok {
			return nil, fmt.Errorf("secret %d of %d does not start with %s (Standard Webhooks' form: %s<base64>)", i+1, len(fields), WebhookSecretPrefix, WebhookSecretPrefix)
		}
		key, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fmt.Errorf("secret %d of %d is not standard base64 after %s", i+1, len(fields), WebhookSecretPrefix)
		}
		if len(key) < MinWebhookSecret || len(key) > MaxWebhookSecret {
			return nil, fmt.Errorf("secret %d of %d is %d bytes, want %d to %d", i+1, len(fields), len(key), MinWebhookSecret, MaxWebhookSecret)
		}
		s.keys = append(s.keys, key)
	}
	return s, nil
}

// sign is the webhook-signature header of the webhook id sent at ts (UNIX
// seconds) with body: "v1,<base64 HMAC-SHA256 of id.ts.body>" for each
// secret, space-separated, in the order configured.
func (s *webhookSigner) sign(id, ts string, body []byte) string {
	var b strings.Builder
	for i, key := range s.keys {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + ts + "."))
		mac.Write(body)
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("v1,")
		b.WriteString(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return b.String()
}

// WebhookID is the webhook-id header of a signed webhook for the message
// with id: the id itself, the same on every attempt, unless it holds a '.'
// (job ids may: SPEC §2), which Standard Webhooks forbids in what it signs
// ("{msg_id}.{timestamp}.{payload}": a dot would let one id and timestamp
// pass for another); such an id is sent as "msg_" and the stable
// version-5 UUID of "urn:notifier:job:<id>" (as APNsID makes it).
func WebhookID(id string) string {
	if !strings.Contains(id, ".") {
		return id
	}
	return "msg_" + jobUUID(id)
}
