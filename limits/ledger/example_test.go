package ledger_test

import (
	"context"
	"fmt"
	"time"

	"github.com/notifier/notifier/limits/ledger"
)

// A job is sent once: the first delivery claims it and records it sent; a
// redelivery of the same id finds it sent and is not sent again.
func ExampleMemory() {
	ctx := context.Background()
	l := ledger.NewMemory(24 * time.Hour)

	c, _ := l.Claim(ctx, "order-42", "web-1/1", 30*time.Second)
	fmt.Println("first delivery:", c.Status == ledger.Claimed)
	_ = l.Sent(ctx, "order-42", "web-1/1")

	c, _ = l.Claim(ctx, "order-42", "web-2/7", 30*time.Second)
	fmt.Println("redelivery already sent:", c.Status == ledger.AlreadySent)
	// Output:
	// first delivery: true
	// redelivery already sent: true
}
