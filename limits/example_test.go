package limits_test

import (
	"context"
	"fmt"
	"time"

	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/userlimit"
)

// One admission asks the ledger, the per-user cap and the provider's queue
// at once; on a Redis set (limits.Redis) the same Ask rides on a pipeline
// shared with the other workers.
func ExampleSet_Admit() {
	ctx := context.Background()
	set, err := limits.Memory(limits.Config{DedupTTL: 24 * time.Hour}, 1)
	if err != nil {
		panic(err)
	}
	ask := limits.Ask{
		ID: "order-42", Owner: "web-1/1", Lease: 30 * time.Second, Channel: "sms",
		Capped: true, CapKey: userlimit.Key{Channel: "sms", User: "u-1"},
		Rule:    userlimit.Rule{Algorithm: userlimit.FixedWindow, Limit: 1, Window: time.Hour, OnExceed: userlimit.Drop},
		Reserve: true, Provider: "sms-gateway", Contract: limits.Contract(providers.Config{Name: "sms-gateway", Rate: 100, MaxQueueDelay: 10 * time.Second}), Cost: 1,
	}
	adm, err := set.Admit(ctx, ask)
	if err != nil {
		panic(err)
	}
	fmt.Println("claimed:", adm.Claim.Status == ledger.Claimed, "cap allows:", adm.Cap.Allowed, "slot reserved:", adm.Reserved && adm.Slot.OK)
	_ = set.RecordSent(ctx, []limits.Sent{{ID: "order-42", Owner: "web-1/1"}}, nil)

	ask.ID, ask.Owner = "order-43", "web-1/2"
	adm, _ = set.Admit(ctx, ask)
	fmt.Println("the user's second job this hour allowed:", adm.Cap.Allowed)
	// Output:
	// claimed: true cap allows: true slot reserved: true
	// the user's second job this hour allowed: false
}
