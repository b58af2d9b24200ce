package client_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/client"
	"github.com/notifier/notifier/internal/localenv"
)

// Publish a one-time code on the priority lane, the same job again (a
// duplicate, dropped by JetStream), a tenant's marketing job (on a fair
// lane), and an invalid job (refused before anything is sent).
func Example() {
	srv, err := localenv.StartNATS() // an embedded JetStream server; yours runs nats-server -js
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if err := client.EnsureStreams(ctx, js, 1); err != nil { // notifier run makes them too
		fmt.Println(err)
		return
	}

	c := client.New(js)
	otp := &client.Job{ID: "otp-7f3a", UserID: "u42", Channel: "sms", To: "+447700900123", Body: "Your code is 123456"}
	res, err := c.Publish(ctx, otp, client.High())
	fmt.Println(res.Subject, res.Duplicate, err)

	res, err = c.Publish(ctx, otp, client.High()) // a retry: the same id
	fmt.Println(res.Subject, res.Duplicate, err)

	res, _ = c.Publish(ctx, &client.Job{ID: "promo-41", UserID: "u7", Channel: "email", To: "u7@example.com",
		Body: "20% off today", Tenant: "acme", Category: client.Marketing})
	fmt.Println(regexp.MustCompile(`\.f\.\d+\.`).ReplaceAllString(res.Subject, ".f.<lane>."))

	_, err = c.Publish(ctx, &client.Job{ID: "bad-1", UserID: "u42", Channel: "sms", To: "12345", Body: "hi"})
	var invalid *client.InvalidError
	fmt.Println(errors.As(err, &invalid), invalid.Field)
	// Output:
	// notify.jobs.sms.high false <nil>
	// notify.jobs.sms.high true <nil>
	// notify.jobs.email.f.<lane>.marketing
	// true to
}
