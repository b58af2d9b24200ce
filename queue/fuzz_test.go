package queue_test

import (
	"errors"
	"testing"

	"github.com/notifier/notifier/queue"
)

// FuzzDecode checks that Decode never panics, that a failure is always an
// *InvalidError, and that any accepted job re-validates, re-encodes no
// larger than it came, and round-trips through Marshal and Decode.
// Grow the corpus with: go test -fuzz FuzzDecode -fuzztime 60s ./queue/
func FuzzDecode(f *testing.F) {
	for _, seed := range []struct{ subject, data string }{
		{"notify.jobs.sms", `{"id":"a","user_id":"u","channel":"sms","to":"+14155550123","body":"b"}`},
		{"notify.jobs.push.high", `{"id":"a","user_id":"u","channel":"push","to":"abcdefgh12345678","body":"b","title":"t","data":{"k":"v"}}`},
		{"notify.jobs.email", `{"id":"a","user_id":"u","channel":"email","to":"a@b.c","body":"b","expires_at":"2030-01-01T00:00:00+01:00","created_at":"2029-12-31T23:59:59.5Z"}`},
		{"", `{"id":"a","user_id":"u","channel":"sms","to":"+14155550123","body":"\u2028\n\"","provider":"p","x":[1,{"y":null}]}`},
		{"notify.jobs.sms", `{"id":"a","id":"b"}`},
		{"garbage", `[]`},
		{"notify.jobs.sms", "\xff"},
		{"notify.jobs.sms.t.acme~eu.high", `{"id":"a","user_id":"u","channel":"sms","to":"+14155550123","body":"b","tenant":"acme.eu"}`},
		{"notify.jobs.sms.t.acme", `{"id":"a","user_id":"u","channel":"sms","to":"+14155550123","body":"b"}`},
		{"notify.jobs.sms", `{"id":"a","user_id":"u","channel":"sms","to":"+14155550123","body":"b","tenant":"acme"}`},
		{"notify.jobs.sms.t.acme.marketing", `{"id":"a","user_id":"u","channel":"sms","to":"+14155550123","body":"b","category":"marketing"}`},
		{"notify.jobs.sms.high", `{"id":"a","user_id":"u","channel":"sms","to":"+14155550123","body":"b","category":"marketing"}`},
		{"notify.jobs.email.transactional", `{"id":"a","user_id":"u","channel":"email","to":"a@b.c","body":"b","category":"promo"}`},
	} {
		f.Add(seed.subject, []byte(seed.data))
	}
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		j, err := queue.Decode(subject, data)
		if err != nil {
			var ie *queue.InvalidError
			if !errors.As(err, &ie) {
				t.Fatalf("error %T %v is not an *InvalidError", err, err)
			}
			if j != nil {
				t.Fatal("a job returned with an error")
			}
			return
		}
		if err := j.Validate(); err != nil {
			t.Fatalf("accepted job does not validate: %v", err)
		}
		out, err := j.Marshal()
		if err != nil {
			t.Fatalf("Marshal of an accepted job: %v", err)
		}
		if len(out) > len(data) {
			t.Fatalf("re-encoding grew the job from %d to %d bytes:\n%q\n%q", len(data), len(out), data, out)
		}
		back, err := queue.Decode(subject, out)
		if err != nil {
			t.Fatalf("Decode(Marshal(job)): %v\n%q", err, out)
		}
		if diff := jobDiff(j, back); diff != "" {
			t.Fatalf("round trip changed the job: %s", diff)
		}
	})
}
