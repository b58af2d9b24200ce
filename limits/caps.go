package limits

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/userlimit"
)

// Categories (SPEC §2, §4): a job is transactional or marketing. A job
// names its category, or takes its lane's (the .marketing and
// .transactional lanes, and the priority lane, which is transactional), or
// its channel's (categories.<channel>, transactional when left out). The
// category picks the job's per-user cap (user_limits.<channel>.<category>,
// when set, instead of the channel's).

// CategoryCap names the per-user cap of one category's jobs on a channel.
type CategoryCap struct {
	Channel  string
	Category queue.Category
}

// Caps are the per-user caps and the channels' categories of one
// configuration.
type Caps struct {
	Channels   map[string]userlimit.Rule      // user_limits.<channel>
	Categories map[CategoryCap]userlimit.Rule // user_limits.<channel>.<category>
	Defaults   map[string]queue.Category      // categories.<channel>
}

// Validate checks every rule and category, reporting every problem at once.
func (c Caps) Validate() error {
	var errs []error
	for _, ch := range slices.Sorted(maps.Keys(c.Channels)) {
		if err := c.Channels[ch].Validate(); err != nil {
			errs = append(errs, fmt.Errorf("user limit %s: %w", ch, err))
		}
	}
	keys := slices.SortedFunc(maps.Keys(c.Categories), func(a, b CategoryCap) int {
		return cmp.Or(cmp.Compare(a.Channel, b.Channel), cmp.Compare(a.Category, b.Category))
	})
	for _, k := range keys {
		if !queue.ValidCategory(k.Category) {
			errs = append(errs, fmt.Errorf("user limit %s.%s: %q is not a category", k.Channel, k.Category, k.Category))
			continue
		}
		if err := c.Categories[k].Validate(); err != nil {
			errs = append(errs, fmt.Errorf("user limit %s.%s: %w", k.Channel, k.Category, err))
		}
	}
	for ch, cat := range c.Defaults {
		if !queue.ValidCategory(cat) {
			errs = append(errs, fmt.Errorf("category of channel %s: %q is not one of transactional, marketing", ch, cat))
		}
	}
	return errors.Join(errs...)
}

// ChannelCategory is the category of channel ch's normal lane.
func (c Caps) ChannelCategory(ch string) queue.Category {
	if cat := c.Defaults[ch]; cat != "" {
		return cat
	}
	return queue.Transactional
}

// LaneCategory is the category of the jobs of a queue of channel ch on
// lane (a delivery's Lane: "" for the normal lane, whose jobs take their
// channel's).
func (c Caps) LaneCategory(ch string, lane queue.Category) queue.Category {
	if lane != "" {
		return lane
	}
	return c.ChannelCategory(ch)
}

// CategoryOf is job j's category, delivered on lane. A job that names a
// category other than its channel's on the normal lane is invalid: it is
// in the other category's queue, where the share kept for transactional
// jobs would count it wrong (Decode already refuses one that does not
// match a category's lane).
func (c Caps) CategoryOf(j *queue.Job, lane queue.Category) (queue.Category, error) {
	want := c.LaneCategory(j.Channel, lane)
	if j.Category != "" && j.Category != want {
		return "", &queue.InvalidError{Field: "category", Rule: fmt.Sprintf(
			"%s does not match the subject: %s carries %s's %s jobs (publish on %s)",
			j.Category, queue.KeyFor(j.Channel, j.Tenant, false, "").Subject(), j.Channel, want,
			queue.KeyFor(j.Channel, j.Tenant, false, j.Category).Subject())}
	}
	return want, nil
}

// CapFor is the per-user cap of a job of channel ch and category cat: the
// category's own rule when set, else the channel's; capped false when
// neither is. key is what the cap counts under: the user on the channel,
// or on the channel's category ("sms:marketing") for a category's rule,
// whose count is its own.
func (c Caps) CapFor(ch string, cat queue.Category, user string) (rule userlimit.Rule, capped bool, key userlimit.Key) {
	if r, ok := c.Categories[CategoryCap{ch, cat}]; ok {
		return r, true, userlimit.Key{Channel: ch + ":" + string(cat), User: user}
	}
	r, ok := c.Channels[ch]
	return r, ok, userlimit.Key{Channel: ch, User: user}
}
