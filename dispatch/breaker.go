package dispatch

import (
	"context"
	"errors"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/notifier/notifier/providers"
)

// Breaker settings: a provider whose last breakerTrip calls all failed
// transiently is not called for breakerOpen, then probed with one call.
const (
	breakerTrip = 10
	breakerOpen = 5 * time.Second
)

// breaker is one provider's circuit breaker (sony/gobreaker). Only transient
// failures count against a provider: a 2xx, a permanent refusal, a 429 and
// a refused sender all prove it is answering (the last pauses it instead). A send cut short by our own stop does not count.
type breaker struct {
	cb *gobreaker.TwoStepCircuitBreaker[struct{}]
}

func newBreaker(provider string) *breaker {
	return &breaker{cb: gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        provider,
		MaxRequests: 1,
		Timeout:     breakerOpen,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= breakerTrip },
		IsSuccessful: func(err error) bool {
			return err == nil || errors.Is(err, providers.ErrPermanent) || errors.Is(err, providers.ErrRateLimited) ||
				errors.Is(err, providers.ErrSender)
		},
		IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) },
	})}
}

// allow asks to make one call; done reports its result. ok is false while
// the breaker is open (or half-open with its probe already out).
func (b *breaker) allow() (done func(error), ok bool) {
	done, err := b.cb.Allow()
	return done, err == nil
}

// open reports whether calls are refused now.
func (b *breaker) open() bool { return b.cb.State() == gobreaker.StateOpen }

// State is the breaker's state name: closed, half-open or open.
func (b *breaker) State() string { return b.cb.State().String() }
