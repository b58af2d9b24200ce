package userlimittest

import (
	"time"

	"github.com/notifier/notifier/testenv"
)

// Start is where every clock of the suite starts: midnight UTC, a multiple of
// every whole-second window since the Unix epoch, so fixed windows of the
// step tables begin exactly there.
var Start = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// Clock is a fake clock for limiters under test (testenv.Clock). It moves
// only when told. Safe for concurrent use.
type Clock = testenv.Clock

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock { return testenv.NewClock(start) }
