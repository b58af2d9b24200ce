package dispatch

import (
	"math"
)

// Categories (SPEC §2, §4): a job is transactional or marketing. A job
// names its category, or takes its lane's (the .marketing and
// .transactional lanes, and the priority lane, which is transactional), or
// its channel's (categories.<channel>, transactional when left out). The
// category picks the job's per-user cap (user_limits.<channel>.<category>,
// when set, instead of the channel's) and, through its lane, how the fetch
// loop shares a channel's budget: a provider's reserve.transactional keeps
// a share of it for the transactional jobs (see plan).

// marketingSuffix keys the marketing jobs a process holds for a channel
// in Dispatcher.busy (channel + marketingSuffix).
const marketingSuffix = "/marketing"

// reserve is the share of channel ch's budget kept for its transactional
// jobs: the largest reserve.transactional of its providers.
func reserve(live *liveConfig, ch string) float64 {
	r := 0.0
	for _, p := range live.providers.All() {
		if p.Channel == ch {
			r = max(r, p.TransactionalReserve())
		}
	}
	return r
}

// marketingCap is how many marketing jobs of a channel with budget this
// process may hold while its transactional jobs wait: the budget less the
// reserved share, at least one job kept for the transactional ones when
// there is a reserve at all (a small budget would round it away).
func marketingCap(budget int, share float64) int {
	if share <= 0 {
		return budget
	}
	kept := max(1, int(math.Ceil(share*float64(budget))))
	return max(0, budget-kept)
}
