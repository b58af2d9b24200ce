package suppress_test

import (
	"context"
	"fmt"
	"time"

	"github.com/notifier/notifier/limits/suppress"
)

// A provider said the recipient is gone: list it, and ask before the next
// send.
func Example() {
	ctx := context.Background()
	list := suppress.NewMemory(nil)
	h := suppress.Hash("sms", "+14155550123")
	if err := list.Add(ctx, suppress.Entry{Channel: "sms", Hash: h, Provider: "twilio", Detail: "error 21610: replied STOP"}, 720*time.Hour); err != nil {
		panic(err)
	}
	listed, _ := list.Has(ctx, "sms", suppress.Hash("sms", "+14155550123"))
	other, _ := list.Has(ctx, "sms", suppress.Hash("sms", "+14155550124"))
	fmt.Println(listed, other)
	removed, _ := list.Remove(ctx, "sms", h)
	listed, _ = list.Has(ctx, "sms", h)
	fmt.Println(removed, listed)
	// Output:
	// true false
	// true false
}
