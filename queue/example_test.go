package queue_test

import (
	"errors"
	"fmt"

	"github.com/notifier/notifier/queue"
)

func ExampleDecode() {
	data := []byte(`{"id":"otp-42","user_id":"u-7","channel":"sms","to":"+14155550123","body":"Your code is 123456",` +
		`"expires_at":"2030-01-02T03:04:05Z","campaign":"ignored"}`)
	j, err := queue.Decode("notify.jobs.sms.high", data)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(j.ID, j.UserID, j.Channel, j.ExpiresAt)
	// Output: otp-42 u-7 sms 2030-01-02 03:04:05 +0000 UTC
}

func ExampleDecode_invalid() {
	for _, data := range []string{
		`{"id":"otp-42","channel":"sms","to":"+14155550123","body":"Your code is 123456"}`,
		`{"id":"otp-42","user_id":"u-7","channel":"fax","to":"+14155550123","body":"Your code is 123456"}`,
		`{"id":"otp-42","user_id":"u-7","channel":"sms","to":"0800 123 456","body":"Your code is 123456"}`,
		`{"id":"otp-42",`,
	} {
		_, err := queue.Decode("notify.jobs.sms", []byte(data))
		var ie *queue.InvalidError
		if errors.As(err, &ie) {
			fmt.Printf("field %q: %v\n", ie.Field, err)
		}
	}
	// Output:
	// field "user_id": user_id: required
	// field "channel": channel: "fax" does not match subject channel "sms"
	// field "to": to: must be an E.164 phone number: + then 7 to 15 digits, the first not 0
	// field "": not valid JSON (unexpected end of input)
}

func ExampleJobSubject() {
	fmt.Println(queue.JobSubject("sms", false))
	fmt.Println(queue.JobSubject("push", true))
	fmt.Println(queue.ChannelOf("notify.jobs.push.high"))
	fmt.Println(queue.DeadSubject("email"), queue.SuppressedSubject("email"))
	// Output:
	// notify.jobs.sms
	// notify.jobs.push.high
	// push
	// notify.dead.email notify.suppressed.email
}

// A job's encoding: the fields it has in SPEC §2's order, data keys sorted,
// times in UTC. JSON does not validate (Marshal does, then encodes alike).
func ExampleJob_JSON() {
	j := queue.Job{ID: "otp-42", UserID: "u-7", Channel: "sms", To: "+14155550123", Body: "<b>Your code</b>",
		Data: map[string]string{"z": "1", "a": "2"}}
	data, err := j.JSON()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(data))
	// Output: {"id":"otp-42","user_id":"u-7","channel":"sms","to":"+14155550123","body":"<b>Your code</b>","data":{"a":"2","z":"1"}}
}
