package queue_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/queue"
)

// Personal values that must never appear in an error.
const (
	secretTo   = "+14155550123"
	secretBody = "your secret code is 987654"
)

// doc builds a job document from the valid base with fields changed; a nil
// value removes the field.
func doc(changes map[string]any) string {
	m := map[string]any{
		"id":      "job-1",
		"user_id": "user-1",
		"channel": "sms",
		"to":      secretTo,
		"body":    secretBody,
	}
	for k, v := range changes {
		if v == nil {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b)
}

type raw string // a value spliced into the document as is (null, numbers, objects)

func (r raw) MarshalJSON() ([]byte, error) { return []byte(r), nil }

func TestDecodeRules(t *testing.T) {
	t.Parallel()
	const sms = "notify.jobs.sms"
	tests := []struct {
		name    string
		subject string
		data    string
		wantErr string // exact error; "" for a valid job
	}{
		// The whole message.
		{"valid minimal sms", sms, doc(nil), ""},
		{"valid on the high lane", "notify.jobs.sms.high", doc(nil), ""},
		{"valid with every optional field", sms, doc(map[string]any{
			"title": "Code", "data": map[string]string{"k": "v", "": "empty key"}, "provider": "sms-gateway",
			"expires_at": "2030-01-02T03:04:05Z", "created_at": "2030-01-02T03:04:05.123456789+02:00",
		}), ""},
		{"unknown fields are ignored", sms, doc(map[string]any{"priority": 7, "nested": map[string]any{"a": []int{1}}}), ""},
		{"field names are case-sensitive", sms, doc(map[string]any{"ID": 5, "Body": 1}), ""},
		{"null optional fields are absent", sms, doc(map[string]any{"title": raw("null"), "data": raw("null"), "provider": raw("null"), "expires_at": raw("null"), "created_at": raw("null")}), ""},
		{"empty data object", sms, doc(map[string]any{"data": map[string]string{}}), ""},
		{"whitespace around the object", sms, " \n\t" + doc(nil) + "\r\n ", ""},
		{"empty subject skips the subject match", "", doc(map[string]any{"channel": "email", "to": "ada@example.com"}), ""},
		{"exactly 64 KiB", sms, pad(doc(nil), queue.MaxJobBytes), ""},
		{"one byte over 64 KiB", sms, pad(doc(nil), queue.MaxJobBytes+1), "message is 65537 bytes, more than 65536"},
		{"invalid UTF-8", sms, strings.Replace(doc(nil), "user-1", "user-\xff", 1), "message is not valid UTF-8"},
		{"empty message", sms, "", "not valid JSON (unexpected end of input)"},
		{"not JSON", sms, "hello " + secretBody, "not valid JSON (syntax error at byte 1)"},
		{"truncated", sms, doc(nil)[:20], "not valid JSON (unexpected end of input)"},
		{"an array", sms, "[" + doc(nil) + "]", "message is not a JSON object"},
		{"null", sms, "null", "message is not a JSON object"},
		{"a string", sms, `"` + secretBody + `"`, "message is not a JSON object"},
		{"two objects", sms, doc(nil) + doc(nil), fmt.Sprintf("not valid JSON (data after the object at byte %d)", len(doc(nil)))},
		{"trailing garbage", sms, doc(nil) + " x", fmt.Sprintf("not valid JSON (data after the object at byte %d)", len(doc(nil)))},
		{"nested too deep", sms, strings.TrimSuffix(doc(nil), "}") + `,"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + "}", fmt.Sprintf("not valid JSON (nested too deep at byte %d)", len(doc(nil))+9993)}, // where encoding/json gives up (depth 10000)
		{"trailing comma", sms, strings.TrimSuffix(doc(nil), "}") + ",}", fmt.Sprintf("not valid JSON (syntax error at byte %d)", len(doc(nil)))},

		// id
		{"id missing", sms, doc(map[string]any{"id": nil}), "id: required"},
		{"id null", sms, doc(map[string]any{"id": raw("null")}), "id: required"},
		{"id empty", sms, doc(map[string]any{"id": ""}), "id: required"},
		{"id of every allowed character", sms, doc(map[string]any{"id": "AZaz09._:-"}), ""},
		{"id of 128 characters", sms, doc(map[string]any{"id": strings.Repeat("a", 128)}), ""},
		{"id of 129 characters", sms, doc(map[string]any{"id": strings.Repeat("a", 129)}), "id: must be at most 128 characters, got 129"},
		{"id with a space", sms, doc(map[string]any{"id": "job 1"}), "id: must contain only A-Z a-z 0-9 . _ : -"},
		{"id with a slash", sms, doc(map[string]any{"id": "job/1"}), "id: must contain only A-Z a-z 0-9 . _ : -"},
		{"id with a non-ASCII letter", sms, doc(map[string]any{"id": "jöb"}), "id: must contain only A-Z a-z 0-9 . _ : -"},
		{"id a number", sms, doc(map[string]any{"id": 12}), "id: must be a string"},
		{"id twice", sms, `{"id":"a","id":"b","user_id":"u","channel":"sms","to":"` + secretTo + `","body":"b"}`, "id: duplicate key"},
		{"id twice, once escaped", sms, `{"id":"a","\u0069d":"b","user_id":"u","channel":"sms","to":"` + secretTo + `","body":"b"}`, "id: duplicate key"},

		// user_id
		{"user_id missing", sms, doc(map[string]any{"user_id": nil}), "user_id: required"},
		{"user_id empty", sms, doc(map[string]any{"user_id": ""}), "user_id: required"},
		{"user_id of 256 characters", sms, doc(map[string]any{"user_id": strings.Repeat("é", 256)}), ""},
		{"user_id of 257 characters", sms, doc(map[string]any{"user_id": strings.Repeat("é", 257)}), "user_id: must be at most 256 characters, got 257"},
		{"user_id with a newline", sms, doc(map[string]any{"user_id": "user\n1"}), "user_id: must not contain control characters"},
		{"user_id an object", sms, doc(map[string]any{"user_id": map[string]int{}}), "user_id: must be a string"},

		// channel
		{"channel missing", sms, doc(map[string]any{"channel": nil}), "channel: required"},
		{"channel not the subject's", sms, doc(map[string]any{"channel": "fax"}), `channel: "fax" does not match subject channel "sms"`},
		{"channel push on an sms subject", sms, doc(map[string]any{"channel": "push"}), `channel: "push" does not match subject channel "sms"`},
		{"channel unknown on its own subject", "notify.jobs.fax", doc(map[string]any{"channel": "fax"}), `channel: "fax" is not one of sms, push, email`},
		{"channel in upper case", "notify.jobs.SMS", doc(map[string]any{"channel": "SMS"}), `channel: "SMS" is not one of sms, push, email`},
		{"channel on a garbage subject", "garbage", doc(nil), `channel: "sms" does not match subject channel ""`},
		{"channel unknown, no subject", "", doc(map[string]any{"channel": "fax"}), `channel: "fax" is not one of sms, push, email`},
		{"channel long value is capped", "notify.jobs.sms", doc(map[string]any{"channel": strings.Repeat("x", 100)}), `channel: "` + strings.Repeat("x", 32) + `…" does not match subject channel "sms"`},
		{"channel a boolean", sms, doc(map[string]any{"channel": true}), "channel: must be a string"},

		// to, per channel
		{"to missing", sms, doc(map[string]any{"to": nil}), "to: required"},
		{"to empty", sms, doc(map[string]any{"to": ""}), "to: required"},
		{"to a number", sms, doc(map[string]any{"to": 14155550123}), "to: must be a string"},
		{"sms to of 7 digits", sms, doc(map[string]any{"to": "+1234567"}), ""},
		{"sms to of 15 digits", sms, doc(map[string]any{"to": "+123456789012345"}), ""},
		{"sms to without +", sms, doc(map[string]any{"to": "14155550123"}), "to: must be an E.164 phone number: + then 7 to 15 digits, the first not 0"},
		{"sms to starting with 0", sms, doc(map[string]any{"to": "+04155550123"}), "to: must be an E.164 phone number: + then 7 to 15 digits, the first not 0"},
		{"sms to of 6 digits", sms, doc(map[string]any{"to": "+123456"}), "to: must be an E.164 phone number: + then 7 to 15 digits, the first not 0"},
		{"sms to of 16 digits", sms, doc(map[string]any{"to": "+1234567890123456"}), "to: must be an E.164 phone number: + then 7 to 15 digits, the first not 0"},
		{"sms to with spaces", sms, doc(map[string]any{"to": "+1 415 555 0123"}), "to: must be an E.164 phone number: + then 7 to 15 digits, the first not 0"},
		{"push to an APNs token", "notify.jobs.push", doc(map[string]any{"channel": "push", "to": strings.Repeat("ab12", 16)}), ""},
		{"push to an FCM token", "notify.jobs.push", doc(map[string]any{"channel": "push", "to": "cX9s8d7F6:APA91bH-x_y" + strings.Repeat("Z", 120)}), ""},
		{"push to too short", "notify.jobs.push", doc(map[string]any{"channel": "push", "to": "abc"}), "to: must be a device token: 8 to 4096 characters of A-Z a-z 0-9 . _ : = + / ~ [ ] -"},
		{"push to with a space", "notify.jobs.push", doc(map[string]any{"channel": "push", "to": "abcd efgh ijkl"}), "to: must be a device token: 8 to 4096 characters of A-Z a-z 0-9 . _ : = + / ~ [ ] -"},
		{"push to a phone number is fine", "notify.jobs.push", doc(map[string]any{"channel": "push", "to": secretTo}), ""},
		{"email to an address", "notify.jobs.email", doc(map[string]any{"channel": "email", "to": "ada.lovelace+news@example.co.uk"}), ""},
		{"email to without @", "notify.jobs.email", doc(map[string]any{"channel": "email", "to": "ada.example.com"}), "to: must be a plain email address (user@domain, no display name or angle brackets)"},
		{"email to with a display name", "notify.jobs.email", doc(map[string]any{"channel": "email", "to": "Ada <ada@example.com>"}), "to: must be a plain email address (user@domain, no display name or angle brackets)"},
		{"email to in angle brackets", "notify.jobs.email", doc(map[string]any{"channel": "email", "to": "<ada@example.com>"}), "to: must be a plain email address (user@domain, no display name or angle brackets)"},
		{"email to of 255 bytes", "notify.jobs.email", doc(map[string]any{"channel": "email", "to": strings.Repeat("a", 243) + "@example.com"}), "to: must be an email address of at most 254 bytes, got 255"},

		// body
		{"body missing", sms, doc(map[string]any{"body": nil}), "body: required"},
		{"body empty", sms, doc(map[string]any{"body": ""}), "body: required"},
		{"body of 16 KiB", sms, doc(map[string]any{"body": strings.Repeat("b", queue.MaxBodyBytes)}), ""},
		{"body of 16 KiB + 1", sms, doc(map[string]any{"body": strings.Repeat("b", queue.MaxBodyBytes+1)}), "body: must be at most 16384 bytes, got 16385"},
		{"body an array", sms, doc(map[string]any{"body": []string{secretBody}}), "body: must be a string"},

		// title, data, provider
		{"title a number", sms, doc(map[string]any{"title": 1}), "title: must be a string"},
		{"title empty", sms, doc(map[string]any{"title": ""}), ""},
		{"data an array", sms, doc(map[string]any{"data": []string{"a"}}), "data: must be an object of strings"},
		{"data a string", sms, doc(map[string]any{"data": "a"}), "data: must be an object of strings"},
		{"data with a number value", sms, doc(map[string]any{"data": map[string]any{"a": "x", "b": 1}}), "data: every value must be a string"},
		{"data with a null value", sms, doc(map[string]any{"data": map[string]any{"a": nil}}), "data: every value must be a string"},
		{"data with a key twice", sms, doc(map[string]any{"data": raw(`{"a":"x","a":"y"}`)}), "data: duplicate key"},
		{"provider a number", sms, doc(map[string]any{"provider": 1}), "provider: must be a string"},
		{"provider with a newline", sms, doc(map[string]any{"provider": "sms\ngateway"}), "provider: must not contain control characters"},
		{"provider too long", sms, doc(map[string]any{"provider": strings.Repeat("p", 129)}), "provider: must be at most 128 characters, got 129"},

		// times
		{"expires_at with offset and nanoseconds", sms, doc(map[string]any{"expires_at": "2030-01-02T03:04:05.999999999-07:30"}), ""},
		{"expires_at a date only", sms, doc(map[string]any{"expires_at": "2030-01-02"}), "expires_at: must be an RFC 3339 time such as 2006-01-02T15:04:05Z"},
		{"expires_at empty", sms, doc(map[string]any{"expires_at": ""}), "expires_at: must be an RFC 3339 time such as 2006-01-02T15:04:05Z"},
		{"expires_at a Unix time", sms, doc(map[string]any{"expires_at": 1893456000}), "expires_at: must be a string"},
		{"expires_at without zone", sms, doc(map[string]any{"expires_at": "2030-01-02T03:04:05"}), "expires_at: must be an RFC 3339 time such as 2006-01-02T15:04:05Z"},
		{"expires_at year 10000 in UTC", sms, doc(map[string]any{"expires_at": "9999-12-31T23:00:00-05:00"}), "expires_at: must be between years 0000 and 9999 in UTC"},
		{"created_at valid", sms, doc(map[string]any{"created_at": "2024-02-29T12:00:00Z"}), ""},
		{"created_at not a date", sms, doc(map[string]any{"created_at": "2023-02-29T12:00:00Z"}), "created_at: must be an RFC 3339 time such as 2006-01-02T15:04:05Z"},

		// Order: the first broken rule in field order is reported.
		{"first broken rule wins", sms, doc(map[string]any{"user_id": 1, "id": nil, "body": nil}), "id: required"},
		{"type error in its place", sms, doc(map[string]any{"user_id": 1, "body": nil}), "user_id: must be a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j, err := queue.Decode(tt.subject, []byte(tt.data))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Decode: %v, want a valid job", err)
				}
				if j == nil || j.ID == "" {
					t.Fatalf("Decode returned %+v", j)
				}
				if err := j.Validate(); err != nil {
					t.Fatalf("Validate of a decoded job: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Decode accepted it, want %q", tt.wantErr)
			}
			if j != nil {
				t.Errorf("Decode returned a job with an error")
			}
			var ie *queue.InvalidError
			if !errors.As(err, &ie) {
				t.Fatalf("error %T is not an *InvalidError", err)
			}
			if err.Error() != tt.wantErr {
				t.Errorf("error %q, want %q", err.Error(), tt.wantErr)
			}
			if field, _, _ := strings.Cut(tt.wantErr, ":"); strings.Contains(tt.wantErr, ": ") && ie.Field != field {
				t.Errorf("Field %q, want %q", ie.Field, field)
			}
			for _, personal := range []string{secretTo, secretBody, "14155550123", "ada", "abcd efgh"} {
				if strings.Contains(err.Error(), personal) {
					t.Errorf("error %q echoes personal data %q", err, personal)
				}
			}
		})
	}
}

// pad adds an unknown field to a document so that it is exactly n bytes.
func pad(doc string, n int) string {
	const prefix = `,"pad":""}`
	short := n - len(doc) - len(prefix) + 1
	return strings.TrimSuffix(doc, "}") + `,"pad":"` + strings.Repeat("p", short) + `"}`
}

func TestDecodeFields(t *testing.T) {
	t.Parallel()
	data := `{"id":"j-1","user_id":"u-1","channel":"push","to":"` + strings.Repeat("ab", 32) + `","body":"hi \u2028 \"there\"",` +
		`"title":"T","data":{"b":"2","a":"1"},"provider":"fcm","expires_at":"2030-01-02T03:04:05.5+01:00","created_at":"2030-01-02T00:00:00Z","x":1}`
	j, err := queue.Decode("notify.jobs.push.high", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	want := queue.Job{
		ID: "j-1", UserID: "u-1", Channel: "push", To: strings.Repeat("ab", 32), Body: "hi \u2028 \"there\"",
		Title: "T", Data: map[string]string{"a": "1", "b": "2"}, Provider: "fcm",
		ExpiresAt: time.Date(2030, 1, 2, 2, 4, 5, 5e8, time.UTC), CreatedAt: time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC),
	}
	if diff := jobDiff(&want, j); diff != "" {
		t.Fatalf("decoded job differs: %s", diff)
	}
	out, err := j.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	const wantJSON = `{"id":"j-1","user_id":"u-1","channel":"push","to":"` + "abababababababababababababababababababababababababababababababab" + `","body":"hi ` + "\u2028" + ` \"there\"",` +
		`"title":"T","data":{"a":"1","b":"2"},"provider":"fcm","expires_at":"2030-01-02T02:04:05.5Z","created_at":"2030-01-02T00:00:00Z"}`
	if string(out) != wantJSON {
		t.Fatalf("Marshal:\n got %s\nwant %s", out, wantJSON)
	}
	if len(out) > len(data) {
		t.Errorf("re-encoding grew the job from %d to %d bytes", len(data), len(out))
	}
}

func TestValidateGoBuiltJobs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		change  func(j *queue.Job)
		wantErr string
	}{
		{"valid", func(*queue.Job) {}, ""},
		{"no subject to match", func(j *queue.Job) { j.Channel, j.To = "email", "a@example.com" }, ""},
		{"missing user", func(j *queue.Job) { j.UserID = "" }, "user_id: required"},
		{"invalid UTF-8 in the title", func(j *queue.Job) { j.Title = "\xff" }, "title: must be valid UTF-8"},
		{"invalid UTF-8 in the body", func(j *queue.Job) { j.Body = "a\xffb" }, "body: must be valid UTF-8"},
		{"invalid UTF-8 in data", func(j *queue.Job) { j.Data = map[string]string{"k": "\xff"} }, "data: keys and values must be valid UTF-8"},
		{"year 10000", func(j *queue.Job) { j.ExpiresAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, "expires_at: must be between years 0000 and 9999 in UTC"},
		{"negative year", func(j *queue.Job) { j.CreatedAt = time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC) }, "created_at: must be between years 0000 and 9999 in UTC"},
		{"encoding over 64 KiB", func(j *queue.Job) { j.Title = strings.Repeat("t", queue.MaxJobBytes) }, "encoded job is 65644 bytes, more than 65536"},
		{"control characters escape to over 64 KiB", func(j *queue.Job) {
			j.Body = strings.Repeat("\x01", queue.MaxBodyBytes)
			j.Title = strings.Repeat("\x01", 8000)
		}, "encoded job is 146393 bytes, more than 65536"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j := job("sms", "go-1")
			tt.change(j)
			err := j.Validate()
			_, merr := j.Marshal()
			if tt.wantErr == "" {
				if err != nil || merr != nil {
					t.Fatalf("Validate: %v, Marshal: %v; want both nil", err, merr)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("Validate: %v, want %q", err, tt.wantErr)
			}
			if merr == nil || merr.Error() != tt.wantErr {
				t.Fatalf("Marshal: %v, want %q", merr, tt.wantErr)
			}
		})
	}
}

func TestMarshalRoundTripsThroughDecode(t *testing.T) {
	t.Parallel()
	loc := time.FixedZone("odd", 5*3600+1800+17) // seconds in the offset: encoded in UTC
	j := &queue.Job{
		ID: "rt:1", UserID: "ü\u2028ser", Channel: "email", To: "ada@example.com",
		Body: "line1\nline2\t\"quoted\" \\ \x00\x1f\u007f </script> \u2029", Title: "<b>&</b>",
		Data: map[string]string{"z": "", "\x01": "ctl"}, Provider: "smtp",
		ExpiresAt: time.Date(2031, 5, 6, 7, 8, 9, 123, loc), CreatedAt: time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC),
	}
	out, err := j.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := queue.Decode(queue.JobSubject("email", true), out)
	if err != nil {
		t.Fatalf("Decode(Marshal(j)): %v\n%s", err, out)
	}
	if diff := jobDiff(j, back); diff != "" {
		t.Fatal(diff)
	}
	var generic map[string]any
	if err := json.Unmarshal(out, &generic); err != nil {
		t.Fatalf("encoding/json rejects Marshal's output: %v", err)
	}
}

// jobDiff describes how two jobs differ; times compare as instants and a
// nil data map equals an empty one.
func jobDiff(want, got *queue.Job) string {
	var d []string
	cmp := func(name string, a, b any) {
		if a != b {
			d = append(d, fmt.Sprintf("%s: want %q, got %q", name, a, b))
		}
	}
	cmp("id", want.ID, got.ID)
	cmp("user_id", want.UserID, got.UserID)
	cmp("channel", want.Channel, got.Channel)
	cmp("to", want.To, got.To)
	cmp("body", want.Body, got.Body)
	cmp("title", want.Title, got.Title)
	cmp("provider", want.Provider, got.Provider)
	if len(want.Data) != len(got.Data) {
		d = append(d, fmt.Sprintf("data: want %v, got %v", want.Data, got.Data))
	}
	for k, v := range want.Data {
		if gv, ok := got.Data[k]; !ok || gv != v {
			d = append(d, fmt.Sprintf("data[%q]: want %q, got %q", k, v, gv))
		}
	}
	if !want.ExpiresAt.Equal(got.ExpiresAt) {
		d = append(d, fmt.Sprintf("expires_at: want %v, got %v", want.ExpiresAt, got.ExpiresAt))
	}
	if !want.CreatedAt.Equal(got.CreatedAt) {
		d = append(d, fmt.Sprintf("created_at: want %v, got %v", want.CreatedAt, got.CreatedAt))
	}
	return strings.Join(d, "; ")
}

func TestSubjects(t *testing.T) {
	t.Parallel()
	if got := queue.JobSubject("sms", false); got != "notify.jobs.sms" {
		t.Errorf("JobSubject normal: %q", got)
	}
	if got := queue.JobSubject("push", true); got != "notify.jobs.push.high" {
		t.Errorf("JobSubject high: %q", got)
	}
	if got := queue.DeadSubject("email"); got != "notify.dead.email" {
		t.Errorf("DeadSubject: %q", got)
	}
	if got := queue.SuppressedSubject("sms"); got != "notify.suppressed.sms" {
		t.Errorf("SuppressedSubject: %q", got)
	}
	for subject, want := range map[string]string{
		"notify.jobs.sms":       "sms",
		"notify.jobs.sms.high":  "sms",
		"notify.jobs.a.b.c":     "a",
		"notify.jobs.":          "",
		"notify.jobs":           "",
		"notify.dead.sms":       "",
		"":                      "",
		"garbage":               "",
		"notify.jobs.fa$x.high": "fa$x",
	} {
		if got := queue.ChannelOf(subject); got != want {
			t.Errorf("ChannelOf(%q) = %q, want %q", subject, got, want)
		}
	}
	for subject, want := range map[string]bool{
		"notify.jobs.sms.high": true, "notify.jobs.sms": false, "notify.jobs.high": false,
		"notify.jobs.sms.high.x": false, "notify.jobs..high": false, "other.sms.high": false,
	} {
		if got := queue.IsHigh(subject); got != want {
			t.Errorf("IsHigh(%q) = %v, want %v", subject, got, want)
		}
	}
}

func TestDecodeFilledCompletesBeforeTheRules(t *testing.T) {
	t.Parallel()
	// Both paths: a well-formed job (fast) and one with a duplicate unknown
	// key (valid, but only the strict path reads it).
	for _, data := range []string{
		`{"user_id":"u1","channel":"sms","to":"+14155550123","body":"hi"}`,
		`{"user_id":"u1","channel":"sms","to":"+14155550123","body":"hi","x":1,"x":2}`,
	} {
		j, err := queue.DecodeFilled("", []byte(data), func(j *queue.Job) error {
			if j.ID == "" {
				j.ID = "generated-1"
			}
			j.Tenant = "acme"
			return nil
		})
		if err != nil || j.ID != "generated-1" || j.Tenant != "acme" {
			t.Fatalf("DecodeFilled(%s) = %+v, %v; want the id and tenant filled in", data, j, err)
		}
		_, err = queue.DecodeFilled("", []byte(data), func(*queue.Job) error {
			return &queue.InvalidError{Field: "tenant", Rule: "not yours"}
		})
		var ie *queue.InvalidError
		if !errors.As(err, &ie) || ie.Field != "tenant" {
			t.Fatalf("DecodeFilled with a refusing fill: %v, want its error", err)
		}
		// Without the fill, the id is still required.
		if _, err := queue.Decode("", []byte(data)); !errors.As(err, &ie) || ie.Field != "id" {
			t.Fatalf("Decode without an id: %v, want id: required", err)
		}
	}
}
