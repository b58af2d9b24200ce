package sleep_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/notifier/notifier/internal/sleep"
)

func TestFor(t *testing.T) {
	if err := sleep.For(t.Context(), time.Millisecond); err != nil {
		t.Errorf("a sleep that ran out: %v, want nil", err)
	}
	if err := sleep.For(t.Context(), 0); err != nil {
		t.Errorf("no sleep on a live context: %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	if err := sleep.For(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("a sleep on an ended context: %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("a sleep on an ended context took %s", took)
	}
	if err := sleep.For(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("no sleep on an ended context: %v, want context.Canceled", err)
	}
}
