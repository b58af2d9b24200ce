package userlimit_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/userlimit"
)

func TestRuleWithDefaults(t *testing.T) {
	t.Parallel()
	got := userlimit.Rule{Limit: 5, Window: time.Hour}.WithDefaults()
	want := userlimit.Rule{Limit: 5, Window: time.Hour, Algorithm: userlimit.SlidingLog, OnExceed: userlimit.Drop, Mode: userlimit.Enforce}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	set := userlimit.Rule{Limit: 5, Window: time.Hour, Algorithm: userlimit.TokenBucket, OnExceed: userlimit.Defer, Mode: userlimit.Shadow}
	if got := set.WithDefaults(); got != set {
		t.Fatalf("defaults overwrote set fields: got %+v, want %+v", got, set)
	}
}

func TestRuleValidate(t *testing.T) {
	t.Parallel()
	valid := []userlimit.Rule{
		{Limit: 1, Window: time.Millisecond},
		{Limit: 5, Window: time.Hour, Algorithm: userlimit.SlidingLog, OnExceed: userlimit.Drop},
		{Limit: 3, Window: 10 * time.Minute, Algorithm: userlimit.SlidingLog, OnExceed: userlimit.Defer},
		{Limit: userlimit.MaxSlidingLogLimit, Window: 24 * time.Hour},
		{Limit: 20, Window: 24 * time.Hour, Algorithm: userlimit.SlidingWindow},
		{Limit: userlimit.MaxLimit, Window: userlimit.MaxWindow, Algorithm: userlimit.SlidingWindow},
		{Limit: 7, Window: time.Second, Algorithm: userlimit.FixedWindow},
		{Limit: 7, Window: time.Second, Algorithm: userlimit.TokenBucket},
		{Limit: 7, Window: time.Second, Mode: userlimit.Shadow},
		{Limit: 7, Window: time.Second, Mode: userlimit.Enforce},
	}
	for _, r := range valid {
		if err := r.Validate(); err != nil {
			t.Errorf("%+v: unexpected error %v", r, err)
		}
	}

	invalid := []struct {
		rule userlimit.Rule
		want []string // one message per problem, in order
	}{
		{userlimit.Rule{}, []string{
			"limit: must be a whole number of at least 1, got 0",
			"window: must be from 1ms to 8784h (366 days), got 0s",
		}},
		{userlimit.Rule{Limit: -3, Window: time.Hour}, []string{"limit: must be a whole number of at least 1, got -3"}},
		{userlimit.Rule{Limit: userlimit.MaxLimit + 1, Window: time.Hour, Algorithm: userlimit.FixedWindow},
			[]string{"limit: must be at most 1000000000, got 1000000001"}},
		{userlimit.Rule{Limit: 100_001, Window: time.Hour}, []string{
			"limit: 100001 is above 100000, the most sliding_log allows (it keeps every job of the window, " +
				"O(limit) memory per user); use algorithm sliding_window for large limits",
		}},
		{userlimit.Rule{Limit: 1001, Window: time.Hour, Algorithm: userlimit.TokenBucket}, []string{
			"limit: 1001 is above 1000, the most token_bucket allows (each decision reads every job of the window); " +
				"use algorithm sliding_window for large limits",
		}},
		{userlimit.Rule{Limit: 1, Window: 999 * time.Microsecond}, []string{"window: must be from 1ms to 8784h (366 days), got 999µs"}},
		{userlimit.Rule{Limit: 1, Window: 367 * 24 * time.Hour}, []string{"window: must be from 1ms to 8784h (366 days), got 8808h"}},
		{userlimit.Rule{Limit: 1, Window: time.Hour, Algorithm: "leaky"}, []string{
			`algorithm: "leaky" is not one of sliding_log, sliding_window, fixed_window, token_bucket`,
		}},
		{userlimit.Rule{Limit: 1, Window: time.Hour, OnExceed: "retry"}, []string{`on_exceed: "retry" is not one of drop, defer, digest`}},
		{userlimit.Rule{Limit: 1, Window: time.Hour, Mode: "dry_run"}, []string{`mode: "dry_run" is not one of enforce, shadow`}},
		{userlimit.Rule{Limit: 1, Window: time.Hour, Digest: &userlimit.DigestTemplate{Title: "x"}}, []string{"digest: is for on_exceed: digest, and on_exceed is drop"}},
		{userlimit.Rule{Limit: 1, Window: time.Hour, OnExceed: userlimit.Digest, Digest: &userlimit.DigestTemplate{Title: "a\x00b"}}, []string{"digest.title: must be valid UTF-8 without control characters"}},
		{userlimit.Rule{Limit: 1, Window: time.Hour, OnExceed: userlimit.Digest, Digest: &userlimit.DigestTemplate{Body: strings.Repeat("x", 4097)}}, []string{"digest.body: must be at most 4096 bytes, got 4097"}},
	}
	for _, tc := range invalid {
		err := tc.rule.Validate()
		if err == nil {
			t.Errorf("%+v: no error, want %q", tc.rule, tc.want)
			continue
		}
		got := strings.Split(err.Error(), "\n")
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("%+v:\n got %q\nwant %q", tc.rule, got, tc.want)
		}
		var joined interface{ Unwrap() []error }
		if !errors.As(err, &joined) || len(joined.Unwrap()) != len(tc.want) {
			t.Errorf("%+v: want errors.Join of %d errors, got %#v", tc.rule, len(tc.want), err)
		}
	}
}

func ExampleRule_Validate() {
	rule := userlimit.Rule{Limit: 0, Window: 500 * time.Microsecond, Algorithm: "leaky", OnExceed: "retry"}
	// The command line prefixes each line with the YAML path.
	for _, line := range strings.Split(rule.Validate().Error(), "\n") {
		fmt.Println("user_limits.push." + line)
	}
	// Output:
	// user_limits.push.limit: must be a whole number of at least 1, got 0
	// user_limits.push.window: must be from 1ms to 8784h (366 days), got 500µs
	// user_limits.push.algorithm: "leaky" is not one of sliding_log, sliding_window, fixed_window, token_bucket
	// user_limits.push.on_exceed: "retry" is not one of drop, defer, digest
}

// TestDigestTemplate: a digest rule without a template takes the
// defaults, and {count} is replaced by the number of jobs.
func TestDigestTemplate(t *testing.T) {
	r := userlimit.Rule{Limit: 1, Window: time.Hour, OnExceed: userlimit.Digest}.WithDefaults()
	if err := r.Validate(); err != nil || r.Digest == nil {
		t.Fatalf("%+v: %v", r, err)
	}
	if got := r.Digest.Text(r.Digest.Title, 4); got != "4 new notifications" {
		t.Errorf("title %q", got)
	}
	r = userlimit.Rule{Limit: 1, Window: time.Hour, OnExceed: userlimit.Digest, Digest: &userlimit.DigestTemplate{Body: "{count} updates in {count}"}}.WithDefaults()
	if got := r.Digest.Text(r.Digest.Body, 12); got != "12 updates in 12" || r.Digest.Title != userlimit.DefaultDigestTitle {
		t.Errorf("body %q, title %q", got, r.Digest.Title)
	}
}
