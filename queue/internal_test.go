package queue

import (
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/internal/text"
)

func TestCheckVersion(t *testing.T) {
	t.Parallel()
	for version, ok := range map[string]bool{
		"2.10.4": true, "2.10.5": true, "2.11.0": true, "2.15.2": true, "3.0.0": true, "v2.10.4": true, "2.10.4-RC.1": true,
		"2.10.3": false, "2.9.23": false, "1.99.99": false, "": false, "dev": false,
	} {
		err := checkVersion(version)
		if (err == nil) != ok {
			t.Errorf("checkVersion(%q) = %v, want ok=%v", version, err, ok)
			continue
		}
		if err != nil && (!strings.Contains(err.Error(), MinServerVersion) || !strings.Contains(err.Error(), version)) {
			t.Errorf("checkVersion(%q) = %q: should name the version and the minimum", version, err)
		}
	}
	if want := "server version 2.9.23 is too old: notifier needs nats-server 2.10.4 or newer"; checkVersion("2.9.23").Error() != want {
		t.Errorf("message %q, want %q", checkVersion("2.9.23"), want)
	}
}

func TestReconnectDelay(t *testing.T) {
	t.Parallel()
	for attempts, bounds := range map[int][2]time.Duration{
		0: {50 * time.Millisecond, 100 * time.Millisecond}, 1: {50 * time.Millisecond, 100 * time.Millisecond},
		2: {100 * time.Millisecond, 200 * time.Millisecond}, 4: {400 * time.Millisecond, 800 * time.Millisecond},
		7: {2500 * time.Millisecond, 5 * time.Second}, 100: {2500 * time.Millisecond, 5 * time.Second},
	} {
		for range 50 {
			if d := reconnectDelay(attempts); d < bounds[0] || d > bounds[1] {
				t.Fatalf("reconnectDelay(%d) = %s, want within %s", attempts, d, bounds)
			}
		}
	}
}

func TestSubjectToken(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"sms": "sms", "": "unknown", "fa$x": "fa_x", "a b.c*>": "a_b_c__", "é": "__",
		strings.Repeat("x", 40): strings.Repeat("x", 32),
	} {
		if got := subjectToken(in); got != want {
			t.Errorf("subjectToken(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"nats://h:4222":              "nats://h:4222",
		"nats://tok@h:4222":          "nats://[redacted]@h:4222",
		"nats://u:p@ss@h:4222":       "nats://[redacted]@h:4222",
		"u:p@h:4222":                 "[redacted]@h:4222",
		"wss://u:p@h/path@x":         "wss://[redacted]@h/path@x",
		"nats://u:Ab3/xY+z@h:4222":   "nats://[redacted]@h:4222", // a '/' in the password: no path in a NATS URL
		"nats://u:1234/b@h:4222":     "nats://[redacted]@h:4222",
		"u:p/q@h:4222":               "[redacted]@h:4222",
		"nats://a:1, nats://t@b:2 ,": "nats://a:1,nats://[redacted]@b:2",
	} {
		if got := redactURLs(in); got != want {
			t.Errorf("redactURLs(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"plain", "plain"},
		{"  two\r\nlines\n", "two lines"},
		{"tab\tand\x00nul\u2028sep", "tab and nul sep"},
		{"bad \xff utf8", "bad \uFFFD utf8"},
		{strings.Repeat("é", 300), strings.Repeat("é", 254) + "…"},
	} {
		got := text.OneLine(tt.in, MaxDetailBytes)
		if got != tt.want {
			t.Errorf("text.OneLine(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if len(got) > MaxDetailBytes {
			t.Errorf("text.OneLine(%q) is %d bytes", tt.in, len(got))
		}
	}
}

func TestMsgIDIsScopedByTenant(t *testing.T) {
	if got := MsgID("", "order-42"); got != "order-42" {
		t.Fatalf("default tenant: %q", got)
	}
	a, b := MsgID("acme", "order-42"), MsgID("bank", "order-42")
	if a == b || a != "acme/order-42" {
		t.Fatalf("acme %q, bank %q: want distinct, acme/order-42", a, b)
	}
	// A default-tenant id can never equal a tenant's scoped id: ids hold no '/'.
	if ValidID(a) {
		t.Fatalf("%q is a valid id: a default-tenant job could collide with it", a)
	}
}
