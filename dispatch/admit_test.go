package dispatch

import (
	"testing"
	"time"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/providers"
)

// TestSpeculationFollowsDenials: the admission stops reserving a slot ahead
// for a channel whose cap lately denies often (each denial would waste a
// slot), and starts again once denials are rare; uncapped channels always
// reserve ahead.
func TestSpeculationFollowsDenials(t *testing.T) {
	t.Parallel()
	d := wire(Options{Now: time.Now})
	if !d.pipe.speculate("sms", true) || !d.pipe.speculate("push", false) {
		t.Fatal("no denials yet: must reserve ahead")
	}
	for i := 0; i < 20; i++ {
		d.pipe.noteCap("sms", false)
	}
	if d.pipe.speculate("sms", true) {
		t.Fatalf("after 20 denials in a row (rate %.2f): must not reserve ahead", d.pipe.denials.rate("sms"))
	}
	if !d.pipe.speculate("sms", false) || !d.pipe.speculate("email", true) {
		t.Fatal("another channel, or no cap: must reserve ahead")
	}
	for i := 0; i < 400; i++ {
		d.pipe.noteCap("sms", true)
	}
	if !d.pipe.speculate("sms", true) {
		t.Fatalf("after 400 allowed (rate %.3f): must reserve ahead again", d.pipe.denials.rate("sms"))
	}
	d.be.holdSlotsFor(time.Minute)
	if d.pipe.speculate("push", false) {
		t.Fatal("while slots are held after a switch of limit sets: must not reserve ahead")
	}
}

// TestMinRatesAgree: the configuration refuses the rates the leaky queue
// cannot pace, so `check` catches what a run would fail on.
func TestMinRatesAgree(t *testing.T) {
	t.Parallel()
	if providers.MinRate != leaky.MinRate {
		t.Fatalf("providers.MinRate %g, leaky.MinRate %g: a rate check would pass what the queue refuses", providers.MinRate, leaky.MinRate)
	}
}
