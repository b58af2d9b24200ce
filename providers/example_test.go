package providers_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
)

func ExampleSegments() {
	fmt.Println(providers.Segments("Your code is 493817"))
	fmt.Println(providers.Segments(strings.Repeat("a", 160)))
	fmt.Println(providers.Segments(strings.Repeat("a", 161)))
	fmt.Println(providers.Segments(strings.Repeat("€", 81))) // escape characters take two septets
	fmt.Println(providers.Segments("Привет 👋"))              // not GSM-7: UCS-2, 70 per segment
	fmt.Println(providers.Segments(strings.Repeat("ж", 71)))
	// Output:
	// 1
	// 1
	// 2
	// 2
	// 1
	// 2
}

func ExampleParseRetryAfter() {
	now := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, v := range []string{"120", "Sat, 01 Jun 2030 12:00:30 GMT", "Sun, 06 Nov 1994 08:49:37 GMT", "86400", "soon"} {
		d, ok := providers.ParseRetryAfter(v, now)
		fmt.Println(d, ok)
	}
	// Output:
	// 2m0s true
	// 30s true
	// 0s true
	// 1h0m0s true
	// 0s false
}

func ExampleMask() {
	fmt.Println(providers.Mask("sms", "+447911123456"))
	fmt.Println(providers.Mask("email", "alice@example.com"))
	fmt.Println(providers.Mask("push", "f3aKx9Qz4bL0-device-token-of-the-phone"))
	// Output:
	// +4479•••••56
	// a•••@example.com
	// f3aKx9…
}

func ExampleNewRegistry() {
	cfgs := []providers.Config{{Name: "dev", Channel: "sms", Default: true, Kind: "log", Rate: 10, Unit: "segments"}}
	r, err := providers.NewRegistry(cfgs, providers.Options{
		Stdout: os.Stdout,
		Now:    func() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()

	p, cfg, _ := r.Default("sms")
	m := &providers.Message{Job: queue.Job{ID: "j1", UserID: "u1", Channel: "sms", To: "+447911123456", Body: strings.Repeat("a", 200)}}
	fmt.Println("cost:", cfg.Cost(m))
	if err := p.Send(context.Background(), m); err != nil {
		fmt.Println(err)
	}
	// Output:
	// cost: 2
	// {"time":"2030-01-01T00:00:00Z","provider":"dev","id":"j1","user_id":"u1","channel":"sms","to":"+4479•••••56","body_chars":200,"segments":2}
}

func ExampleRateLimitedError() {
	var err error = &providers.RateLimitedError{Provider: "sms-gateway", Status: 429,
		Detail: "HTTP 429 Too Many Requests", RetryAfter: 3 * time.Second, Explicit: true}

	var rl *providers.RateLimitedError
	switch {
	case errors.As(err, &rl):
		fmt.Println("pause the provider for", rl.RetryAfter)
	case errors.Is(err, providers.ErrPermanent):
		fmt.Println("dead-letter")
	case errors.Is(err, providers.ErrTransient):
		fmt.Println("retry with backoff")
	}
	fmt.Println(errors.Is(err, providers.ErrRateLimited), providers.StatusClass(err))
	// Output:
	// pause the provider for 3s
	// true 4xx
}

func ExampleAPNsID() {
	fmt.Println(providers.APNsID("8E3D1A5C-2B4F-4C6D-9E8F-0A1B2C3D4E5F")) // a UUID is kept
	fmt.Println(providers.APNsID("job-42"))                               // anything else: its version-5 UUID
	fmt.Println(providers.APNsID("job-42"))                               // stable: a retry carries the same apns-id
	// Output:
	// 8e3d1a5c-2b4f-4c6d-9e8f-0a1b2c3d4e5f
	// 2120edd1-23d8-5583-97dc-651420d1082a
	// 2120edd1-23d8-5583-97dc-651420d1082a
}

func ExampleSMTPMessageID() {
	fmt.Println(providers.SMTPMessageID("job-42", "example.com"))
	fmt.Println(providers.SMTPMessageID("order:7.retry", "example.com"))
	// Output:
	// <job-42@example.com>
	// <order=3A7=2Eretry@example.com>
}
