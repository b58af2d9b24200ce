package inspect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/digest"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/userlimit"
)

// UserAnswer is what Inspector.User says of one (channel, user).
type UserAnswer struct {
	Channel string `json:"channel"`
	// Category is the jobs' category asked about (the channel's when not
	// named): its own cap (user_limits.<channel>.<category>) if it has one,
	// else the channel's, applies.
	Category string    `json:"category"`
	User     string    `json:"user"`
	At       time.Time `json:"at"` // when it was read, on the Redis clock
	// Capped is false when the channel has no per-user cap: every job is
	// allowed, and Rule and the counts below are empty.
	Capped bool  `json:"capped"`
	Rule   *Rule `json:"rule,omitempty"`
	// Allowed says whether a job of the user published now would pass the
	// cap (for the instant it is decided for, which is its send slot: see
	// the provider's next free slot).
	Allowed bool `json:"allowed"`
	// Used and Remaining are the window's jobs counted and left now
	// (Used + Remaining = limit; for token_bucket, tokens spent and left;
	// for sliding_window, the weighted estimate rounded).
	Used      int `json:"used"`
	Remaining int `json:"remaining"`
	// NextAllowed is when the user's next job would be allowed if nothing
	// else is admitted meanwhile: now, or a later instant. With on_exceed
	// drop a job before it is suppressed; with defer it waits until then.
	NextAllowed When `json:"next_allowed"`
	// Held is, with on_exceed digest, how many of the user's jobs the cap
	// holds for the next digest, and DigestDue when it goes out (the next
	// allowed instant; absent when none is held).
	Held      int   `json:"held,omitempty"`
	DigestDue *When `json:"digest_due,omitempty"`
	// Denials are the cap's denials of the user counted for `notifier top`.
	Denials Denials `json:"denials"`
}

// Rule is a per-user cap as configured.
type Rule struct {
	Limit         int     `json:"limit"`
	Window        string  `json:"window"`
	WindowSeconds float64 `json:"window_seconds"`
	Algorithm     string  `json:"algorithm"`
	OnExceed      string  `json:"on_exceed"`
	// Mode is enforce, or shadow: the cap is counted, never enforced (a job
	// it denies is sent; Denials are then the ones it would have made).
	Mode string `json:"mode"`
}

// Denials are a user's cap denials per UTC hour, as `notifier top` counts
// them (on the dispatchers' clocks).
type Denials struct {
	// ThisHour is the current UTC hour's (top --window 1h).
	ThisHour int64 `json:"this_hour"`
	// Last24h is the 24 UTC hours up to this one (top's default window).
	Last24h int64 `json:"last_24h"`
	// ByHour are those hours with denials, the latest first.
	ByHour []HourDenials `json:"by_hour"`
}

// HourDenials is one UTC hour's denials.
type HourDenials struct {
	Hour    time.Time `json:"hour"`
	Denials int64     `json:"denials"`
}

// User answers for user on channel (jobs of the channel's category): see
// UserIn.
func (in *Inspector) User(ctx context.Context, channel, user string) (UserAnswer, error) {
	return in.UserIn(ctx, channel, "", user)
}

// UserIn answers for user's jobs of category cat ("": the channel's) on
// channel: the cap's rule, how much of the window is used, when the next
// job would be allowed, and the user's recent denials. It decides nothing:
// the cap is asked with Peek.
func (in *Inspector) UserIn(ctx context.Context, channel string, cat queue.Category, user string) (UserAnswer, error) {
	if !queue.IsChannel(channel) {
		return UserAnswer{}, fmt.Errorf("explain user: channel %q is not sms, push or email: %w", channel, ErrInvalid)
	}
	if cat != "" && !queue.ValidCategory(cat) {
		return UserAnswer{}, fmt.Errorf("explain user: category %q is not transactional or marketing: %w", cat, ErrInvalid)
	}
	if user == "" || len(user) > 256 {
		return UserAnswer{}, fmt.Errorf("explain user: a user id is 1 to 256 characters, got %d: %w", len(user), ErrInvalid)
	}
	caps := limits.Caps{Channels: in.cfg.UserLimits, Categories: in.cfg.CategoryLimits, Defaults: in.cfg.Categories}
	if cat == "" {
		cat = caps.ChannelCategory(channel)
	}
	a := UserAnswer{Channel: channel, Category: string(cat), User: user, Allowed: true}
	rule, capped, key := caps.CapFor(channel, cat, user)
	var err error
	if a.Denials, err = in.denials(ctx, channel, user, capped && rule.Mode == userlimit.Shadow, time.Now()); err != nil {
		return a, err
	}
	var res userlimit.Result
	if capped {
		rule = rule.WithDefaults()
		a.Capped = true
		a.Rule = &Rule{Limit: rule.Limit, Window: rule.Window.String(), WindowSeconds: rule.Window.Seconds(),
			Algorithm: string(rule.Algorithm), OnExceed: string(rule.OnExceed), Mode: string(rule.Mode)}
		if res, err = in.users.Peek(ctx, key, rule); err != nil {
			return a, fmt.Errorf("explain user: %w", err)
		}
	}
	// The clock is read after the cap: the instant named is then never
	// before the one the cap meant (at most a round trip after it).
	if a.At, err = in.redisNow(ctx); err != nil {
		return a, fmt.Errorf("explain user: %w", err)
	}
	a.NextAllowed = whenAfter(a.At, 0)
	if !capped {
		return a, nil
	}
	a.Allowed = res.Allowed
	if res.Allowed {
		a.Remaining = min(res.Remaining+1, rule.Limit) // Peek's is what a job now would leave
	}
	a.Used = rule.Limit - a.Remaining
	a.NextAllowed = whenAfter(a.At, res.RetryAfter)
	if rule.OnExceed == userlimit.Digest && in.digests != nil {
		if a.Held, err = in.digests.Held(ctx, digest.KeyOf(key.Channel, "", key.User)); err != nil {
			return a, fmt.Errorf("explain user: %w", err)
		}
		if a.Held > 0 {
			due := a.NextAllowed
			a.DigestDue = &due
		}
	}
	return a, nil
}

// denials reads user's denials on channel (those a cap in shadow mode
// would have made, when shadow) in the 24 UTC hours up to now's,
// in one round trip.
func (in *Inspector) denials(ctx context.Context, channel, user string, shadow bool, now time.Time) (Denials, error) {
	hour := now.UTC().Truncate(time.Hour)
	pipe := in.rdb.Pipeline()
	cmds := make([]*redis.FloatCmd, 24)
	for i := range cmds {
		cmds[i] = pipe.ZScore(ctx, limits.DenialsKey(in.cfg.Limits.Prefix, channel, shadow, hour.Add(-time.Duration(i)*time.Hour)), user)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Denials{}, fmt.Errorf("explain user: read denials on %s: %w", channel, err)
	}
	d := Denials{ByHour: []HourDenials{}}
	for i, c := range cmds {
		n, err := c.Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return Denials{}, fmt.Errorf("explain user: read denials on %s: %w", channel, err)
		}
		if i == 0 {
			d.ThisHour = int64(n)
		}
		d.Last24h += int64(n)
		d.ByHour = append(d.ByHour, HourDenials{Hour: hour.Add(-time.Duration(i) * time.Hour), Denials: int64(n)})
	}
	return d, nil
}
