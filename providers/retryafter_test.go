package providers_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/notifier/notifier/providers"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"", 0, false},
		{"   ", 0, false},
		{"0", 0, true},
		{"120", 2 * time.Minute, true},
		{" 5 ", 5 * time.Second, true},
		{"007", 7 * time.Second, true},
		{"3600", time.Hour, true},
		{"3601", providers.MaxRetryAfter, true},
		{"99999999999999999999999999", providers.MaxRetryAfter, true},
		{"-5", 0, false},
		{"+5", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"tomorrow", 0, false},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},                  // IMF-fixdate
		{now.Add(90 * time.Second).Format("Monday, 02-Jan-06 15:04:05 GMT"), 90 * time.Second, true}, // RFC 850
		{now.Add(90 * time.Second).Format(time.ANSIC), 90 * time.Second, true},                       // asctime
		{"Sun, 06 Nov 1994 08:49:37 GMT", 0, true},                                                   // past
		{now.Add(48 * time.Hour).Format(http.TimeFormat), providers.MaxRetryAfter, true},             // absurd
		{now.Format(http.TimeFormat), 0, true},                                                       // now
		{"Sun, 06 Nov 1994 08:49:37", 0, false},                                                      // no zone
		{"Mon, 32 Nov 2030 08:49:37 GMT", 0, false},                                                  // no such day
	}
	for _, c := range cases {
		got, ok := providers.ParseRetryAfter(c.in, now)
		if got != c.want || ok != c.wantOK {
			t.Errorf("ParseRetryAfter(%q) = %s, %v; want %s, %v", c.in, got, ok, c.want, c.wantOK)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	now := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, seed := range []string{"", "0", "120", "-1", "1.5", "99999999999999999999", "Sun, 06 Nov 1994 08:49:37 GMT",
		"Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", now.Add(time.Minute).Format(http.TimeFormat), "garbage"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := providers.ParseRetryAfter(v, now)
		if !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q) = %s, false: want 0 when not ok", v, d)
		}
		if d < 0 || d > providers.MaxRetryAfter {
			t.Fatalf("ParseRetryAfter(%q) = %s, outside [0, %s]", v, d, providers.MaxRetryAfter)
		}
	})
}
