//go:build !race

package dispatch

// raceDetector is whether the tests were built with -race.
const raceDetector = false

// measuringPlaces is how many tests that measure run at once (measures):
// without -race (make measure), where most of them wait on a contract's
// pace and use a fraction of a core, three (four ran a latency test
// beside a burner at 0.72 of its reference).
const measuringPlaces = 3

// aloneAtOnce is how many tests that measure alone run at once
// (measuresAlone): without -race, where each takes a fraction of a core,
// two (one after another they were the last 82 s of the measure step;
// two at a time, beside a burner, their ratios 0.84–1.09 of their
// references).
const aloneAtOnce = 2
