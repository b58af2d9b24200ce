//go:build !race

package dispatch

// raceDetector is whether the tests were built with -race.
const raceDetector = false

// measuringPlaces is how many tests that measure run at once (measures):
// without -race (make measure), where most of them wait on a contract's
// pace and use a fraction of a core, three (four ran a latency test
// beside a burner at 0.72 of its reference).
const measuringPlaces = 3
