// Package suppress keeps the fleet-wide list of dead recipients: those a
// provider refused as gone for good (an unregistered device token, a number
// that replied STOP or is no mobile number, a mailbox that does not exist).
// A job to a listed recipient is not sent: every send to it would be paid
// for and refused again, and count against the sender's reputation.
//
// A recipient is listed by its channel and a hash of its address
// (Hash: SHA-256, never the address itself), for a time (suppression.ttl),
// with what refused it. The Redis store is shared by the fleet (a key per
// recipient, under the configured prefix, expiring with the entry), the
// Memory store is one process's (`notifier dev`, the demo). Both are safe
// for concurrent use.
package suppress

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Entry is one listed recipient. It names no address: Hash stands for it.
type Entry struct {
	Channel  string    `json:"channel"`
	Hash     string    `json:"hash"`               // Hash(Channel, to)
	Provider string    `json:"provider"`           // the provider that refused it
	Detail   string    `json:"detail,omitempty"`   // the refusal, one line, as the dead letter says it (never the address)
	Job      string    `json:"job,omitempty"`      // the job that met the refusal: its id within its tenant (queue.MsgID)
	At       time.Time `json:"at"`                 // when it was listed
	Until    time.Time `json:"until"`              // when it leaves the list
	Tenant   string    `json:"tenant,omitempty"`   // the job's tenant ("" the default tenant's)
	Category string    `json:"category,omitempty"` // the job's category
}

// Hash is how a recipient is listed: the hex SHA-256 of its channel, a zero
// byte and its address. The same address on another channel is another
// recipient.
//
// An email address has its ASCII letters lower-cased first, so Bob@Example.com and
// bob@example.com are one recipient. Its domain is case-insensitive (DNS);
// its local part may be case-sensitive by RFC 5321 §2.4, which also
// discourages relying on it, and mailbox providers do not: they deliver
// both forms to one mailbox, and refuse both when it is gone. Keeping the
// local part's case would list one dead mailbox under several hashes (and
// keep paying for sends to it in another case, and have `suppression
// remove` miss it); folding it can only confuse two mailboxes a host tells
// apart by case alone, which no mainstream host does. Phone numbers (E.164)
// have no case; device tokens are case-sensitive and kept as they are.
// Only ASCII letters are folded: Unicode's folding maps other characters
// onto ASCII ones (the Kelvin sign K onto k), and a gone address spelled so
// would list another, real mailbox for every tenant.
func Hash(channel, to string) string {
	if channel == "email" {
		to = asciiLower(to)
	}
	h := sha256.New()
	h.Write([]byte(channel))
	h.Write([]byte{0})
	h.Write([]byte(to))
	return hex.EncodeToString(h.Sum(nil))
}

// asciiLower is s with A-Z lower-cased, every other byte as it is.
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if c := b[j]; c >= 'A' && c <= 'Z' {
					b[j] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// ValidHash reports whether h is a Hash (64 lower-case hex digits).
func ValidHash(h string) bool {
	if len(h) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Store is where the list lives.
type Store interface {
	// Add lists e for ttl from now (e.At and e.Until are set here); a
	// recipient listed again is listed anew.
	Add(ctx context.Context, e Entry, ttl time.Duration) error
	// Has reports whether the recipient is listed now.
	Has(ctx context.Context, channel, hash string) (bool, error)
	// Get is the recipient's entry, ok false when it is not listed.
	Get(ctx context.Context, channel, hash string) (e Entry, ok bool, err error)
	// Remove takes the recipient off the list at once, fleet-wide;
	// removed is false when it was not listed.
	Remove(ctx context.Context, channel, hash string) (removed bool, err error)
	// List is the listed recipients of channel ("" every channel), at most
	// limit (0: all), the most recently listed first.
	List(ctx context.Context, channel string, limit int) ([]Entry, error)
}

// MaxTTL is the longest a recipient stays listed (suppression.ttl): a
// year. A number or a device token is reassigned in time.
const MaxTTL = 8784 * time.Hour

// ErrInvalid refuses a malformed channel, hash or ttl.
var ErrInvalid = errors.New("invalid suppression entry")

func check(channel, hash string) error {
	if channel == "" || len(channel) > 32 {
		return fmt.Errorf("%w: channel %q", ErrInvalid, channel)
	}
	for i := 0; i < len(channel); i++ {
		if c := channel[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("%w: channel %q", ErrInvalid, channel)
		}
	}
	if !ValidHash(hash) {
		return fmt.Errorf("%w: hash %q is not a hex SHA-256", ErrInvalid, hash)
	}
	return nil
}

func checkTTL(ttl time.Duration) error {
	if ttl <= 0 || ttl > MaxTTL {
		return fmt.Errorf("%w: ttl %s, want from 1ns to %s", ErrInvalid, ttl, MaxTTL)
	}
	return nil
}
