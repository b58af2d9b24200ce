package dispatch

import (
	"context"
	"fmt"
	"time"

	"github.com/notifier/notifier/internal/text"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/suppress"
)

// ReasonSuppressedRecipient: the job's recipient is on the suppression
// list (a provider refused it as gone); no request was made.
const ReasonSuppressedRecipient = "suppressed_recipient"

// suppressedRecipient ends a job whose recipient is on the suppression
// list: suppressed, unsent, its dead letter naming the entry (the
// provider, when, until when), never the address.
func (pl *pipeline) suppressedRecipient(ctx context.Context, jb *job, l *limits.Set) end {
	detail := "the recipient is on the suppression list: a provider refused it as gone; `notifier suppression remove` lifts it"
	if l != nil && l.Suppress != nil {
		if e, ok, err := l.Suppress.Get(ctx, jb.j.Channel, jb.toHash); err == nil && ok {
			detail = fmt.Sprintf("the recipient is on the suppression list since %s, until %s: provider %s refused it as gone (%s); `notifier suppression remove` lifts it",
				e.At.Format(time.RFC3339), e.Until.Format(time.RFC3339), e.Provider, text.OneLine(e.Detail, 160))
		}
	}
	return suppressed(ReasonSuppressedRecipient, detail)
}

// listGone puts a job's recipient that the provider refused as gone on the
// suppression list, and says so in the detail of its dead letter.
func (pl *pipeline) listGone(ctx context.Context, jb *job, detail string) string {
	if pl.o.SuppressTTL <= 0 || jb.toHash == "" {
		return detail
	}
	e := suppress.Entry{Channel: jb.j.Channel, Hash: jb.toHash, Provider: jb.provider, Detail: detail,
		Job: jb.key, Tenant: jb.dl.Tenant, Category: string(jb.category)}
	err := pl.be.with(ctx, jb, func(l *limits.Set) error {
		if l.Suppress == nil {
			return nil
		}
		return l.Suppress.Add(ctx, e, pl.o.SuppressTTL)
	})
	if err != nil {
		jb.log().Warn("put a recipient the provider refused as gone on the suppression list", "err", err)
		return detail
	}
	pl.m.Suppressions.WithLabelValues(jb.j.Channel).Inc()
	return detail + fmt.Sprintf("; the recipient is now suppressed for %s (its next jobs are not sent)", text.Duration(pl.o.SuppressTTL))
}
