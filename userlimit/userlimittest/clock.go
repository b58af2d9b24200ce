package userlimittest

import "time"

// Start is where every clock of the suite starts: midnight UTC, a multiple of
// every whole-second window since the Unix epoch, so fixed windows of the
// step tables begin exactly there.
var Start = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)
